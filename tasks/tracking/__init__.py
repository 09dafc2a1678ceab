"""MLflow: the training run and its nested iteration runs (tracker), what the flows log to them (run_log),
the model registry (model_registry) and a moved run folder's own store (mlflow_store)."""

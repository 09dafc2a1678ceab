"""Text environments: the interface and registry (base) and the built-in families (household)."""

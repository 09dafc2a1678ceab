"""Training backends (registered by name) plus batching and the supervised warm-start.

`get_trainer("torch")` imports the backend on first use; nothing heavy is imported here.
"""
from rla_core.training.base import TRAINERS, Trainer, get_trainer, register_trainer

__all__ = ["TRAINERS", "Trainer", "get_trainer", "register_trainer"]

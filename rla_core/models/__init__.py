"""Models: a tokenizer trained in-process and causal LMs built tiny or loaded from local HF dirs.

Light on purpose: nothing heavy is imported until a name is used
(`from rla_core.models.factory import build_model` works just as well).
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "train_tokenizer": "rla_core.models.tokenizer",
    "build_model": "rla_core.models.factory",
    "build_or_load": "rla_core.models.factory",
    "load_pretrained": "rla_core.models.factory",
    "load_tokenizer": "rla_core.models.factory",
    "save_pretrained": "rla_core.models.factory",
    "atomic_directory": "rla_core.models.factory",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'rla_core.models' has no attribute '{name}'")
    return getattr(importlib.import_module(_EXPORTS[name]), name)

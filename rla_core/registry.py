"""One small registry idiom for every family of variants (trainer, rollout engine, environment,
rewriter, object store): register by name, look up by name, and an unknown name fails listing the
valid ones. Built-in variants may live in modules imported on first use (heavy ones such as vLLM load
only when asked for), named by module path so that no import circle is needed."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Generic, TypeVar

from rla_core.errors import UnknownName

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, config_key: str, builtin: Mapping[str, str] | None = None) -> None:
        self.kind, self.config_key = kind, config_key
        self._builtin = dict(builtin or {})  # name -> module that registers it when imported
        self._entries: dict[str, T] = {}

    def add(self, name: str, value: T) -> T:
        """Register `value` as `name`; a second, different value under the same name is an error."""
        if name in self._entries and self._entries[name] is not value:
            raise ValueError(f"{self.kind} '{name}' is already registered by {self._entries[name]!r}")
        self._entries[name] = value
        return value

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of `add`."""
        return lambda value: self.add(name, value)

    def names(self) -> list[str]:
        return sorted(set(self._entries) | set(self._builtin))

    def get(self, name: str) -> T:
        if name not in self._entries and name in self._builtin:
            importlib.import_module(self._builtin[name])  # registers `name`
        if name not in self._entries:
            raise UnknownName(f"unknown {self.kind} '{name}' ({self.config_key}); valid: {self.names()}")
        return self._entries[name]

    __getitem__ = get

    def __contains__(self, name: object) -> bool:
        return name in self._entries or name in self._builtin

"""The rollout-engine interface and its registry.

An engine turns batches of prompt token ids into sampled continuations and keeps the exact generated
ids. Backends (transformers, vLLM) register by name; callers only use `get_engine`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 = greedy
    seed: int = 0
    n: int = 1  # samples per prompt; engines share the prompt's prefill across them


@dataclass
class Generation:
    token_ids: list[int]  # generated ids, ending with eos when the model stopped by itself
    text: str  # decoded without special tokens
    logprobs: list[float] = field(default_factory=list)  # model log-probs (temperature 1) of token_ids


class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, progress: Callable[[int], None] | None = None
    ) -> list[Generation]:
        """`params.n` Generations per prompt, grouped by prompt in prompt order (len = n·len(prompts)).
        `progress(k)` is called with the number of generations just completed."""

    def load_weights(self, model: Any) -> None:
        """Make the engine sample from new weights (after a training update)."""


ENGINES: dict[str, Callable[..., RolloutEngine]] = {}


def register_engine(name: str) -> Callable[[Callable[..., RolloutEngine]], Callable[..., RolloutEngine]]:
    def wrap(factory: Callable[..., RolloutEngine]) -> Callable[..., RolloutEngine]:
        ENGINES[name] = factory
        return factory

    return wrap


# Built-in backends, imported on first use so that heavy engines load only when asked for.
_BUILTIN = {"transformers": "rla_core.rollout.hf_engine", "vllm": "rla_core.rollout.vllm_engine"}


def get_engine(name: str) -> Callable[..., RolloutEngine]:
    """The engine factory registered as `name`; the error lists the valid names."""
    if name not in ENGINES and name in _BUILTIN:
        import importlib

        importlib.import_module(_BUILTIN[name])  # registers `name`
    try:
        return ENGINES[name]
    except KeyError:
        raise KeyError(f"unknown rollout backend '{name}'; valid: {sorted(set(ENGINES) | set(_BUILTIN))}") from None

"""The rollout-engine interface and its registry.

An engine turns batches of prompt token ids into sampled continuations and keeps the exact generated
ids. Backends (transformers, vLLM) register by name; callers only use `get_engine`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from rla_core.registry import Registry


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

    def __post_init__(self) -> None:
        # Whatever a tokenizer decoded, the text must be storable as UTF-8 JSON: a lone surrogate (which
        # no UTF-8 holds, and pydantic refuses to write) becomes U+FFFD. Valid text is left as it is.
        if not self.text.isascii():
            self.text = self.text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


class RolloutEngine(Protocol):
    def generate(
        self, prompts: list[list[int]], params: SamplingParams, progress: Callable[[int], None] | None = None
    ) -> list[Generation]:
        """`params.n` Generations per prompt, grouped by prompt in prompt order (len = n·len(prompts)).
        `progress(k)` is called with the number of generations just completed."""

    def load_weights(self, model: Any) -> None:
        """Make the engine sample from new weights (after a training update)."""


# Built-in backends are imported on first use, so that heavy engines load only when asked for.
ENGINES: Registry[Callable[..., RolloutEngine]] = Registry(
    "rollout backend", "rollout.backend",
    {"transformers": "rla_core.rollout.hf_engine", "vllm": "rla_core.rollout.vllm_engine"})


def register_engine(name: str) -> Callable[[Callable[..., RolloutEngine]], Callable[..., RolloutEngine]]:
    return ENGINES.register(name)


def get_engine(name: str) -> Callable[..., RolloutEngine]:
    """The engine factory registered as `name`; the error lists the valid names."""
    return ENGINES.get(name)

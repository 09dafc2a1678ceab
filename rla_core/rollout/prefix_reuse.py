"""Reusing a prompt's keys and values from the same episode's previous turn (`rollout.prefix_reuse`).

Consecutive turns of a multi-turn episode start with the same tokens: the chat template's head, the goal,
and (until the window of past turns slides) the earlier turns. `PrefixStore` keeps each episode's last
prompt ids and the keys and values the prefill computed for them; the next turn's prefill copies the
longest common prefix into its KV cache and runs the model over the rest only.

Rows of a chunk are left-padded to the chunk's longest prompt (width W). With U_r tokens of row r not in the
store, the prefill runs over the last max(U_r) columns; the columns before them come from the store (zeros
under the padding). A row whose own reuse is longer recomputes the part of it inside those columns.

Not exact: PyTorch's CPU attention blocks its sums by the sequence length, so a prefix's states computed in
an earlier, shorter or longer pass differ in the last bits from those of one pass over the whole prompt
(docs/performance.md measures by how much), and samples change. Off by default.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

import torch

# Per layer: keys and values of one prompt, [kv heads, prompt length, head dim], in the model's dtype.
LayerStates = list[tuple[torch.Tensor, torch.Tensor]]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two id lists."""
    length = 0
    for x, y in zip(a, b):
        if x != y:
            break
        length += 1
    return length


@dataclass
class PrefixStore:
    """Each episode's (key's) last prompt and its per-layer states; counts what the prefills computed."""

    entries: dict[Hashable, tuple[list[int], LayerStates]] = field(default_factory=dict)
    prompt_tokens: int = 0  # the prompts' own tokens
    reused_tokens: int = 0  # of those, copied from the store instead of computed
    computed_columns: int = 0  # rows × prefill columns run through the model (padding included)
    padded_columns: int = 0  # rows × the chunks' widths: what the prefill without the store runs

    def reusable(self, key: Hashable, prompt: list[int]) -> int:
        """How many leading tokens of `prompt` the store holds states for (never the whole prompt: the
        prefill must run over at least its last token to give the next token's logits)."""
        entry = self.entries.get(key)
        if entry is None:
            return 0
        return min(common_prefix(entry[0], prompt), len(prompt) - 1)

    def states(self, key: Hashable) -> LayerStates:
        return self.entries[key][1]

    def put(self, key: Hashable, prompt: list[int], states: LayerStates) -> None:
        self.entries[key] = (list(prompt), states)

    def forget(self, keys: list[Hashable]) -> None:
        for key in keys:
            self.entries.pop(key, None)

    def count(self, lengths: list[int], start: int) -> None:
        """Record one chunk's prefill: prompts of `lengths` left-padded to the longest, run from column `start`."""
        width = max(lengths)
        self.prompt_tokens += sum(lengths)
        self.reused_tokens += sum(max(0, start - (width - length)) for length in lengths)
        self.computed_columns += len(lengths) * (width - start)
        self.padded_columns += len(lengths) * width

    def metrics(self) -> dict[str, float]:
        """prefix_reused_rate: share of prompt tokens taken from the store; prefix_prefill_saved: share of
        the padded prefill columns not run (what the time saving follows)."""
        return {"prefix_reused_rate": self.reused_tokens / max(self.prompt_tokens, 1),
                "prefix_prefill_saved": 1 - self.computed_columns / max(self.padded_columns, 1)}


def require_reuse(engine: Any) -> None:
    """Refuse an engine whose `generate` takes no `prefixes` (rollout.prefix_reuse needs one)."""
    if not getattr(engine, "reuses_prefixes", False):
        raise ValueError(f"rollout.prefix_reuse: the {type(engine).__name__} cannot reuse prompt prefixes "
                         "(the transformers backend can; vLLM caches prefixes by itself)")


def prefill_start(lengths: list[int], reuse: list[int]) -> int:
    """The first column the prefill runs over: width − the largest count of tokens not in the store."""
    width = max(lengths)
    return width - max(length - kept for length, kept in zip(lengths, reuse))


def fill_prefix(cache: Any, store: PrefixStore, keys: list[Hashable], lengths: list[int], start: int,
                dtype: torch.dtype) -> None:
    """Write columns [0, start) of every layer of `cache` (`PreallocatedLayer`s): each row's stored states
    for the prompt positions that fall there, zeros under the padding."""
    width = max(lengths)
    if start == 0:
        return
    # a row with columns before `start` has that many stored tokens (prefill_start); the longest row has some
    shaped = next(key for key, length in zip(keys, lengths) if width - length < start)
    for index, layer in enumerate(cache.layers):
        first = store.states(shaped)[index][0]
        heads, dim = first.shape[0], first.shape[-1]
        keys_part = torch.zeros((len(keys), heads, start, dim), dtype=dtype, device=first.device)
        values_part = torch.zeros_like(keys_part)
        for row, (key, length) in enumerate(zip(keys, lengths)):
            offset = width - length  # the row's first prompt column
            if offset >= start:
                continue
            stored_keys, stored_values = store.states(key)[index]
            keys_part[row, :, offset:start] = stored_keys[:, :start - offset]
            values_part[row, :, offset:start] = stored_values[:, :start - offset]
        layer.prefill(keys_part, values_part)


def keep_prompts(cache: Any, store: PrefixStore, keys: list[Hashable], prompts: list[list[int]],
                 dtype: torch.dtype) -> None:
    """After the prefill: store every row's prompt states (its own columns, without the padding)."""
    width = max(len(p) for p in prompts)
    for row, (key, prompt) in enumerate(zip(keys, prompts)):
        offset = width - len(prompt)
        states = [(layer.prompt_keys(row, offset).to(dtype, copy=True),
                   layer.prompt_values(row, offset).to(dtype, copy=True)) for layer in cache.layers]
        store.put(key, prompt, states)

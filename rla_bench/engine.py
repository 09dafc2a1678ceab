"""`rla bench engine`: this project's transformers engine against plain `model.generate` (and vLLM where
installed) on the same real policy prompts and the same weights.

Both decode exactly `max_new_tokens` tokens per sequence (end-of-sequence suppressed in both: the
engine is given an eos id no token has, `generate` gets min_new_tokens = max_new_tokens), so they do the
same work and their token rates compare directly. Sampling is plain: temperature 1, no top-k/top-p.
- generated tokens/s = sequences × max_new_tokens / wall seconds of the whole call;
- prefill tokens/s = Σ prompt tokens over all sequences / wall seconds of a call that decodes 1 token
  (the engine prefills a prompt once for its n samples; `generate` expands the prompt n times first).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rla_bench.common import load_role, machine, median, policy_prompts, print_table, require_run, seconds, \
    torch_threads, write_result
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.hf_engine import TransformersEngine, left_pad


@dataclass
class _NoEosTokenizer:
    """The run's tokenizer with an end-of-sequence id that no token has: fixed-length decoding."""

    inner: Any

    @property
    def eos_token_id(self) -> int:
        return -1

    @property
    def pad_token_id(self) -> int:
        return self.inner.pad_token_id

    def decode(self, ids: list[int], **kwargs: Any) -> str:
        return self.inner.decode(ids, **kwargs)


def ours(model: Any, tokenizer: Any, prompts: list[list[int]], n: int, new_tokens: int) -> list:
    engine = TransformersEngine(model, _NoEosTokenizer(tokenizer), batch_size=len(prompts) * n)
    return engine.generate(prompts, SamplingParams(new_tokens, 1.0, seed=0, n=n))


def plain_generate(model: Any, tokenizer: Any, prompts: list[list[int]], n: int, new_tokens: int) -> torch.Tensor:
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              num_return_sequences=n, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)


def run(run_dir: str, prompts: int = 32, ns: tuple[int, ...] = (1, 8), new_tokens: int = 6, repeats: int = 5,
        threads: int | None = None, out: str | None = None) -> dict:
    root = require_run(run_dir)
    torch_threads(threads)
    model, tokenizer = load_role(root)
    prompt_ids, _, _ = policy_prompts(root, prompts, tokenizer)
    lengths = [len(p) for p in prompt_ids]
    print(f"{len(prompt_ids)} real policy prompts of {min(lengths)}-{max(lengths)} tokens "
          f"(mean {sum(lengths) / len(lengths):.0f}); {torch.get_num_threads()} threads; median of {repeats}")
    check = ours(model, tokenizer, prompt_ids[:2], 2, new_tokens)
    if any(len(g.token_ids) != new_tokens for g in check):
        raise RuntimeError("fixed-length decoding failed: the engine stopped early")
    backends = {"ours (transformers engine)": ours, "model.generate": plain_generate}
    vllm_note = _vllm_note()
    rows, results = [], []
    for n in ns:
        sequences = len(prompt_ids) * n
        prompt_tokens = sum(lengths) * n
        measured = {}
        for name, fn in backends.items():
            decode = seconds(lambda: fn(model, tokenizer, prompt_ids, n, new_tokens), repeats)
            prefill = seconds(lambda: fn(model, tokenizer, prompt_ids, n, 1), repeats)
            measured[name] = {"seconds": median(decode), "generated_tokens_per_s": sequences * new_tokens / median(decode),
                              "prefill_seconds": median(prefill), "prefill_tokens_per_s": prompt_tokens / median(prefill),
                              "all_seconds": decode, "all_prefill_seconds": prefill}
        base = measured["model.generate"]["generated_tokens_per_s"]
        for name, m in measured.items():
            m["speedup_vs_generate"] = m["generated_tokens_per_s"] / base
            rows.append([n, name, sequences, m["seconds"], m["generated_tokens_per_s"], m["prefill_tokens_per_s"],
                         f"{m['speedup_vs_generate']:.2f}×"])
        rows.append([n, "vLLM", sequences, "-", "-", "-", vllm_note])
        results.append({"n": n, "sequences": sequences, "backends": measured})
    print_table(f"engine: {len(prompt_ids)} prompts × n, {new_tokens} new tokens each (EOS suppressed in both)",
                ["n", "backend", "sequences", "median s", "generated tok/s", "prefill tok/s", "vs generate"], rows)
    result = {"part": "engine", "run": str(root), "machine": machine(), "prompts": len(prompt_ids),
              "prompt_tokens": {"min": min(lengths), "max": max(lengths), "mean": sum(lengths) / len(lengths)},
              "new_tokens": new_tokens, "repeats": repeats, "results": results, "vllm": vllm_note}
    write_result(out, Path("bench/results/engine.json"), result)
    return result


def _vllm_note() -> str:
    try:
        import vllm  # noqa: F401
    except Exception as err:  # ImportError, or a broken install on a machine without its GPU runtime
        return f"not measured: vllm not importable here ({type(err).__name__})"
    if not torch.cuda.is_available():
        return "not measured: vllm is installed but there is no GPU (its CPU build: infra/vllm-cpu.md)"
    return "not measured: run pytest -m 'gpu and vllm' tests/gpu on the GPU machine"

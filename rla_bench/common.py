"""What the bench parts share: the run whose warm-started policy they use, real policy prompts from its
tasks, the machine's measured matmul peak, timing and the table/JSON output."""
from __future__ import annotations

import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import torch

from rla_core.errors import BadValue, MissingFile


def torch_threads(threads: int | None) -> int:
    """Set torch's CPU threads when given; return the number in use."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


def machine() -> dict[str, Any]:
    """What a bench's numbers depend on: the CPU by name (the architecture alone does not tell an Intel Xeon
    with AMX from an AMD EPYC), whether it multiplies bfloat16 natively, threads and versions."""
    from rla_core.models.precision import cpu_has_native_bf16
    from rla_core.numerics import cpu_model

    return {"python": platform.python_version(), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "processor": platform.processor() or platform.machine(), "cpu_model": cpu_model(),
            "cpu_native_bf16": cpu_has_native_bf16(), "aten_capability": torch.backends.cpu.get_cpu_capability(),
            "cuda": torch.cuda.is_available()}


def seconds(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> list[float]:
    """Wall seconds of `repeats` calls of fn after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def matmul_peak(repeats: int = 5, bf16: bool = False) -> dict[str, float]:
    """Matmul GFLOP/s on this machine: a large square GEMM (the limit) and the tiny models' shape (every
    row of a rollout batch times a [d, 4d] weight) in float32; with `bf16`, the large GEMM in bfloat16 too
    (`large_gemm_2048_bf16`: the limit of a model that samples in bfloat16). FLOPs counted as 2·M·K·N per
    product."""
    shapes = {"large_gemm_2048": (2048, 2048, 2048, torch.float32),
              "tiny_model_38400x96x256": (38400, 96, 256, torch.float32)}
    if bf16:
        shapes["large_gemm_2048_bf16"] = (2048, 2048, 2048, torch.bfloat16)
    result = {}
    for name, (m, k, n, dtype) in shapes.items():
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        times = seconds(lambda: a @ b, repeats, warmup=2)
        result[name] = 2 * m * k * n / min(times) / 1e9
    return result


def counted_call(fn: Callable[[], Any]) -> tuple[Any, int]:
    """fn's result and the FLOPs of the matmuls, convolutions and attention kernels that the call executes
    (torch's FlopCounterMode); the call is not timed."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        result = fn()
    return result, int(counter.get_total_flops())


def counted_flops(fn: Callable[[], Any]) -> int:
    """FLOPs of one call of fn (`counted_call`), its result dropped."""
    return counted_call(fn)[1]


def require_run(run_dir: str | Path) -> Path:
    """The run folder whose warm-started models the bench uses; the error says how to make one."""
    root = Path(run_dir)
    if not (root / "models" / "bootstrap" / "policy").is_dir():
        raise MissingFile(f"no warm-started policy in {root}/models/bootstrap/policy: run "
                          f"`rla bootstrap --config configs/quickstart.yaml` (or `rla quickstart`) first, or pass "
                          "--run with a run folder that has one")
    return root.resolve()


def load_role(run_dir: Path, role: str = "policy", sampling: bool = False) -> tuple[Any, Any]:
    """The run's warm-started `role` and its tokenizer; with `sampling`, cast to the dtype the run samples
    in (`models.dtype`: bfloat16 for a pretrained model on a CPU with native bfloat16)."""
    from rla_core.models.precision import for_sampling
    from tasks.common import load_model
    from tasks.paths import run_config

    model, tokenizer = load_model(run_dir / "models" / "bootstrap" / role)
    if sampling:
        model = for_sampling(model, run_config(run_dir).models.compute_dtype(role))
    return model, tokenizer


def decode_attention(run_dir: Path, role: str = "policy") -> str:
    """The engine's `rollout.decode_attention` for `role` in this run (auto resolved)."""
    from tasks.paths import run_config

    cfg = run_config(run_dir)
    return cfg.rollout.decode_attention_for(getattr(cfg.models, role).path is not None)


def policy_prompts(run_dir: Path, count: int, tokenizer: Any, coding: bool = False
                   ) -> tuple[list[list[int]], list[str], list[list[str]]]:
    """(ids, texts, admissible commands) of the turn-0 policy prompts of the run's first `count` seed tasks, built exactly as a rollout builds them
    (the environment's own first observation and admissible commands); cycled when there are fewer tasks.
    With `coding`, a coding run is accepted too: its prompts are the policy's program prompts, built and
    encoded as its rollout does, and it has no commands (empty lists)."""
    from rla_core.adaptation.store import TaskStore
    from rla_core.envs.base import get_environment
    from rla_core.models.chat import encode_prompts
    from rla_core.rollout.prompts import policy_prompt
    from tasks.common import bind_environment
    from tasks.paths import RunPaths, run_config
    from tasks.settings import setting_for

    cfg = run_config(run_dir)
    bind_environment(cfg, run_dir)
    episodic = setting_for(cfg).episodic
    if not episodic and not coding:
        raise BadValue("the bench uses a game run's policy prompts (e.g. runs/quickstart); "
                       f"{run_dir} is a {cfg.environment.name} run")
    tasks = TaskStore.load(RunPaths.of(run_dir).seed_store).active_tasks()
    if not tasks:
        raise BadValue(f"{run_dir} has no seed tasks")
    if not episodic:
        from rla_core.envs.coding.prompts import policy_prompt as program_prompt

        texts = [program_prompt(tasks[index % len(tasks)].spec) for index in range(count)]
        return encode_prompts(tokenizer, texts, add_special_tokens=False), texts, [[] for _ in texts]
    family = get_environment(cfg.environment.name)
    texts, commands = [], []
    for index in range(count):
        episode = family.make(tasks[index % len(tasks)].spec)
        observation = episode.reset()
        commands.append(episode.admissible_commands())
        texts.append(policy_prompt(episode.goal, [], observation, commands[-1], cfg.rollout.history_turns))
    return encode_prompts(tokenizer, texts), texts, commands


def print_table(title: str, headers: list[str], rows: list[list[Any]]) -> None:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
        return str(value)

    print(f"\n{title}")
    print("| " + " | ".join(headers) + " |")
    print("|" + "|".join("---" for _ in headers) + "|")
    for row in rows:
        print("| " + " | ".join(cell(v) for v in row) + " |")


def write_result(path: str | Path | None, default: Path, result: dict) -> Path:
    out = Path(path) if path else default
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out}")
    return out

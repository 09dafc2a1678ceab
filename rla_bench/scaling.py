"""`rla bench scaling`: iteration wall time as one size grows at a time, from one prepared scratch run.

The run is prepared once (seed, warm-start, baseline); each point copies it, changes one setting in the
copy's config and runs iteration 1 (no held-out evaluation). Axes:
- episodes (K × N): rollout.tasks_per_iteration grows, N fixed;
- m: judge samples per step;
- turns: rollout.max_steps, the episode horizon;
- width: hidden size of the policy and the judge. A warm-start exists only at the configured width, so
  every point of this axis (the configured width too) uses freshly initialised models of that width;
  their episodes differ from the warm-started ones (mostly invalid answers, played to the horizon), so
  this axis is compared within itself only.
  For a pretrained model (`models.*.path`) the axis is its depth instead: the warm-started policy and judge
  keep their first L decoder blocks (and their own embedding, final norm and head), the rest dropped.
  Their answers change too; the axis is again compared within itself only.
The coding setting is single-turn: its m is the judge's unit tests per problem (coding.tests_per_problem),
and its horizon axis is the program's length in tokens (rollout.max_new_tokens, axis `turns`).
`--warm-start RUN` copies the warm start of a run with the same config (`rla bench iteration`).
Per point: wall seconds, the stages' own seconds, the work done (episodes, policy steps, judge
verdicts) and seconds per unit of that work relative to the axis's first point (1.00 = linear).
"""
from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from rla_bench.common import machine, print_table, torch_threads, write_result
from rla_bench.iteration import prepare_scratch, stage_seconds

# the setting-independent axes; m and turns are the setting's own (`Setting.scaling_axes`)
EPISODES = ("rollout.tasks_per_iteration", (8, 16, 32, 64))
WIDTH = ("models.*.hidden_size", (48, 96, 192, 384))
LAYERS = ("models.*.num_hidden_layers", (6, 12, 18, 30))  # the width axis of a pretrained model: its depth


def axes_for(cfg: Any) -> dict[str, tuple[str, tuple[int, ...]]]:
    """The setting's axes (its own m and horizon: `Setting.scaling_axes`); a pretrained model's width axis
    is its depth (LAYERS)."""
    from tasks.settings import setting_for

    pretrained = cfg.models.policy.path is not None or cfg.models.judge.path is not None
    return {"episodes": EPISODES, **setting_for(cfg).scaling_axes, "width": LAYERS if pretrained else WIDTH}


def units_for(cfg: Any) -> dict[str, str]:
    """The work each axis's seconds are divided by (a key of a point's counts)."""
    from tasks.settings import setting_for

    return {"episodes": "episodes", "m": "judge_verdicts", "turns": setting_for(cfg).horizon_unit,
            "width": "policy_steps"}


def keep_layers(directory: Path, layers: int) -> None:
    """Rewrite the model saved in `directory` with only its first `layers` decoder blocks."""
    from rla_core.models.factory import load_pretrained, save_pretrained
    from rla_core.training.trainable import decoder_layers

    model, tokenizer = load_pretrained(directory)
    blocks = decoder_layers(model)
    if not 1 <= layers <= len(blocks):
        from rla_core.errors import BadValue

        raise BadValue(f"{directory}: cannot keep {layers} of its {len(blocks)} decoder blocks")
    del blocks[layers:]
    model.config.num_hidden_layers = layers
    if getattr(model.config, "layer_types", None):
        model.config.layer_types = model.config.layer_types[:layers]
    save_pretrained(model, tokenizer, directory)


def _set(tree: dict, dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for key in parents:
        tree = tree[key]
    tree[leaf] = value


def _fresh_models(run_dir: Path, cfg: Any, width: int) -> None:
    """Replace the warm-started policy and judge by freshly initialised models `width` wide (MLP scaled
    with it, heads and layers kept), with the run's tokenizer."""
    from rla_core.models.factory import build_model, load_tokenizer, save_pretrained

    for role in ("policy", "judge"):
        directory = run_dir / "models" / "bootstrap" / role
        tokenizer = load_tokenizer(directory)
        base = getattr(cfg.models, role)
        spec = base.model_copy(update={"hidden_size": width,
                                       "intermediate_size": max(8, base.intermediate_size * width // base.hidden_size)})
        model = build_model(spec, tokenizer, cfg.run.seed)
        shutil.rmtree(directory)
        save_pretrained(model, tokenizer, directory)


def _point(base: Path, run_name: str, scratch: Path, key: str, value: int, cfg: Any, keep: bool) -> dict:
    from flows.rl_iteration import rl_iteration
    from rla_core.config import load_run_config
    from rla_core.schemas import Trajectory
    from tasks.paths import RunPaths
    from tasks.settings import setting_for
    from tasks.storage.files import read_records

    point = scratch / f"{key.replace('.', '_').replace('*', 'x')}-{value}"
    shutil.copytree(base, point, symlinks=True)
    run_dir = point / run_name
    config_file = RunPaths.of(run_dir).config
    tree = yaml.safe_load(config_file.read_text())
    tree["run"]["output_dir"] = str(point)
    if key == "models.*.hidden_size":
        for role in ("policy", "judge"):
            tree["models"][role]["hidden_size"] = value
        _fresh_models(run_dir, cfg, value)
    elif key == LAYERS[0]:
        for role in ("policy", "judge"):
            keep_layers(run_dir / "models" / "bootstrap" / role, value)
    else:
        _set(tree, key, value)
    config_file.write_text(yaml.safe_dump(tree, sort_keys=False))
    start = time.perf_counter()
    rl_iteration(str(run_dir), 1)
    wall = time.perf_counter() - start
    trajectories = read_records(RunPaths.of(run_dir).it(1).trajectories, Trajectory)
    steps = sum(len(t.steps) for t in trajectories)
    point_cfg = load_run_config(config_file)
    verdicts = setting_for(point_cfg).judge_verdicts(point_cfg, trajectories)
    result = {"value": value, "wall_seconds": wall, "stages": stage_seconds(str(run_dir), 1),
              "episodes": len(trajectories), "policy_steps": steps, "judge_verdicts": verdicts,
              "generated_tokens": sum(len(s.response_ids) for t in trajectories for s in t.steps)}
    if not keep:
        shutil.rmtree(point, ignore_errors=True)
    return result


def run(configs: list[str], overrides: list[str], axes: list[str] | None = None, base_tasks: int = 16,
        threads: int | None = None, workdir: str | None = None, keep: bool = False, out: str | None = None,
        values: dict[str, tuple[int, ...]] | None = None, warm_start: str | None = None) -> dict:
    """`values` replaces an axis's default sizes (axis name → sizes)."""
    from rla_core.config import load_config

    torch_threads(threads)
    sets = [*overrides, f"rollout.tasks_per_iteration={base_tasks}"]
    table = axes_for(load_config(configs, sets))
    chosen = axes or list(table)
    unknown = [a for a in chosen if a not in table]
    if unknown:
        from rla_core.errors import BadValue

        raise BadValue(f"unknown scaling axis {unknown}; choose from {', '.join(table)}")
    scratch = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="rla-bench-scaling-"))
    results: dict[str, list[dict]] = {}
    try:
        base = scratch / "base"
        run_dir, cfg = prepare_scratch(configs, sets, base, 1, warm_start)
        run_name = Path(run_dir).name
        for axis in chosen:
            key, sizes = table[axis]
            results[axis] = []
            for value in (values or {}).get(axis, sizes):
                print(f"scaling {axis}: {key} = {value}")
                results[axis].append(_point(base, run_name, scratch, key, value, cfg, keep))
    finally:
        if not keep:
            shutil.rmtree(scratch, ignore_errors=True)
    rows = []
    for axis, points in results.items():
        unit = units_for(cfg)[axis]
        first = points[0]["wall_seconds"] / max(points[0][unit], 1)
        for p in points:
            per_unit = p["wall_seconds"] / max(p[unit], 1)
            p["seconds_per_unit"], p["unit"], p["relative_to_first"] = per_unit, unit, per_unit / first
            top = sorted(p["stages"].items(), key=lambda kv: -kv[1])[:3]
            rows.append([axis, p["value"], p["wall_seconds"], p["episodes"], p["policy_steps"], p["judge_verdicts"],
                         f"{1000 * per_unit:.1f} ms/{unit.rstrip('s').replace('_', ' ')}", f"{p['relative_to_first']:.2f}",
                         ", ".join(f"{n} {s:.1f}" for n, s in top)])
    print_table(f"scaling: iteration 1, base K = {base_tasks} tasks × N = {cfg.rollout.n}; one setting changed per row "
                f"({', '.join(f'{a}: {table[a][0]}' for a in results)})",
                ["axis", "value", "wall s", "episodes", "steps", "verdicts", "s per unit", "vs first", "largest stages (s)"],
                rows)
    result = {"part": "scaling", "config": configs, "overrides": overrides, "base_tasks": base_tasks,
              "machine": machine(), "warm_start": warm_start,
              "axes": {a: {"key": table[a][0], "points": results[a]} for a in results}}
    write_result(out, Path("bench/results/scaling.json"), result)
    return result

"""`rla eval --games DIR`: play every TextWorld game file in a folder with a run's policy.

Games are grouped into tiers by the sub-folder they lie in (DIR/easy/*.z8 -> tier "easy"; files
directly in DIR -> tier "."). Each game is checked first (its `.json` sidecar is there and its
walkthrough wins through the engine within the run's horizon); games that fail are listed with the
reason and left out, never silently. Every remaining game is played `episodes` times (greedy by default)
by the policy after `iteration`, and its steps are judged by the judge of that iteration against the
engine's progress labels, as the fixed judge benchmark is scored.

Results (per tier and overall: success rate with a 95 % Wilson interval, mean steps, the judge's
balanced accuracy and p+/p-) are written to eval/games-<name>/iter_<k>/ and logged to MLflow as
`eval_games/<name>/<tier>/<metric>` at step = iteration, with the table as an artifact.
"""
from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path

from rla_core.config import Config
from rla_core.envs.base import SpecError, get_environment
from rla_core.errors import BadValue, MissingFile
from rla_core.judge.benchmark import benchmark_metrics, score_benchmark, steps_of_trajectory
from rla_core.rollout.base import SamplingParams
from rla_core.schemas import Task
from tasks.common import bind_environment, eval_seed, progress_bar
from tasks.stages.engines import engine_for, rollout_tasks
from rla_core.stats import wilson
from tasks.paths import RunPaths, iteration_folder
from tasks.storage.files import write_json, write_records

# benchmark_metrics key -> the name in the games table (p+ = a good step judged good, p- = a bad one judged bad)
JUDGE_KEYS = {"balanced_acc": "balanced_acc", "p_pos": "p_plus", "p_neg": "p_minus", "mu": "mu"}


def collect_games(folder: Path) -> list[tuple[str, Path]]:
    """(tier, game file) for every .z8 under `folder`, sorted; tier = the sub-folder ("." at the top)."""
    if not folder.is_dir():
        raise MissingFile(f"--games: no folder {folder}")
    games = sorted(folder.rglob("*.z8"))
    if not games:
        raise MissingFile(f"--games: no TextWorld game (*.z8) under {folder}")
    return [(str(g.parent.relative_to(folder)), g) for g in games]


def _slug(folder: Path) -> str:
    resolved = folder.resolve()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", resolved.name).strip("-") or "games"
    return f"{name}-{hashlib.sha256(str(resolved).encode()).hexdigest()[:6]}"


def render_table(rows: dict[str, dict[str, float]]) -> str:
    lines = ["| tier | games | episodes | success | 95 % interval | mean steps | walkthrough | judge bal. acc | "
             "judge p+ | judge p- |", "|---|---|---|---|---|---|---|---|---|---|"]
    for tier, m in rows.items():
        lines.append(f"| {tier} | {int(m['games'])} | {int(m['episodes'])} | {m['success_rate']:.3f} | "
                     f"{m['success_low']:.3f}-{m['success_high']:.3f} | {m['mean_steps']:.2f} | "
                     f"{m['walkthrough_steps']:.2f} | {m.get('judge_balanced_acc', float('nan')):.3f} | "
                     f"{m.get('judge_p_plus', float('nan')):.3f} | {m.get('judge_p_minus', float('nan')):.3f} |")
    return "\n".join(lines)


# Over 60 lines: checks, then play, judge and tabulate, in the order `rla eval --games` reports them.
def evaluate_games(cfg: Config, run_dir: str | Path, iteration: int, games_dir: Path, episodes: int = 1,
                   temperature: float = 0.0) -> dict:
    """Play and judge every game under `games_dir` (module doc); returns the result dict."""
    if cfg.environment.name != "textworld":
        raise BadValue(f"--games plays TextWorld games: this run's environment is '{cfg.environment.name}' "
                       "(use a run of environment.name=textworld, e.g. configs/textworld.yaml)")
    if episodes < 1:
        raise BadValue(f"--episodes must be >= 1, got {episodes}")
    start = time.perf_counter()
    paths = RunPaths.of(run_dir)
    bind_environment(cfg, paths.root)
    family, horizon = get_environment("textworld"), cfg.rollout.max_steps
    found = collect_games(games_dir)
    specs = [{"game_file": str(path.resolve()), "step_limit": horizon} for _, path in found]
    family.prepare(specs)
    tasks, tiers, skipped = [], {}, []
    for (tier, path), spec in zip(found, specs):
        try:
            spec = family.validate(spec, horizon)
        except SpecError as err:
            skipped.append({"game": str(path), "reason": str(err)})
            continue
        task_id = f"game-{len(tasks):04d}-{family.content_hash(spec)[:8]}"
        tasks.append(Task(task_id=task_id, slot_id=task_id, env="textworld", spec=spec,
                          difficulty=family.difficulty(spec)))
        tiers[task_id] = tier
    if not tasks:
        raise BadValue(f"--games: none of the {len(found)} games under {games_dir} can be played: "
                       f"{skipped[0]['reason']}")
    policy, judge = paths.model_dir(iteration + 1, "policy"), paths.model_dir(iteration + 1, "judge")
    seed = eval_seed(cfg)
    trajectories, _ = rollout_tasks(paths, cfg, tasks, policy, episodes, temperature, seed, "games")
    steps = [s for t in trajectories for s in steps_of_trajectory(t, tiers[t.task_id])]
    engine, tokenizer = engine_for(cfg, paths.root, "judge", judge, cfg.judge.batch_size)
    params = SamplingParams(cfg.judge.max_new_tokens, cfg.judge.temperature, seed)
    with progress_bar(len(steps) * cfg.eval.benchmark_m, "games: judge", unit="verdict") as bar:
        verdicts, _ = score_benchmark(engine, tokenizer, steps, cfg.eval.benchmark_m, params,
                                      cfg.rollout.history_turns, progress=bar.update)
    by_task = {t.task_id: t for t in tasks}
    rows: dict[str, dict[str, float]] = {}
    for tier in sorted(set(tiers.values())) + ["all"]:
        played = [t for t in trajectories if tier == "all" or tiers[t.task_id] == tier]
        wins = sum(t.success for t in played)
        low, high = wilson(wins, len(played))
        mine = [(s, v) for s, v in zip(steps, verdicts) if tier == "all" or s.source == tier]
        judged = benchmark_metrics([s for s, _ in mine], [v for _, v in mine]) if mine else {}
        rows[tier] = {
            "games": float(len({t.task_id for t in played})), "episodes": float(len(played)),
            "success_rate": wins / len(played), "success_low": low, "success_high": high,
            "mean_steps": sum(len(t.steps) for t in played) / len(played),
            "walkthrough_steps": sum(by_task[t.task_id].difficulty for t in played) / len(played),
            **{f"judge_{name}": judged[key] for key, name in JUDGE_KEYS.items() if key in judged},
        }
    slug = _slug(games_dir)
    out = paths.root / "eval" / f"games-{slug}" / iteration_folder(iteration)
    out.mkdir(parents=True, exist_ok=True)
    write_records(out / "trajectories.jsonl", trajectories)
    table = render_table(rows)
    result = {"games_dir": str(games_dir.resolve()), "iteration": iteration, "episodes_per_game": episodes,
              "temperature": temperature, "tiers": rows, "skipped": skipped, "seconds": time.perf_counter() - start,
              "table": table, "folder": str(out)}
    write_json(out / "results.json", result)
    return result


def log_game_evaluation(run_dir: str, result: dict) -> None:
    """The per-tier metrics on MLflow (`eval_games/<name>/<tier>/<metric>`, step = iteration) and the table
    as `eval_games/<name>.md`, on the iteration's nested run (the training run for the warm-start)."""
    from tasks.tracking.run_log import tracker_for

    tracker = tracker_for(run_dir)
    slug, k = Path(result["folder"]).parent.name, result["iteration"]
    metrics = {f"eval_games/{slug}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', tier)}/{name}": value
               for tier, row in result["tiers"].items() for name, value in row.items()}
    tracker.log_metrics(metrics, step=k, iteration=k or None)
    tracker.log_text(result["table"] + "\n", f"eval_games/{slug}.md", iteration=k or None)

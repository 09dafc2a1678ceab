"""Results of an ablation (`rla ablation`): what every (row, seed) run measured, the summary table, the
paired differences, the curves plot, and the CSV/Markdown/PNG files.

Read from the run folders only (baseline/metrics.json, iterations/iter_k/<stage>/), so a summary can
be rebuilt at any time from what is on disk.
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rla_core.ablation import ROWS, mean_se, paired_differences
from rla_core.config import load_run_config
from tasks.paths import RunPaths
from tasks.settings import Setting, setting_for
from tasks.storage.files import is_done, write_text
from tasks.summaries import StageSummary, read_summary

SUCCESS = "heldout/success_rate"  # held-out success (pass@1 in coding)
DEV_SUCCESS = "dev/success_rate"  # the same on the dev split (eval.dev_file), where settings are chosen
BENCH_MU = "bench/mu"


@dataclass
class RunResult:
    """One (row, seed) run: held-out success and judge-benchmark curves (index 0 = the warm-start). The
    judge's benchmark metric is its setting's (`Setting.judge_metric`: balanced accuracy in the games, UT
    accuracy in coding)."""

    row: str
    seed: int
    run_dir: str
    iterations: int  # completed
    evaluated: list[int] = field(default_factory=list)  # the iteration of each evaluation (0 = warm-start)
    success: list[float] = field(default_factory=list)
    judge_bench: list[float] = field(default_factory=list)
    judge_metric: str = Setting.judge_metric[0]
    bench_mu: list[float] = field(default_factory=list)
    dev: list[float] = field(default_factory=list)  # dev success at each evaluation that measured it
    dev_at: list[int] = field(default_factory=list)  # the iteration of each dev value (0 = warm-start)
    weight: float = math.nan  # λ of the run (its setting's judge_weight_key)
    train_success: list[float] = field(default_factory=list)
    # the judge on each iteration's rollouts (Setting.judge_train_metric), nan where the stage did not log it
    train_judge: list[float] = field(default_factory=list)
    train_judge_metric: str = Setting.judge_train_metric[0]
    policy_steps: float = 0.0  # optimizer steps of the policy, summed over iterations
    judge_steps: float = 0.0
    policy_samples: float = 0.0  # samples trained on, summed
    judge_samples: float = 0.0
    episodes: float = 0.0  # trajectories rolled out, summed (compute/episodes of the data stage)
    tokens: float = 0.0  # generated + trained tokens, summed (compute/tokens)
    seconds: float = 0.0  # stage compute, summed

    @property
    def baseline(self) -> float:
        return self.success[0] if self.success else math.nan

    @property
    def final(self) -> float:
        return self.success[-1] if self.success else math.nan


def _metric(summary: StageSummary, key: str) -> float:
    return float(summary.metrics.get(key, 0.0))


def read_run(run_dir: Path, row: str, seed: int) -> RunResult:
    paths = RunPaths.of(run_dir)
    result = RunResult(row, seed, str(run_dir), 0)
    cfg = load_run_config(paths.config) if paths.config.is_file() else None
    setting = setting_for(cfg) if cfg is not None else setting_for("household")
    result.weight = setting.judge_weight(cfg).value if cfg is not None else math.nan
    result.judge_metric, judge_key = setting.judge_metric
    result.train_judge_metric, train_judge_key = setting.judge_train_metric
    baseline = paths.baseline / "metrics.json"
    evaluations = [json.loads(baseline.read_text())] if baseline.is_file() else []
    result.evaluated = [0] if evaluations else []
    for k in paths.completed_iterations():
        result.iterations = k
        metrics_file = paths.it(k).eval_metrics
        if metrics_file.is_file():
            evaluations.append(json.loads(metrics_file.read_text()))
            result.evaluated.append(k)
        result.train_success.append(_metric(read_summary(paths.stage(k, "rollout")), "rollout/success_rate"))
        judged = read_summary(paths.stage(k, "judge")).metrics
        result.train_judge.append(float(judged.get(train_judge_key, math.nan)))
        data_summary = read_summary(paths.stage(k, "data"))
        result.episodes += _metric(data_summary, "data/compute/episodes")
        result.tokens += _metric(data_summary, "data/compute/tokens")
        for role in ("policy", "judge"):
            update = read_summary(paths.it(k).trained(role))
            steps = getattr(result, f"{role}_steps") + _metric(update, f"train_{role}/optimizer_steps")
            setattr(result, f"{role}_steps", steps)
            trained = getattr(result, f"{role}_samples") + _metric(update, f"train_{role}/samples_trained")
            setattr(result, f"{role}_samples", trained)
        result.seconds += sum(read_summary(p).seconds or 0.0 for p in paths.iteration(k).iterdir()
                              if p.is_dir() and is_done(p))
    result.success = [m[SUCCESS] for m in evaluations if SUCCESS in m]
    result.judge_bench = [m[judge_key] for m in evaluations if judge_key in m]
    result.bench_mu = [m[BENCH_MU] for m in evaluations if BENCH_MU in m]
    result.dev = [m[DEV_SUCCESS] for m in evaluations if DEV_SUCCESS in m]
    result.dev_at = [k for k, m in zip(result.evaluated, evaluations) if DEV_SUCCESS in m]
    return result


def _fmt(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    """Mean ± standard error over seeds; a single seed's value alone, since one value has no spread to show."""
    mean, se = mean_se([v * scale for v in values])
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.{digits}f}" if len(values) == 1 else f"{mean:.{digits}f} ± {se:.{digits}f}"


def summary_markdown(results: list[RunResult], rows: list[str]) -> str:
    """The table (mean ± standard error over seeds) and the paired differences, as Markdown."""
    judge = sorted({r.judge_metric for r in results}) or ["judge benchmark"]
    lines = [f"| row | seeds | held-out before | held-out after | gain (points) | worst gain | {' / '.join(judge)} "
             "before → after | judge μ after | policy / judge optimizer steps |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key in rows:
        mine = [r for r in results if r.row == key and r.success]
        if not mine:
            continue
        gains = [100 * (r.final - r.baseline) for r in mine]
        bal_before = [r.judge_bench[0] for r in mine if r.judge_bench]
        bal_after = [r.judge_bench[-1] for r in mine if r.judge_bench]
        mu_after = [r.bench_mu[-1] for r in mine if r.bench_mu]
        steps = f"{_fmt([r.policy_steps for r in mine], digits=1)} / {_fmt([r.judge_steps for r in mine], digits=1)}"
        lines.append(
            f"| ({key}) {ROWS[key].label} | {len(mine)} | {_fmt([r.baseline for r in mine])} | "
            f"{_fmt([r.final for r in mine])} | {_fmt(gains, digits=1)} | {min(gains):+.1f} | "
            f"{_fmt(bal_before)} → {_fmt(bal_after)} | {_fmt(mu_after)} | {steps} |")
    lines += dev_table(results, rows)
    lines += compute_table(results, rows)
    lines += train_judge_table(results, rows)
    finals = {key: {r.seed: r.final for r in results if r.row == key and r.success} for key in rows}
    lines += ["", "Paired differences of final held-out success (same seed, same tasks), in points:", "",
              "| comparison | seeds | mean ± SE | per seed |", "|---|---|---|---|"]
    for row, previous, diffs in paired_differences(finals, rows):
        per_seed = ", ".join(f"{100 * d:+.1f}" for d in diffs)
        lines.append(f"| ({row}) − ({previous}) | {len(diffs)} | {_fmt(diffs, scale=100, digits=1)} | {per_seed} |")
    return "\n".join(lines) + "\n"


def train_judge_table(results: list[RunResult], rows: list[str]) -> list[str]:
    """Markdown lines: the judge's score on each iteration's own rollouts (Setting.judge_train_metric), mean
    ± SE over the row's seeds per iteration: whether the judge improved while it trained. [] when no run
    has it."""
    curves = {key: [r.train_judge for r in results if r.row == key and r.train_judge] for key in rows}
    length = max((len(c) for mine in curves.values() for c in mine), default=0)
    if not length:
        return []
    label = " / ".join(sorted({r.train_judge_metric for r in results}))
    lines = ["", f"{label[0].upper()}{label[1:]}, per iteration (mean ± SE over seeds; these are training "
             "rollouts, not held-out):", "",
             "| row | " + " | ".join(f"it {k}" for k in range(1, length + 1)) + " |",
             "|---|" + "---|" * length]
    for key, mine in curves.items():
        if mine:
            cells = [_fmt([c[k] for c in mine if k < len(c) and not math.isnan(c[k])]) for k in range(length)]
            lines.append(f"| ({key}) {ROWS[key].label} | " + " | ".join(cells) + " |")
    return lines


def dev_table(results: list[RunResult], rows: list[str]) -> list[str]:
    """Markdown lines: each row's λ and its success on the dev split before and after training, mean ± SE
    over seeds, the numbers settings such as λ are chosen by (held-out is for reporting only). [] when no
    run evaluated on dev."""
    lines = ["", "Dev success (eval.dev_file; choose λ and other settings by these, never by held-out):", "",
             "| row | λ | seeds | dev before | dev after |", "|---|---|---|---|---|"]
    for key in rows:
        mine = [r for r in results if r.row == key and r.dev]
        if mine:
            weights = sorted({r.weight for r in mine if not math.isnan(r.weight)})
            lines.append(f"| ({key}) {ROWS[key].label} | {', '.join(f'{w:g}' for w in weights) or 'n/a'} | "
                         f"{len(mine)} | {_fmt([r.dev[0] for r in mine])} | {_fmt([r.dev[-1] for r in mine])} |")
    return (lines if len(lines) > 5 else []) + dev_length_table(results, rows)


def _seeds_cell(values: list[float], seeds: int) -> str:
    """Mean ± SE of `values`, saying how many of the row's `seeds` they come from when not all of them."""
    if not values:
        return "n/a"
    return _fmt(values) + (f" ({len(values)} of {seeds} seeds)" if len(values) < seeds else "")


def dev_length_table(results: list[RunResult], rows: list[str]) -> list[str]:
    """Markdown lines: each row's dev success at every iteration some run evaluated (run.eval_every), mean ±
    SE over the seeds that evaluated it (how many, where not all): a run's length is chosen by these, like λ.
    [] when no run was evaluated on dev between its warm-start and its end."""
    points = sorted({k for r in results if r.row in rows for k in r.dev_at})
    if not any(0 < k < r.iterations for r in results for k in r.dev_at):
        return []
    lines = ["", "Dev success at each evaluated iteration (run.eval_every; choose a run's length by these):", "",
             "| row | " + " | ".join(f"it {k}" for k in points) + " |", "|---|" + "---|" * len(points)]
    for key in rows:
        mine = [dict(zip(r.dev_at, r.dev)) for r in results if r.row == key and r.dev]
        if mine:
            cells = [_seeds_cell([at[k] for at in mine if k in at], len(mine)) for k in points]
            lines.append(f"| ({key}) {ROWS[key].label} | " + " | ".join(cells) + " |")
    return lines


COMPUTE_TOLERANCE = 0.05  # rolled-out episodes or optimizer steps further than this from the first row: flagged


def _relative(value: float, reference: float) -> float:
    return 0.0 if value == reference else (value - reference) / reference if reference else math.inf


def _share(value: float, reference: float) -> str:
    """The relative difference as a percentage; "first row: 0" where the first row spent none."""
    relative = _relative(value, reference)
    return "first row: 0" if math.isinf(relative) else f"{relative:+.1%}"


def compute_table(results: list[RunResult], rows: list[str]) -> list[str]:
    """Markdown lines: what each row spent (means over its seeds), each relative to the first row; a row
    whose episodes or optimizer steps differ from the first row's by more than 5 % is flagged (samples and
    tokens may differ by the method's filters: shown, not flagged)."""
    means: dict[str, dict[str, float]] = {}
    for key in rows:
        mine = [r for r in results if r.row == key]
        if mine:
            means[key] = {name: sum(getattr(r, name) for r in mine) / len(mine)
                          for name in ("episodes", "policy_samples", "judge_samples", "tokens", "policy_steps",
                                       "judge_steps")}
    if not means:
        return []
    first = next(iter(means.values()))
    lines = ["", "Compute per run (mean over seeds; in brackets: relative to the first row):", "",
             "| row | episodes | policy samples | judge samples | tokens | policy / judge optimizer steps | "
             "equal compute |", "|---|---|---|---|---|---|---|"]
    for key, m in means.items():
        cells = [f"{m[n]:,.0f} ({_share(m[n], first[n])})" for n in ("episodes", "policy_samples", "judge_samples",
                                                                   "tokens")]
        flagged = [n for n in ("episodes", "policy_steps") if abs(_relative(m[n], first[n])) > COMPUTE_TOLERANCE]
        verdict = "yes" if not flagged else "**no**: " + ", ".join(flagged) + " differ by > 5 %"
        lines.append(f"| ({key}) {ROWS[key].label} | {' | '.join(cells)} | {m['policy_steps']:.0f} / "
                     f"{m['judge_steps']:.0f} | {verdict} |")
    return lines


def write_csv(path: Path, results: list[RunResult]) -> None:
    fields = ["row", "seed", "iterations", "baseline", "final", "evaluated", "success", "judge_metric", "judge_bench",
              "bench_mu", "weight", "dev", "dev_at",
              "train_success", "train_judge_metric", "train_judge", "policy_steps", "judge_steps", "policy_samples", "judge_samples", "episodes", "tokens",
              "seconds", "run_dir"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        for r in results:
            row = {k: v for k, v in asdict(r).items() if k in fields}
            row.update(baseline=r.baseline, final=r.final)
            for key in ("success", "judge_bench", "bench_mu", "dev", "train_success", "train_judge"):
                row[key] = " ".join(f"{v:.4f}" for v in row[key])
            row["evaluated"] = " ".join(str(k) for k in r.evaluated)
            row["dev_at"] = " ".join(str(k) for k in r.dev_at)
            writer.writerow(row)


def plot_curves(path: Path, results: list[RunResult], rows: list[str]) -> None:
    """Held-out success and the judge's benchmark metric at each evaluated iteration (sampled as configured
    by eval.*): seeds thin, mean thick."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for index, key in enumerate(rows):
        color = f"C{index}"
        for axis, attr in zip(axes, ("success", "judge_bench")):
            mine = [r for r in results if r.row == key and getattr(r, attr)]
            curves = [getattr(r, attr) for r in mine]
            for r, curve in zip(mine, curves):
                axis.plot(r.evaluated[:len(curve)], curve, color=color, alpha=0.3, linewidth=1)
            if curves:
                length = min(map(len, curves))
                mean = [sum(c[i] for c in curves) / len(curves) for i in range(length)]
                axis.plot(mine[0].evaluated[:length], mean, color=color, linewidth=2.5,
                          label=f"({key}) {ROWS[key].label}")
    axes[0].set(title="held-out success", xlabel="iteration (0 = warm-start)", ylabel="success rate")
    judge = " / ".join(sorted({r.judge_metric for r in results})) or "judge benchmark"
    axes[1].set(title=judge, xlabel="iteration (0 = warm-start)", ylabel=judge.replace("judge benchmark ", ""))
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(folder: Path, results: list[RunResult], rows: list[str]) -> dict[str, Path]:
    files = {"csv": folder / "ablation.csv", "markdown": folder / "ablation.md", "plot": folder / "ablation.png"}
    write_csv(files["csv"], results)
    write_text(files["markdown"], summary_markdown(results, rows))
    plot_curves(files["plot"], results, rows)
    return files

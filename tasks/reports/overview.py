"""What a run's MLflow page shows at a glance (the parent run): did training help?

From the run folder alone (baseline and evaluate stages, data and stage summaries):

  overview_markdown  the run's description: held-out success before and after with 95 % intervals,
                     the judge on its benchmark, dev, compute and wall time
  headline_metrics   the same numbers as short final metrics (`heldout_before`, `heldout_after`,
                     `heldout_gain`, `judge_before`, `judge_after`, `dev_after`, `episodes`; the stage
                     time as `time/minutes`, with every timing under time/), so that the MLflow runs
                     table can show them as columns
  plot_overview      overview.png: held-out success per evaluation with its 95 % band (iteration 0 = the
                     warm start) beside the train success, the judge's benchmark score, and the seconds
                     of each stage per iteration, stacked
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rla_core.stats import wilson
from tasks.paths import RunPaths
from tasks.storage.files import is_done, read_json
from tasks.summaries import StageSummary, read_summary

COMPUTE = "data/compute/"  # the data stage's compute counts (rla_core/compute.py)

# the judge's benchmark score, by setting: balanced accuracy of step verdicts, or UT accuracy of unit tests
JUDGE_KEYS = ("bench/balanced_acc", "bench/ut_accuracy")


@dataclass
class Curves:
    evaluated: list[int] = field(default_factory=list)  # 0 = the warm start
    evaluations: list[dict] = field(default_factory=list)
    iterations: list[int] = field(default_factory=list)
    train_success: list[float] = field(default_factory=list)
    stage_seconds: dict[str, list[float]] = field(default_factory=dict)  # stage -> seconds per iteration
    compute: dict[str, float] = field(default_factory=dict)  # compute/* summed over iterations


def _stage_names(paths: RunPaths, k: int) -> list[str]:
    folder = paths.iteration(k)
    return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _summary(paths: RunPaths, k: int, stage: str) -> StageSummary:
    """A stage's summary, empty when this machine does not have the stage folder (a run resumed from the
    object store fetches only what its stages read: the overview then shows what is here)."""
    folder = paths.stage(k, stage)
    return read_summary(folder) if is_done(folder) else StageSummary()


def read_curves(paths: RunPaths) -> Curves:
    """Everything the overview shows, read from the run folder (what this machine has of it)."""
    curves = Curves()
    baseline = paths.baseline / "metrics.json"
    if baseline.is_file():
        curves.evaluated.append(0)
        curves.evaluations.append(read_json(baseline))
    for k in paths.completed_iterations():
        curves.iterations.append(k)
        rollout = _summary(paths, k, "rollout").metrics
        curves.train_success.append(rollout.get("rollout/success_rate", float("nan")))
        for name in _stage_names(paths, k):
            if is_done(paths.stage(k, name)):
                seconds = read_summary(paths.stage(k, name)).seconds or 0.0
                curves.stage_seconds.setdefault(name, [0.0] * (len(curves.iterations) - 1)).append(seconds)
        for series in curves.stage_seconds.values():
            series += [0.0] * (len(curves.iterations) - len(series))
        for key, value in _summary(paths, k, "data").metrics.items():
            if key.startswith(COMPUTE):
                curves.compute[key] = curves.compute.get(key, 0.0) + value
        if paths.it(k).eval_metrics.is_file():
            curves.evaluated.append(k)
            curves.evaluations.append(read_json(paths.it(k).eval_metrics))
    return curves


def _interval(metrics: dict) -> tuple[float, float, float] | None:
    """(rate, low, high) of held-out success, its 95 % Wilson interval over the episodes played."""
    rate, n = metrics.get("heldout/success_rate"), int(metrics.get("heldout/episodes", 0))
    if rate is None or n == 0:
        return None
    low, high = wilson(round(rate * n), n)
    return rate, low, high


def _judge(metrics: dict) -> tuple[str, float] | None:
    for key in JUDGE_KEYS:
        if key in metrics:
            return key, metrics[key]
    return None


def headline_metrics(paths: RunPaths, curves: Curves | None = None) -> dict[str, float]:
    """Short final metrics of the run (see the module doc); only those the run has."""
    curves = curves or read_curves(paths)
    if not curves.evaluations:
        return {}
    before, after = curves.evaluations[0], curves.evaluations[-1]
    out: dict[str, float] = {}
    if "heldout/success_rate" in before:
        out["heldout_before"] = before["heldout/success_rate"]
    if len(curves.evaluations) > 1 and "heldout/success_rate" in after:
        out["heldout_after"] = after["heldout/success_rate"]
        if "heldout_before" in out:
            out["heldout_gain"] = out["heldout_after"] - out["heldout_before"]
    judge_before, judge_after = _judge(before), _judge(after)
    if judge_before:
        out["judge_before"] = judge_before[1]
    if judge_after and len(curves.evaluations) > 1:
        out["judge_after"] = judge_after[1]
    if len(curves.evaluations) > 1 and "dev/success_rate" in after:
        out["dev_after"] = after["dev/success_rate"]
    if f"{COMPUTE}episodes" in curves.compute:
        out["episodes"] = curves.compute[f"{COMPUTE}episodes"]
    seconds = sum(sum(v) for v in curves.stage_seconds.values())
    if seconds:
        out["time/minutes"] = seconds / 60
    return out


def _fmt_rate(metrics: dict) -> str:
    found = _interval(metrics)
    return "n/a" if found is None else f"{found[0]:.3f} ({found[1]:.3f}–{found[2]:.3f})"


def _cell(metrics: dict, key: str) -> str:
    return f"{metrics[key]:.3f}" if key in metrics else "n/a"


def overview_markdown(paths: RunPaths, curves: Curves | None = None) -> str:
    """The parent run's description (Markdown)."""
    curves = curves or read_curves(paths)
    if not curves.evaluations:
        return f"Run `{paths.root.name}`: no evaluation yet."
    before, after = curves.evaluations[0], curves.evaluations[-1]
    last = curves.evaluated[-1]
    heads = headline_metrics(paths, curves)
    gain = f"{heads['heldout_gain'] * 100:+.1f} points" if "heldout_gain" in heads else ""
    lines = [f"**{paths.root.name}**: {len(curves.iterations)} iteration(s); warm start vs the models after "
             f"iteration {last} (the last evaluated).", "",
             "| | warm start | after | change |", "|---|---|---|---|",
             f"| held-out success (95 % interval) | {_fmt_rate(before)} | {_fmt_rate(after) if last else 'n/a'} "
             f"| {gain} |"]
    judge = _judge(before)
    if judge:
        key = judge[0]
        change = f"{(after[key] - before[key]) * 100:+.1f} points" if last and key in after else ""
        lines.append(f"| judge benchmark `{key}` | {_cell(before, key)} | {_cell(after, key) if last else 'n/a'} "
                     f"| {change} |")
    for key, label in (("dev/success_rate", "dev success (model selection)"),
                       ("dev/bench_balanced_acc", "judge dev benchmark balanced accuracy"),
                       ("dev/bench_ut_accuracy", "judge dev benchmark UT accuracy"),
                       ("heldout_greedy/success_rate", "held-out success (greedy)")):
        if key in before or key in after:
            lines.append(f"| {label} | {_cell(before, key)} | {_cell(after, key) if last else 'n/a'} | |")
    compute = curves.compute
    if compute:
        lines += ["", "Compute over the run: " + ", ".join(
            f"{compute[k]:,.0f} {label}" for k, label in ((f"{COMPUTE}episodes", "episodes"),
                                                           (f"{COMPUTE}policy_samples", "policy samples"),
                                                           (f"{COMPUTE}judge_samples", "judge samples"),
                                                           (f"{COMPUTE}tokens", "tokens")) if k in compute)
                  + (f"; {heads['time/minutes']:.1f} minutes of stage time." if "time/minutes" in heads else ".")]
    lines += ["", "Curves: `overview.png` (artifacts). Held-out scores are for reading only: the registry's "
              "`best` alias is chosen on dev."]
    return "\n".join(lines)


def plot_overview(paths: RunPaths, out: Path, curves: Curves | None = None) -> Path | None:
    """overview.png (module doc); None when the run has no evaluation."""
    curves = curves or read_curves(paths)
    if not curves.evaluations:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    found = [(k, _interval(m)) for k, m in zip(curves.evaluated, curves.evaluations) if _interval(m)]
    if found:
        ks = [k for k, _ in found]
        ax.plot(ks, [v[0] for _, v in found], "o-", color="C0", label="held-out (95 % band)")
        ax.fill_between(ks, [v[1] for _, v in found], [v[2] for _, v in found], color="C0", alpha=0.2)
    if curves.iterations:
        ax.plot(curves.iterations, curves.train_success, ".--", color="C1", label="train (rolled-out tasks)")
    ax.set(title="success", xlabel="iteration (0 = warm start)", ylabel="success rate")
    ax.legend(fontsize=8)
    ax = axes[1]
    judged = [(k, _judge(m)) for k, m in zip(curves.evaluated, curves.evaluations) if _judge(m)]
    if judged:
        ax.plot([k for k, _ in judged], [j[1] for _, j in judged], "o-", color="C2")
        ax.set_ylabel(judged[0][1][0])
    ax.set(title="judge on its benchmark", xlabel="iteration (0 = warm start)")
    ax = axes[2]
    bottom = [0.0] * len(curves.iterations)
    for n, (name, seconds) in enumerate(sorted(curves.stage_seconds.items(), key=lambda kv: -sum(kv[1]))):
        ax.bar(curves.iterations, seconds, bottom=bottom, label=name, color=f"C{n % 10}")
        bottom = [b + s for b, s in zip(bottom, seconds)]
    ax.set(title="seconds per stage", xlabel="iteration", ylabel="seconds")
    if curves.stage_seconds:
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(paths.root.name)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out

"""Readable report of an iteration's trajectories: a few tasks, every step with the policy's response,
the judge's verdicts and rationales, the step reward and the advantage the policy was trained with; and
every rewrite the iteration accepted into the task set, beside the task it was rewritten from.

`trajectory_report` chooses what to show (pure); `render_text` / `render_html` turn it into a plain
text file and a self-contained HTML page (inline CSS, no scripts, every string escaped);
`iteration_report` reads one iteration's files from the run folder. No MLflow here: the commit stage
logs the two renderings as artifacts.
"""
from __future__ import annotations

import html
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

from rla_core.adaptation.critic import judge_rationale
from rla_core.adaptation.store import TaskStore
from rla_core.rewards import StepKey, group_by_task, has_mixed_outcomes, index_judged, step_rewards
from rla_core.rollout.runner import INVALID
from rla_core.schemas import JudgedStep, Trajectory, TrainingSample
from tasks.stages.iteration import read_adapt_report
from tasks.paths import RunPaths
from tasks.storage.files import read_records, read_records_shared

NOT_TRAINED = "not trained"
EXCLUDED = "excluded (rejected candidate)"
VERDICT_LABELS = {1: "+1", -1: "-1", 0: "unparsed"}


@dataclass(frozen=True)
class JudgeView:
    verdict: str  # "+1" | "-1" | "unparsed"
    rationale: str


@dataclass(frozen=True)
class StepView:
    index: int
    response: str
    command: str
    observation: str
    oracle: str  # "good" | "bad" | "unknown"
    judges: tuple[JudgeView, ...]
    reward: float | None  # R_ji, None when the step could not be scored (missing verdicts)
    advantage: float | None  # the policy sample's advantage, None when the step was not trained


@dataclass(frozen=True)
class TrajectoryView:
    task_id: str
    sample_index: int
    success: bool
    goal: str
    initial_observation: str
    steps: tuple[StepView, ...]
    excluded: bool  # a rejected candidate's rollout: never trained on

    @property
    def outcome(self) -> str:
        return "success" if self.success else "failure"


@dataclass(frozen=True)
class RewriteView:
    """An accepted rewrite: the candidate that became the slot's task, beside the task it came from."""
    slot_id: str
    task_id: str
    direction: str  # "harder" | "easier"
    prev_acc: float  # success rate of the parent when the rewrite was asked for
    acc: float | None  # success rate of the rewrite on this iteration's rollouts
    parent: str  # the parent task's spec (JSON)
    rewrite: str  # the rewritten task's spec (JSON)


@dataclass(frozen=True)
class ReportSelection:
    trajectories: tuple[TrajectoryView, ...]
    tasks_total: int
    trajectories_total: int
    rewrites: tuple[RewriteView, ...] = ()

    @property
    def tasks_shown(self) -> int:
        return len({t.task_id for t in self.trajectories})

    @property
    def successes(self) -> int:
        return sum(t.success for t in self.trajectories)

    @property
    def success_rate(self) -> float:
        return self.successes / len(self.trajectories) if self.trajectories else 0.0


# ---------------------------------------------------------------- selection
def _task_rank(group: Sequence[Trajectory]) -> int:
    """0 mixed outcomes, 1 all failed, 2 all succeeded: mixed tasks are the ones the policy learns from."""
    if has_mixed_outcomes(group):
        return 0
    return 2 if group[0].success else 1


def _pick(group: Sequence[Trajectory], per_task: int) -> list[Trajectory]:
    """Up to `per_task` trajectories, alternating success and failure while both remain (by sample index)."""
    ordered = sorted(group, key=lambda t: t.sample_index)
    wins = [t for t in ordered if t.success]
    losses = [t for t in ordered if not t.success]
    picked: list[Trajectory] = []
    while len(picked) < per_task and (wins or losses):
        for pool in (wins, losses):
            if pool and len(picked) < per_task:
                picked.append(pool.pop(0))
    return sorted(picked, key=lambda t: (not t.success, t.sample_index))


def select_trajectories(trajectories: Iterable[Trajectory], max_tasks: int = 4,
                        per_task: int = 2) -> list[Trajectory]:
    """Trajectories of up to `max_tasks` tasks, mixed-outcome tasks first, then all-fail, then
    all-success (ties by task_id), `per_task` of each (a success and a failure where there are both)."""
    groups = group_by_task(trajectories)
    chosen = sorted(groups, key=lambda task_id: (_task_rank(groups[task_id]), task_id))[:max_tasks]
    return [t for task_id in chosen for t in _pick(groups[task_id], per_task)]


# ---------------------------------------------------------------- views
def _oracle(good: bool | None) -> str:
    return "unknown" if good is None else ("good" if good else "bad")


def _step_views(trajectory: Trajectory, judged: Mapping[StepKey, JudgedStep], rewards: Mapping[StepKey, float],
                advantages: Mapping[StepKey, float]) -> tuple[StepView, ...]:
    views = []
    for step in trajectory.steps:
        key = StepKey(trajectory.task_id, trajectory.sample_index, step.index)
        samples = judged[key].samples if key in judged else []
        judges = tuple(JudgeView(VERDICT_LABELS[s.verdict], judge_rationale(s.text)) for s in samples)
        views.append(StepView(step.index, step.response_text.strip(), step.action or INVALID, step.observation,
                              _oracle(step.oracle_good), judges, rewards.get(key), advantages.get(key)))
    return tuple(views)


def trajectory_report(trajectories: Sequence[Trajectory], judged: Iterable[JudgedStep],
                      rewards: Mapping[StepKey, float], advantages: Mapping[StepKey, float],
                      max_tasks: int = 4, per_task: int = 2, rejected: Collection[str] = ()) -> ReportSelection:
    """The trajectories to show (see `select_trajectories`) with every step's judge samples, reward
    R (from `rewards`) and training advantage (from `advantages`, by StepKey); tasks in `rejected`
    are shown but marked excluded."""
    table = index_judged(judged)
    views = tuple(
        TrajectoryView(t.task_id, t.sample_index, t.success, t.goal, t.initial_observation,
                       _step_views(t, table, rewards, advantages), t.task_id in rejected)
        for t in select_trajectories(trajectories, max_tasks, per_task)
    )
    return ReportSelection(views, len({t.task_id for t in trajectories}), len(trajectories))


def report_rewards(trajectories: Iterable[Trajectory], judged: Iterable[JudgedStep],
                   step_weight: float) -> dict[StepKey, float]:
    """R_ji = O_j + λ·mean verdict (`rla_core.rewards.step_rewards`) for the trajectories that can be
    scored: with λ ≠ 0, only those whose every step has judge samples."""
    table = index_judged(judged)

    def scored(trajectory: Trajectory) -> bool:
        keys = (StepKey(trajectory.task_id, trajectory.sample_index, s.index) for s in trajectory.steps)
        return step_weight == 0 or all(key in table and table[key].samples for key in keys)

    return step_rewards([t for t in trajectories if scored(t)], table, step_weight)


def sample_advantages(samples: Iterable[TrainingSample]) -> dict[StepKey, float]:
    """Advantage of each policy training sample by its StepKey."""
    return {StepKey(s.task_id, s.sample_index, s.step_index): s.advantage for s in samples}


def iteration_report(paths: RunPaths, k: int, step_weight: float, max_tasks: int = 4,
                     per_task: int = 2) -> ReportSelection:
    """The report of iteration k from its rollout, judge, adapt and data stage files."""
    it = paths.it(k)
    trajectories = read_records_shared(it.trajectories, Trajectory)
    judged = read_records(it.judged, JudgedStep)
    rejected = set(read_adapt_report(paths, k).rejected)
    samples = read_records_shared(it.batch("policy"), TrainingSample)
    selection = trajectory_report(trajectories, judged, report_rewards(trajectories, judged, step_weight),
                                  sample_advantages(samples), max_tasks, per_task, rejected)
    return ReportSelection(selection.trajectories, selection.tasks_total, selection.trajectories_total,
                           accepted_rewrites(paths, k))


def _spec(task) -> str:
    return json.dumps(task.spec, sort_keys=True, ensure_ascii=False)


def accepted_rewrites(paths: RunPaths, k: int) -> tuple[RewriteView, ...]:
    """The candidates iteration k's adapt stage accepted, each with the slot's task before it (from the
    store the iteration started from) — the environment model's or the rule-based rewriter's work."""
    report = read_adapt_report(paths, k)
    if not report.accepted:
        return ()
    before, after = TaskStore.load(paths.store_dir(k)), TaskStore.load(paths.it(k).store)
    by_task = {slot.active.task_id: slot for slot in after.slots()}
    views = []
    for resolution in report.resolutions:
        slot = by_task.get(resolution.task_id)
        if not resolution.accepted or slot is None:
            continue
        views.append(RewriteView(slot.slot_id, resolution.task_id, resolution.direction, resolution.prev_acc,
                                 resolution.acc, _spec(before.slot(slot.slot_id).active), _spec(slot.active)))
    return tuple(views)


# ---------------------------------------------------------------- plain text
def _number(value: float | None, missing: str) -> str:
    return missing if value is None else f"{value:.3f}"


def _summary(selection: ReportSelection) -> str:
    shown = len(selection.trajectories)
    return (f"{selection.tasks_shown} of {selection.tasks_total} tasks shown, {shown} of "
            f"{selection.trajectories_total} trajectories; success rate of the shown: "
            f"{selection.success_rate:.2f} ({selection.successes}/{shown})")


def _field(label: str, text: str, indent: str) -> str:
    """`label: text`, continuation lines of a multi-line text indented under it."""
    pad = "\n" + indent + " " * (len(label) + 2)
    return f"{indent}{label}: {pad.join(text.splitlines()) or '(empty)'}"


def _text_step(step: StepView) -> list[str]:
    lines = [f"  step {step.index}",
             _field("response", step.response, "    "),
             _field("command", step.command, "    "),
             _field("next observation", step.observation, "    "),
             f"    oracle: {step.oracle}"]
    for number, judge in enumerate(step.judges, 1):
        lines.append(_field(f"judge {number}", f"{judge.verdict}  {judge.rationale}".rstrip(), "    "))
    if not step.judges:
        lines.append("    judge: (no verdicts)")
    lines.append(f"    reward R: {_number(step.reward, 'n/a')}    advantage: {_number(step.advantage, NOT_TRAINED)}")
    return lines


def render_text(selection: ReportSelection) -> str:
    """Plain-text report: a summary line, then each shown trajectory step by step."""
    lines = ["Trajectories (R = outcome + λ·mean judge verdict; advantage = the policy's training weight)",
             _summary(selection)]
    for view in selection.trajectories:
        mark = f"  [{EXCLUDED}]" if view.excluded else ""
        lines += ["", f"=== task {view.task_id}  sample {view.sample_index}  {view.outcome}{mark}",
                  _field("goal", view.goal, ""), _field("initial observation", view.initial_observation, "")]
        for step in view.steps:
            lines += _text_step(step)
    if selection.rewrites:
        lines += ["", f"Accepted rewrites ({len(selection.rewrites)})"]
    for rewrite in selection.rewrites:
        lines += ["", f"=== slot {rewrite.slot_id}: {rewrite.direction}, success {_acc(rewrite.prev_acc)} -> "
                      f"{_acc(rewrite.acc)}", _field("was", rewrite.parent, "  "),
                  _field("now", rewrite.rewrite, "  ")]
    return "\n".join(lines) + "\n"


def _acc(value: float | None) -> str:
    return "not rolled out" if value is None else f"{value:.2f}"


# ---------------------------------------------------------------- HTML
_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
section { margin: 1.5em 0; padding: 0.5em 1em; border-left: 6px solid #999; background: #fafafa; }
section.success { border-color: #2e7d32; } section.failure { border-color: #c62828; }
.outcome { font-weight: bold; } .success .outcome { color: #2e7d32; } .failure .outcome { color: #c62828; }
.excluded { color: #8a6d00; font-weight: bold; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 4px 6px; text-align: left; vertical-align: top; }
th { background: #eee; } .text { white-space: pre-wrap; font-family: ui-monospace, monospace; }
.good { color: #2e7d32; } .bad { color: #c62828; } .unknown, .na { color: #777; }
ul.judges { margin: 0; padding-left: 1.2em; min-width: 16em; }  /* stays legible in narrow viewers */
"""
_HEAD = ("<th>step</th><th>policy response</th><th>command</th><th>next observation</th><th>oracle</th>"
         "<th>judge verdicts</th><th>R</th><th>advantage</th>")


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _html_judges(judges: Sequence[JudgeView]) -> str:
    if not judges:
        return '<span class="na">no verdicts</span>'
    items = "".join(f"<li><b>{_e(j.verdict)}</b> {_e(j.rationale)}</li>" for j in judges)
    return f'<ul class="judges">{items}</ul>'


def _html_step(step: StepView) -> str:
    cells = [_e(step.index), f'<span class="text">{_e(step.response)}</span>', _e(step.command),
             f'<span class="text">{_e(step.observation)}</span>',
             f'<span class="{step.oracle}">{_e(step.oracle)}</span>', _html_judges(step.judges),
             _e(_number(step.reward, "n/a")), _e(_number(step.advantage, NOT_TRAINED))]
    return "<tr>" + "".join(f"<td>{cell}</td>" for cell in cells) + "</tr>"


def _html_trajectory(view: TrajectoryView) -> str:
    mark = f' <span class="excluded">{_e(EXCLUDED)}</span>' if view.excluded else ""
    rows = "".join(_html_step(step) for step in view.steps)
    return (f'<section class="{view.outcome}">'
            f"<h2>task {_e(view.task_id)} · sample {_e(view.sample_index)} · "
            f'<span class="outcome">{view.outcome}</span>{mark}</h2>'
            f"<p><b>goal:</b> <span class=\"text\">{_e(view.goal)}</span></p>"
            f"<p><b>initial observation:</b> <span class=\"text\">{_e(view.initial_observation)}</span></p>"
            f"<table><thead><tr>{_HEAD}</tr></thead><tbody>{rows}</tbody></table></section>")


def render_html(selection: ReportSelection) -> str:
    """One self-contained HTML page (inline CSS, no scripts or external assets): a summary, then a
    table per shown trajectory, coloured by outcome."""
    body = "\n".join(_html_trajectory(view) for view in selection.trajectories)
    if selection.rewrites:
        rows = "".join(f"<tr><td>{_e(r.slot_id)}</td><td>{_e(r.direction)}</td><td>{_e(_acc(r.prev_acc))} → "
                       f"{_e(_acc(r.acc))}</td><td><span class=\"text\">{_e(r.parent)}</span></td>"
                       f"<td><span class=\"text\">{_e(r.rewrite)}</span></td></tr>" for r in selection.rewrites)
        body += ("\n<h2>Accepted rewrites</h2><table><thead><tr><th>slot</th><th>direction</th><th>success</th>"
                 f"<th>the task before</th><th>the rewritten task</th></tr></thead><tbody>{rows}</tbody></table>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>Trajectories</title>"
            f"<style>{_CSS}</style></head><body><h1>Trajectories</h1>"
            f"<p>{_e(_summary(selection))}</p>"
            "<p>R = outcome + λ·mean judge verdict; advantage = the weight the policy was trained with "
            f"(&quot;{_e(NOT_TRAINED)}&quot; when the step has no training sample).</p>\n{body}\n</body></html>\n")

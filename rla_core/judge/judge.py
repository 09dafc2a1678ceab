"""The generative step-wise judge: prompt, m samples per step, verdict parsing.

The judge sees the task, the history, the policy's response for the step (with the command it chose)
and the next observation; it writes a short rationale and `\\boxed{1}` or `\\boxed{-1}`.
Anything else parses to 0.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from rla_core.models.chat import encode_prompts
from rla_core.rollout.base import Generation, RolloutEngine, SamplingParams
from rla_core.rollout.prefix_reuse import PrefixStore, require_reuse
from rla_core.rollout.prompts import Turn, format_history
from rla_core.schemas import JudgedStep, JudgeSample, Trajectory, Verdict

# The text between the braces, stripped in Python: `\s*([^{}]*?)\s*` took cubic time on an unclosed
# `\boxed{` followed by whitespace (30 s for 4,000 spaces).
VERDICT = re.compile(r"\\boxed\{([^{}]*)\}")
_SPACES = re.compile(r"\s+")
GOOD_RATIONALE = "moves toward the goal"
BAD_RATIONALE = "does not help the goal"


def parse_verdict(text: str) -> Verdict:
    """+1 / −1 from the last `\\boxed{..}`; 0 when absent or anything else.

    >>> parse_verdict("helps \\\\boxed{1}"), parse_verdict("\\\\boxed{-1}"), parse_verdict("yes")
    (1, -1, 0)
    """
    found = VERDICT.findall(text)
    if not found:
        return 0
    return {"1": 1, "+1": 1, "-1": -1}.get(found[-1].strip(), 0)


def judge_answer(good: bool) -> str:
    """The target text of a correct verdict (used to warm-start the judge on oracle labels)."""
    return f" {GOOD_RATIONALE} \\boxed{{1}}" if good else f" {BAD_RATIONALE} \\boxed{{-1}}"


def judge_rationale(text: str, max_chars: int = 160) -> str:
    """The judge's rationale: its text before the first `\\boxed`, whitespace collapsed, capped."""
    head = text.split("\\boxed", 1)[0]
    head = _SPACES.sub(" ", head).strip()
    return head if len(head) <= max_chars else head[: max_chars - 3].rstrip() + "..."


def judge_prompt(goal: str, history: list[Turn], observation: str, response: str, action: str | None,
                 next_observation: str, keep: int) -> str:
    chosen = action if action is not None else "(invalid answer)"
    return (
        f"{goal}\n{format_history(history, keep)}Now: {observation}\n"
        f"Response: {response.strip()} = {chosen}\nNext: {next_observation}\n"
        "Is this step good? Answer with a reason and \\boxed{1} or \\boxed{-1}.\nJudge:"
    )


def step_prompts(trajectory: Trajectory, keep: int) -> list[str]:
    """One judge prompt per step of a trajectory, in step order."""
    prompts, history, observation = [], [], trajectory.initial_observation
    for step in trajectory.steps:
        prompts.append(judge_prompt(trajectory.goal, history, observation, step.response_text, step.action,
                                    step.observation, keep))
        history.append(Turn(step.action or "(invalid answer)", step.observation))
        observation = step.observation
    return prompts


def judge_trajectories(
    engine: RolloutEngine,
    tokenizer: Any,
    trajectories: list[Trajectory],
    m: int,
    params: SamplingParams,
    history_turns: int,
    progress: Callable[[int], None] | None = None,
    reuse_prefixes: bool = False,
) -> tuple[list[JudgedStep], dict[str, float]]:
    """m judge samples for every step of every trajectory.

    reuse_prefixes: the steps are judged step index by step index, and each trajectory's step prompt reuses
    the keys and values of its common prefix with the same trajectory's previous step prompt
    (rla_core/rollout/prefix_reuse.py); the metrics then carry prefix_reused_rate and prefix_prefill_saved.

    Returns one JudgedStep per (trajectory, step) and metrics: verdict rates and, where oracle labels
    exist, the judge's per-sample precision on good steps p₊ and on bad steps p₋ (and μ = p₊ + p₋).
    """
    keys, texts = [], []
    for trajectory in trajectories:
        for step, text in zip(trajectory.steps, step_prompts(trajectory, history_turns)):
            keys.append((trajectory, step))
            texts.append(text)
    prompt_ids = encode_prompts(tokenizer, texts)
    params = SamplingParams(params.max_new_tokens, params.temperature, params.seed, n=m)
    store = PrefixStore() if reuse_prefixes else None
    if store is None:
        generations = engine.generate(prompt_ids, params, progress)
    else:
        generations = _by_step_index(engine, [(id(t), s.index) for t, s in keys], prompt_ids, params, store,
                                     progress)
    judged = []
    for n, (trajectory, step) in enumerate(keys):
        samples = [
            JudgeSample(prompt_ids=prompt_ids[n], response_ids=g.token_ids, response_logprobs=list(g.logprobs),
                        text=g.text, verdict=parse_verdict(g.text))
            for g in generations[n * m:(n + 1) * m]
        ]
        judged.append(JudgedStep(task_id=trajectory.task_id, sample_index=trajectory.sample_index,
                                 step_index=step.index, samples=samples, oracle_good=step.oracle_good))
    metrics = judge_metrics(judged)
    return judged, metrics if store is None else {**metrics, **store.metrics()}


def _by_step_index(engine: RolloutEngine, keys: list[tuple[int, int]], prompt_ids: list[list[int]],
                   params: SamplingParams, store: PrefixStore, progress: Callable[[int], None] | None
                   ) -> list[Generation]:
    """`engine.generate` of every prompt, one call per step index (keys: (trajectory, step index)), so that a
    trajectory's step t finds its step t − 1's prompt states in `store`; each call draws from its own seed."""
    require_reuse(engine)
    out: list[list[Generation]] = [[] for _ in keys]
    last = {}
    for trajectory, index in keys:
        last[trajectory] = max(index, last.get(trajectory, index))
    for index in sorted({i for _, i in keys}):
        rows = [r for r, (_, i) in enumerate(keys) if i == index]
        step = SamplingParams(params.max_new_tokens, params.temperature, params.seed * 1000 + index, params.n)
        generations = engine.generate([prompt_ids[r] for r in rows], step, progress,
                                      prefixes=(store, [keys[r][0] for r in rows]))
        for place, row in enumerate(rows):
            out[row] = generations[place * params.n:(place + 1) * params.n]
        store.forget([keys[r][0] for r in rows if last[keys[r][0]] == index])
    return [g for group in out for g in group]


def verdict_rates(pairs: list[tuple[bool, int]]) -> dict[str, float]:
    """p₊ = P(S=+1 | good), p₋ = P(S=−1 | bad), μ = p₊ + p₋, balanced accuracy μ/2 and raw accuracy of
    (label, verdict) pairs; a rate whose class is empty is absent."""
    on_pos = [v for label, v in pairs if label]
    on_neg = [v for label, v in pairs if not label]
    out: dict[str, float] = {}
    if on_pos:
        out["p_pos"] = on_pos.count(1) / len(on_pos)
    if on_neg:
        out["p_neg"] = on_neg.count(-1) / len(on_neg)
    if on_pos and on_neg:
        out["mu"] = out["p_pos"] + out["p_neg"]
        out["balanced_acc"] = out["mu"] / 2
    if pairs:
        out["raw_acc"] = sum((v == 1) == label and v != 0 for label, v in pairs) / len(pairs)
    return out


def judge_metrics(judged: list[JudgedStep]) -> dict[str, float]:
    """Verdict rates and precision against oracle labels (p₊, p₋, μ) on the steps that carry one."""
    verdicts = [s.verdict for j in judged for s in j.samples]
    total = max(len(verdicts), 1)
    metrics = {
        "verdict_pos_rate": verdicts.count(1) / total,
        "verdict_neg_rate": verdicts.count(-1) / total,
        "verdict_unparsed_rate": verdicts.count(0) / total,
        "judged_steps": float(len(judged)),
    }
    labelled = [(j.oracle_good, s.verdict) for j in judged if j.oracle_good is not None for s in j.samples]
    rates = verdict_rates(labelled)
    metrics.update({k: rates[k] for k in ("p_pos", "p_neg", "mu") if k in rates})
    return metrics

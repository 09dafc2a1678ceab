"""Sampling in the coding setting: N programs per problem from the policy, U unit tests per problem
from the judge (whose prompt holds the statement only). One batched engine call each; the exact
generated ids and log-probs are kept for training."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rla_core.envs.coding.prompts import judge_prompt, parse_program, parse_test, policy_prompt
from rla_core.models.chat import encode_prompts
from rla_core.rollout.base import RolloutEngine, SamplingParams
from rla_core.schemas import Step, Task, Trajectory, UnitTest


def _sample(engine: RolloutEngine, tokenizer: Any, prompts: list[str], n: int, params: SamplingParams,
            progress: Callable[[int], None] | None) -> tuple[list[list[int]], list]:
    """(prompt ids, n generations per prompt grouped by prompt) in one engine call; no special tokens,
    as the warm-start tokenises its prompts."""
    ids = encode_prompts(tokenizer, prompts, add_special_tokens=False)
    return ids, engine.generate(ids, SamplingParams(params.max_new_tokens, params.temperature, params.seed, n=n),
                                progress)


def write_programs(engine: RolloutEngine, tokenizer: Any, tasks: Sequence[Task], n: int, params: SamplingParams,
                   progress: Callable[[int], None] | None = None) -> list[Trajectory]:
    """n programs per task as one-step trajectories (`action` = the program, None when the answer is
    empty); `success` is filled in after the ground-truth run."""
    ids, gens = _sample(engine, tokenizer, [policy_prompt(t.spec) for t in tasks], n, params, progress)
    out = []
    for t_index, task in enumerate(tasks):
        for j in range(n):
            gen = gens[t_index * n + j]
            program = parse_program(gen.text, task.spec)
            step = Step(index=0, prompt_ids=ids[t_index], response_ids=gen.token_ids, response_text=gen.text,
                        response_logprobs=list(gen.logprobs), action=program, observation="")
            out.append(Trajectory(task_id=task.task_id, slot_id=task.slot_id, sample_index=j,
                                  goal=task.spec["statement"], initial_observation="", steps=[step], success=False))
    return out


def write_tests(engine: RolloutEngine, tokenizer: Any, tasks: Sequence[Task], u: int, params: SamplingParams,
                progress: Callable[[int], None] | None = None) -> list[UnitTest]:
    """u unit tests per task from the judge, parsed (stdin/stdout None when unparseable)."""
    ids, gens = _sample(engine, tokenizer, [judge_prompt(t.spec) for t in tasks], u, params, progress)
    out = []
    for t_index, task in enumerate(tasks):
        for index in range(u):
            gen = gens[t_index * u + index]
            parsed = parse_test(gen.text)
            out.append(UnitTest(task_id=task.task_id, index=index, prompt_ids=ids[t_index],
                                response_ids=gen.token_ids, response_logprobs=list(gen.logprobs), text=gen.text,
                                stdin=parsed[0] if parsed else None, stdout=parsed[1] if parsed else None))
    return out


def with_outcomes(trajectories: Sequence[Trajectory], runs: Sequence) -> list[Trajectory]:
    """Trajectories with success = pass_all and the observation = a one-line summary of the GT run."""
    by_key = {(r.task_id, r.sample_index): r for r in runs}
    out = []
    for trajectory in trajectories:
        run = by_key[(trajectory.task_id, trajectory.sample_index)]
        passed = sum(s == "ok" for s in run.statuses)
        summary = f"passed {passed}/{len(run.statuses)} tests: " + " ".join(run.statuses)
        steps = [trajectory.steps[0].model_copy(update={"observation": summary})]
        out.append(trajectory.model_copy(update={"steps": steps, "success": run.pass_all}))
    return out

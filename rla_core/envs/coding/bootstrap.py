"""Warm-start data of the coding setting: demonstration programs (the reference program of generated
problems) for the policy, demonstration unit tests (an input and the reference's output) for the judge,
the tokenizer corpus, and the fixed judge benchmark (held-out problems with a fixed pool of programs:
the reference and its mutants)."""
from __future__ import annotations

import json
import random
from collections.abc import Sequence

from rla_core.adaptation.rewriters import build_rewrite_prompt, spec_hash
from rla_core.envs.base import SpecError
from rla_core.envs.coding.problems import (CodingFamily, expected_output, io_tests, mutants, reference_program,
                                           work_lines)
from rla_core.envs.coding.prompts import judge_prompt, policy_prompt, unit_test_text
from rla_core.schemas import CriticFeedback, ProgramRun, Task, _Record


class BenchmarkProblem(_Record):
    """A held-out problem with a fixed pool of programs (reference first, then mutants) and whether each
    passes every ground-truth test (measured in the sandbox when the benchmark is built)."""

    task: Task
    programs: list[str]
    pass_all: list[bool]


MAX_DRAWS = 200  # draws per wanted problem before a distinct pipeline is given up on


def generate_mixed(family: CodingFamily, knobs: dict, ops_mix: Sequence[int], count: int, rng: random.Random,
                   prefix: str, exclude: set[str], distinct: bool = True) -> list[Task]:
    """`count` problems, pipeline lengths taken round-robin from `ops_mix`, none whose pipeline (content
    hash) is in `exclude`; with `distinct`, no two alike (there are only ~85 one-operation pipelines: a
    request beyond what exists raises SpecError). Demonstrations repeat pipelines with other test inputs."""
    tasks: list[Task] = []
    seen = set(exclude)
    for index in range(count):
        ops = ops_mix[index % len(ops_mix)]
        for _ in range(MAX_DRAWS):
            spec = family.generate({**knobs, "ops": ops}, rng)
            content = family.content_hash(spec)
            if content not in (seen if distinct else exclude):
                break
        else:
            raise SpecError(f"could not draw {count} distinct problems over pipeline lengths {list(ops_mix)} "
                            f"(stuck at {len(tasks)}): ask for fewer or allow longer pipelines")
        if distinct:
            seen.add(content)
        slot = f"{prefix}{index:04d}"
        tasks.append(Task(task_id=f"{slot}-v0-{spec_hash(spec)}", slot_id=slot, env=family.name, spec=spec,
                          difficulty=family.difficulty(spec)))
    return tasks


def _ops(task: Task) -> list[tuple[str, int]]:
    return [(op, int(k)) for op, k in task.spec["ops"]]


def policy_pairs(tasks: Sequence[Task]) -> list[tuple[str, str]]:
    """(prompt, reference program) per problem."""
    return [(policy_prompt(t.spec), reference_program(t.spec["family"], _ops(t))) for t in tasks]


def judge_pairs(tasks: Sequence[Task], per_task: int, rng: random.Random, worked: bool = False
                ) -> list[tuple[str, str]]:
    """(statement-only prompt, a correct unit test) pairs: fresh inputs, the reference's outputs; `worked`:
    each test carries its computation, one operation per line, between input and output."""
    pairs = []
    for task in tasks:
        family, ops = task.spec["family"], _ops(task)
        for test in io_tests(family, ops, rng, per_task):
            work = work_lines(family, ops, test["stdin"]) if worked else None
            pairs.append((judge_prompt(task.spec), unit_test_text(test["stdin"], test["stdout"], work)))
    return pairs


def mutant_feedback(task: Task) -> CriticFeedback:
    """The critic feedback a problem would get if its failed programs were its mutants: each mutant's
    output on the GT inputs is computed from its pipeline (our own code, nothing is run), a test it gets
    wrong is a "wrong: printed ..." failure. For the environment model's warm-start: prompts shaped like
    the ones it meets in the loop (a crash never appears here)."""
    from rla_core.envs.coding.critic import coding_feedback
    from rla_core.envs.coding.problems import apply_ops, candidate_pipelines

    family, tests = task.spec["family"], task.spec["tests"]
    runs = []
    for index, ops in enumerate(candidate_pipelines(family, _ops(task))):
        statuses, details = [], []
        for test in tests:
            value = int(test["stdin"]) if family == "int" else test["stdin"].rstrip("\n")
            out = str(apply_ops(family, ops, value)) + "\n"
            ok = out == test["stdout"]
            statuses.append("ok" if ok else "wrong")
            details.append("" if ok else f"printed {out.strip()[:80]!r}")
        passed = statuses.count("ok")
        runs.append(ProgramRun(task_id=task.task_id, sample_index=index, statuses=statuses, details=details,
                               pass_ratio=passed / len(tests), pass_all=passed == len(tests)))
    return coding_feedback(task, runs)


def rewrite_pairs_coding(family: CodingFamily, tasks: Sequence[Task], rng: random.Random,
                         with_feedback: bool = False) -> list[tuple[str, str]]:
    """(compact rewrite prompt, pipeline-form answer) pairs from procedural rewrites in both directions.
    `with_feedback`: the prompt carries `mutant_feedback` (the environment model's warm-start; the
    rewrite reads it as in the loop), else empty feedback (the tokenizer corpus: the text shape)."""
    pairs = []
    for task in tasks:
        feedback = mutant_feedback(task) if with_feedback else CriticFeedback()
        for direction in ("harder", "easier"):
            try:
                spec, _ = family.adjust(task.spec, direction, feedback, rng)
            except ValueError:
                continue
            prompt = build_rewrite_prompt(task, direction, feedback, family, "compact")
            pairs.append((prompt, family.generator_answer(spec)))
    return pairs


def corpus(family: CodingFamily, tasks: Sequence[Task], rng: random.Random) -> list[str]:
    """Tokenizer texts: prompts with their programs and tests, mutants, spec JSON and rewrite prompts."""
    texts = [p + t for p, t in policy_pairs(tasks) + judge_pairs(tasks, 2, rng)]
    texts += [m for t in tasks[:50] for m in mutants(t.spec["family"], _ops(t))]
    texts += [json.dumps(t.spec) for t in tasks[:50]]
    texts += [p + a for p, a in rewrite_pairs_coding(family, tasks[:50], rng)]
    return texts


def benchmark_programs(task: Task) -> list[str]:
    """The fixed program pool of a procedural problem: its reference, then its mutants."""
    return [reference_program(task.spec["family"], _ops(task))] + mutants(task.spec["family"], _ops(task))


__all__ = ["BenchmarkProblem", "generate_mixed", "policy_pairs", "judge_pairs", "corpus", "benchmark_programs",
           "rewrite_pairs_coding", "expected_output"]

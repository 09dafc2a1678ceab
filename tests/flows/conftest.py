"""Shared by the flow tests: micro sizes for end-to-end runs, one Prefect test server per session."""
from __future__ import annotations

import pytest
from prefect.testing.utilities import prefect_test_harness

# the bad-input tests' shared check (bad_input_helpers.py) asserts outside a test module: rewrite it too, so that
# a failing case still shows the values compared
pytest.register_assert_rewrite("tests.flows.bad_input_helpers")

MICRO = [
    "models.vocab_size=320",
    "models.policy.hidden_size=64", "models.policy.num_layers=2", "models.policy.num_heads=4",
    "models.policy.intermediate_size=128",
    "models.judge.hidden_size=64", "models.judge.num_layers=2", "models.judge.num_heads=4",
    "models.judge.intermediate_size=128",
    "models.environment.hidden_size=16", "models.environment.num_layers=1", "models.environment.num_heads=1",
    "models.environment.intermediate_size=32",
    "environment.train_slots=4", "environment.heldout_tasks=4",
    # the shortest goal (take, go to the desk, use the lamp) so the micro policy wins sometimes
    "environment.knobs={goal_type: examine, rooms: 1, distractors: 0, closed: 0, step_limit: 10}",
    # a wide band so that the micro judge always has data to learn from
    "environment.alpha_low=0.0", "environment.alpha_high=1.0",
    "bootstrap.demos=40", "bootstrap.policy_steps=240", "bootstrap.judge_steps=60", "bootstrap.batch_size=16",
    "bootstrap.lr=0.003",
    "rollout.tasks_per_iteration=4", "rollout.n=8", "rollout.max_steps=10", "judge.m=2",
    "judge.max_new_tokens=16", "train.max_optimizer_steps=2", "train.minibatch_size=64", "run.iterations=1",
]


@pytest.fixture(scope="session")
def micro() -> list[str]:
    """`--set` overrides of a training run small enough for a test, whose policy still wins sometimes."""
    return list(MICRO)


@pytest.fixture(scope="session")
def harness():
    with prefect_test_harness(server_startup_timeout=120):
        yield

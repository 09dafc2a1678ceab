from rla_core.judge.judge import judge_answer, judge_metrics, judge_rationale, parse_verdict
from rla_core.schemas import JudgedStep, JudgeSample


def test_parse_verdict_accepts_only_plus_minus_one():
    assert parse_verdict("moves toward the goal \\boxed{1}") == 1
    assert parse_verdict("bad \\boxed{-1}") == -1
    assert parse_verdict("\\boxed{+1}") == 1
    assert parse_verdict("\\boxed{ -1 }") == -1
    assert parse_verdict("no verdict") == 0
    assert parse_verdict("\\boxed{2}") == 0
    assert parse_verdict("\\boxed{yes}") == 0
    assert parse_verdict("") == 0


def test_last_boxed_wins():
    assert parse_verdict("\\boxed{1} on second thought \\boxed{-1}") == -1


def test_answers_round_trip_through_the_parser():
    assert parse_verdict(judge_answer(True)) == 1
    assert parse_verdict(judge_answer(False)) == -1
    assert judge_rationale(judge_answer(False)) == "does not help the goal"


def _step(verdicts, good):
    samples = [JudgeSample(prompt_ids=[1], response_ids=[2], text="", verdict=v) for v in verdicts]
    return JudgedStep(task_id="t", sample_index=0, step_index=0, samples=samples, oracle_good=good)


def test_precision_against_oracle_labels_hand_computed():
    # good steps: verdicts 1,1,-1 and 1,0,1 -> 4 of 6 say +1 -> p+ = 2/3
    # bad steps: -1,-1,1 -> 2 of 3 say -1 -> p- = 2/3
    judged = [_step([1, 1, -1], True), _step([1, 0, 1], True), _step([-1, -1, 1], False)]
    metrics = judge_metrics(judged)
    assert abs(metrics["p_pos"] - 4 / 6) < 1e-12
    assert abs(metrics["p_neg"] - 2 / 3) < 1e-12
    assert abs(metrics["mu"] - (4 / 6 + 2 / 3)) < 1e-12
    assert abs(metrics["verdict_unparsed_rate"] - 1 / 9) < 1e-12

"""The ablation report's dev tables: dev success before/after, and at every iteration a run evaluated
(run.eval_every), where a run's length is chosen."""
from __future__ import annotations

from tasks.reports.ablation import RunResult, dev_length_table, summary_markdown


def _run(row: str, seed: int, iterations: int, dev: dict[int, float]) -> RunResult:
    result = RunResult(row, seed, f"/runs/{row}-seed{seed}", iterations)
    result.evaluated = sorted(dev)
    result.success = [0.5 for _ in dev]
    result.dev_at, result.dev = list(dev), list(dev.values())
    return result


def test_dev_at_each_evaluated_iteration_mean_and_se_over_seeds():
    results = [_run("a", 0, 8, {0: 0.50, 4: 0.60, 8: 0.70}), _run("a", 1, 8, {0: 0.50, 4: 0.70, 8: 0.70}),
               _run("d", 0, 8, {0: 0.50, 4: 0.55, 8: 0.65})]
    lines = dev_length_table(results, ["a", "d"])
    assert lines[3] == "| row | it 0 | it 4 | it 8 |"
    assert lines[5] == "| (a) outcome only | 0.500 ± 0.000 | 0.650 ± 0.050 | 0.700 ± 0.000 |"
    assert lines[6] == "| (d) + environment adaptation (full) | 0.500 | 0.550 | 0.650 |"
    assert "Dev success at each evaluated iteration" in summary_markdown(results, ["a", "d"])


def test_a_point_some_seeds_lack_is_averaged_over_the_others_and_no_point_between_means_no_table():
    results = [_run("a", 0, 8, {0: 0.5, 4: 0.6, 8: 0.7}), _run("a", 1, 8, {0: 0.5, 8: 0.9})]
    assert dev_length_table(results, ["a"])[5] == ("| (a) outcome only | 0.500 ± 0.000 | 0.600 (1 of 2 seeds) | "
                                                   "0.800 ± 0.100 |")
    with_d = results + [_run("d", 0, 8, {0: 0.5, 8: 0.6})]  # d never evaluated at 4: n/a, no seed count
    assert dev_length_table(with_d, ["a", "d"])[6] == "| (d) + environment adaptation (full) | 0.500 | n/a | 0.600 |"
    only_ends = [_run("a", 0, 8, {0: 0.5, 8: 0.7})]
    assert dev_length_table(only_ends, ["a"]) == []
    assert "Dev success at each evaluated iteration" not in summary_markdown(only_ends, ["a"])

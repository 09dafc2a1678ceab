"""The coding setting end to end on micro sizes: `configs/coding.yaml` through the real training flow
(Prefect test harness, MLflow, DVC, the gates), two iterations. Asserts the stage outputs line up
(programs ↔ trajectories ↔ unit tests), the gates passed, the batches hold in-band problems only, the
evaluation's coding metrics (held-out and dev) reach the metrics file, MLflow and the summary table, the
judge's `best` follows its dev UT accuracy, and a re-run resumes every stage and changes no file.

The micro run's dev split is its own generated held-out problems (already reserved: the run trains on what
it trained on before the dev split existed)."""
from __future__ import annotations

import hashlib

import pytest

from flows.commands import summary_table
from flows.rl_iteration import ITERATION
from flows.train import train
from rla_core.envs.coding.bootstrap import BenchmarkProblem
from rla_core.config import PROJECT_ROOT, load_config
from rla_core.schemas import ProgramRun, Task, TrainingSample, Trajectory, UnitTest
from tasks.stages.evaluation import baseline
from tasks.paths import RunPaths, run_config
from tasks.storage.reproduce import version_start
from tasks.settings.coding import CodingSetting, heldout_problems
from tasks.stages.setup import bootstrap, init_models, seed
from tasks.storage.files import done_summary, read_json, read_records, write_records
from tasks.tracking.model_registry import best_tags, model_name
from tasks.tracking.tracker import read_metrics
from tasks.tracking.run_log import tracker_for
from tests.flows.conftest import MICRO

CODING_CONFIG = str(PROJECT_ROOT / "configs" / "coding.yaml")
N, U, TASKS, ITERATIONS = 8, 3, 4, 2
# the micro model sizes of the household e2e runs, and a coding run small enough for a test: 1-2 operation
# problems, a warm-start just long enough that some programs pass, generated held-out problems
CODING_MICRO = [o for o in MICRO if o.startswith("models.")] + [
    "run.name=coding-micro", f"run.iterations={ITERATIONS}",
    "environment.train_slots=12", "environment.knobs={ops: [1, 2]}", "coding.demo_ops=[1, 2]",
    # 8 programs per problem and a band of 1-7 passing: on some CPUs the micro policy passes all or none of 4
    "environment.alpha_low=0.1", "environment.alpha_high=0.9",
    "environment.heldout_file=null", "environment.heldout_tasks=6", "environment.reserved_files=[]",
    f"rollout.tasks_per_iteration={TASKS}", f"rollout.n={N}", "rollout.max_new_tokens=40", "judge.max_new_tokens=16",
    f"coding.tests_per_problem={U}", "coding.benchmark_problems=4", "coding.workers=2",
    "bootstrap.demos=40", "bootstrap.policy_steps=100", "bootstrap.judge_steps=150", "bootstrap.batch_size=16",
    "bootstrap.lr=0.01", "eval.episodes_per_task=1",
    "train.max_optimizer_steps=2", "train.minibatch_size=64",
]
RUN_STAGES = (seed, init_models, bootstrap, baseline, version_start)


def _overrides(out) -> list[str]:
    """The micro run's overrides, its dev split (written to `out` on first use) included."""
    dev = out / "dev.jsonl"
    if not dev.is_file():
        write_records(dev, heldout_problems(load_config([CODING_CONFIG], CODING_MICRO)))
    return CODING_MICRO + [f"run.output_dir={out}", f"eval.dev_file={dev}"]


@pytest.fixture(scope="module")
def coding_run(harness, tmp_path_factory):
    out = tmp_path_factory.mktemp("coding_runs")
    result = train([CODING_CONFIG], _overrides(out))
    return RunPaths.of(result["run_dir"]), result, out


def _keys(records) -> list[tuple[str, int]]:
    return [(r.task_id, r.sample_index) for r in records]


def test_every_stage_of_both_iterations_is_done(coding_run):
    paths, result, _ = coding_run
    assert run_config(paths.root).environment.name == "coding"
    assert paths.completed_iterations() == [1, 2] and sorted(result["iterations"]) == [1, 2]
    for k in (1, 2):
        for stage in ITERATION:
            assert (paths.stage(k, stage.name) / "_DONE").is_file(), (k, stage.name)
    assert done_summary(paths.stage(1, "evaluate"))["evaluated"] is False  # eval_every 3: only the last
    assert done_summary(paths.stage(2, "evaluate"))["evaluated"] is True


def test_programs_trajectories_and_unit_tests_line_up(coding_run):
    paths, _, _ = coding_run
    for k in (1, 2):
        it = paths.it(k)
        tasks = read_records(it.tasks, Task)
        trajectories = read_records(it.trajectories, Trajectory)
        programs = read_records(it.programs, ProgramRun)
        tests = read_records(it.unit_tests, UnitTest)
        candidates = done_summary(paths.stage(k, "select"))["candidates"]
        assert len(tasks) == TASKS and all(t.env == "coding" for t in tasks)  # one budget, candidates included
        if k == 2:  # the candidates iteration 1 proposed are rolled out in iteration 2 (up to K of them)
            assert candidates == min(TASKS, len(read_json(paths.it(1).adapt_report)["proposed"]))
        expected = [(t.task_id, j) for t in tasks for j in range(N)]
        assert _keys(trajectories) == _keys(programs) == expected
        for trajectory, run in zip(trajectories, programs):
            spec = next(t.spec for t in tasks if t.task_id == trajectory.task_id)
            assert trajectory.success == run.pass_all
            assert len(run.statuses) == len(spec["tests"]) == len(run.details)
            assert run.pass_ratio == sum(s == "ok" for s in run.statuses) / len(run.statuses)
        assert [(t.task_id, t.index) for t in tests] == [(t.task_id, u) for t in tasks for u in range(U)]
        assert all(len(t.passes) == N for t in tests)
        assert all(not any(t.passes) for t in tests if t.stdin is None)


def test_gates_ran_and_passed(coding_run):
    paths, _, _ = coding_run
    for k in (1, 2):
        report = read_json(paths.it(k).gates_report)
        assert {"task_store", "rollouts"} <= set(report)
        assert all(gate["success"] for gate in report.values()), report
        for role in ("policy", "judge"):
            assert (f"{role}_batch" in report) == bool(read_records(paths.it(k).batch(role), TrainingSample))


def test_batches_hold_in_band_problems_only(coding_run):
    paths, _, _ = coding_run
    cfg = run_config(paths.root)
    low, high = cfg.environment.alpha_low, cfg.environment.alpha_high
    total = 0
    for k in (1, 2):
        it = paths.it(k)
        groups: dict[str, list[bool]] = {}
        for run in read_records(it.programs, ProgramRun):
            groups.setdefault(run.task_id, []).append(run.pass_all)
        band = {tid for tid, ok in groups.items() if low <= sum(ok) / len(ok) <= high}
        rejected = set(read_json(it.adapt_report)["rejected"])
        for role in ("policy", "judge"):
            samples = read_records(it.batch(role), TrainingSample)
            assert {s.task_id for s in samples} <= band - rejected, (k, role, groups)
            total += len(samples)
            trained = done_summary(paths.stage(k, f"train_{role}"))["trained"]
            assert bool(trained) == bool(samples), (k, role)
        assert done_summary(paths.stage(k, "data"))["metrics"]["data/policy/tasks_in_band"] == len(band - rejected)
    assert total > 0, "no training sample in either iteration: the micro warm-start is too short"


def test_the_judges_band_widens_to_problems_every_program_solved(coding_run, tmp_path):
    """coding.judge_alpha_high=1: the data stage's judge batch also takes the problems every program solved,
    each test's advantage positive when it is correct (passed by every program) and negative when not (the
    W-empty separation reward); the policy batch and the in-band problems' judge samples stay as they were.
    On a copy of iteration 1 whose first problem is marked solved by every program (so the case exists on every
    CPU, whatever the micro policy passed); the default config leaves that problem out of both batches."""
    import shutil

    from tasks.stages.iteration import read_adapt_report

    paths, _, out = coding_run
    copy = RunPaths.of(shutil.copytree(paths.root, tmp_path / paths.root.name,
                                       ignore=shutil.ignore_patterns("*.safetensors", "mlartifacts", "mlflow.db")))
    it = copy.it(1)
    runs = read_records(it.programs, ProgramRun)
    rejected = set(read_adapt_report(copy, 1).rejected)
    solved = sorted({r.task_id for r in runs} - rejected)[0]
    write_records(it.programs, [r.model_copy(update={"pass_all": True}) if r.task_id == solved else r for r in runs])
    # and its first test passed by every program (correct), its second by none (wrong)
    all_tests = read_records(it.unit_tests, UnitTest)
    edits = {0: {"stdin": "1\n", "stdout": "1\n", "passes": [True] * N}, 1: {"passes": [False] * N}}
    all_tests = [t.model_copy(update=edits[t.index]) if t.task_id == solved and t.index in edits else t
                 for t in all_tests]
    write_records(it.unit_tests, all_tests)
    tests = [t for t in all_tests if t.task_id == solved]
    correct = {t.index: t.stdin is not None and all(t.passes) for t in tests}
    assert len(tests) == U and correct[0] and not correct[1]

    def batches(overrides):
        config = load_config([CODING_CONFIG], _overrides(out) + overrides)
        metrics = CodingSetting().data(copy, config, 1, read_adapt_report(copy, 1))["metrics"]
        return (read_records(it.batch("policy"), TrainingSample), read_records(it.batch("judge"), TrainingSample),
                metrics)

    policy, judge, metrics = batches([])
    wide_policy, wide_judge, wide_metrics = batches(["coding.judge_alpha_high=1.0"])
    assert solved not in {s.task_id for s in policy + judge}
    assert wide_policy == policy
    assert [s for s in wide_judge if s.task_id != solved] == judge
    assert wide_metrics["judge/tasks_in_band"] == metrics["judge/tasks_in_band"] + 1
    added = [s for s in wide_judge if s.task_id == solved]
    assert sorted(s.sample_index for s in added) == list(range(U))  # rewards of ±1, never all equal here
    assert all((s.advantage > 0) == correct[s.sample_index] for s in added)


def test_a_non_empty_batch_updates_its_model(coding_run):
    import torch

    from rla_core.models.factory import load_pretrained

    def params(path):
        return torch.cat([p.detach().flatten() for p in load_pretrained(path)[0].parameters()])

    paths, _, _ = coding_run
    updated = 0
    for k in (1, 2):
        for role in ("policy", "judge"):
            summary = done_summary(paths.stage(k, f"train_{role}"))
            if summary["trained"]:
                assert not torch.equal(params(paths.model_dir(k, role)), params(paths.root / summary["model_dir"]))
                assert paths.model_dir(k + 1, role) == paths.root / summary["model_dir"]
                updated += 1
    assert updated > 0


def test_evaluation_metrics_reach_the_file_mlflow_and_the_summary_table(coding_run):
    paths, _, _ = coding_run
    metrics = read_json(paths.it(2).eval_metrics)
    before = read_json(paths.baseline / "metrics.json")
    for key in ("heldout/pass_at_1", "heldout/pass_ratio", "heldout/crash_rate", "bench/ut_accuracy",
                "bench/detect_rate", "heldout_greedy/pass_at_1", "heldout/judge_ut_accuracy"):
        assert key in metrics and key in before, key
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["heldout/episodes"] == 6  # 6 held-out problems, 1 program each
    for key in ("dev/pass_at_1", "dev/success_rate", "dev/bench_ut_accuracy", "dev/bench_detect_rate"):
        assert key in metrics and key in before, key
        assert 0.0 <= metrics[key] <= 1.0
    assert metrics["dev/episodes"] == 6 and metrics["dev/success_rate"] == metrics["dev/pass_at_1"]
    assert len(read_records(paths.coding_benchmark_dev, BenchmarkProblem)) == 4  # coding.benchmark_problems
    logged = read_metrics(paths.root)
    for key in ("rollout/pass_at_1", "judge/ut_accuracy", "data/policy/samples", "heldout/pass_at_1",
                "bench/ut_accuracy", "bench/detect_rate", "dev/success_rate", "dev/bench_ut_accuracy"):
        assert key in logged, f"{key} missing from MLflow; have {sorted(logged)[:30]}"
    assert sorted(logged["rollout/pass_at_1"]) == [1, 2]
    rollout = {k: done_summary(paths.stage(k, "rollout"))["metrics"]["rollout/pass_at_1"] for k in (1, 2)}
    assert logged["rollout/pass_at_1"] == rollout
    assert metrics["heldout/pass_at_1"] in logged["heldout/pass_at_1"].values()
    assert metrics["bench/ut_accuracy"] in logged["bench/ut_accuracy"].values()
    table = summary_table(str(paths.root))
    lines = {line[:28].strip(): line[28:].split() for line in table.splitlines() if line[:28].strip()}
    for label, key in CodingSetting.summary_rows:
        if key in metrics:
            assert lines[label] == [f"{before[key]:.3f}", f"{metrics[key]:.3f}"], (label, table)
    assert "held-out success (sampled)" not in table  # the household rows are not shown
    iteration_rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert [row[0] for row in iteration_rows] == ["1", "2"]
    for row, k in zip(iteration_rows, (1, 2)):
        assert float(row[1]) == pytest.approx(rollout[k], abs=5e-4)


# bookkeeping a re-run rewrites: the run lock (who holds the folder) and MLflow's store (the training run
# is re-opened and closed); the metrics in it are compared separately
BOOKKEEPING = {".rla.lock", "mlflow.db"}


def _tree(root) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and str(p.relative_to(root)) not in BOOKKEEPING}


def _diff(a: dict, b: dict) -> list[str]:
    return sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))


def test_rerun_resumes_every_stage_and_changes_no_file(coding_run):
    paths, first, out = coding_run
    before, logged = _tree(paths.root), read_metrics(paths.root)
    assert len(before) > 100
    again = train([CODING_CONFIG], _overrides(out))
    assert again["run_dir"] == first["run_dir"] and again["iterations"] == {}  # nothing left to run
    assert again["baseline"] == first["baseline"]
    run_dir = str(paths.root)
    for stage in RUN_STAGES:
        assert stage.run_here(run_dir)["resumed"] is True, stage.name
    for k in (1, 2):
        for stage in ITERATION:
            summary = stage.run_here(run_dir, k)
            assert summary == {**done_summary(paths.stage(k, stage.name)), "resumed": True}, (k, stage.name)
    after = _tree(paths.root)
    assert _diff(before, after) == []
    assert read_metrics(paths.root) == logged


def test_judge_best_follows_its_dev_unit_test_accuracy(coding_run):
    """The coding judge's versions (warm-start = iteration 0, and each trained one) rank by their dev
    benchmark UT accuracy; the policy's by dev pass@1."""
    paths, _, _ = coding_run
    tracker = tracker_for(str(paths.root))
    assert best_tags("judge")[-1] == "dev.bench_ut_accuracy"
    for role, rank in (("policy", "dev.success_rate"), ("judge", "dev.bench_ut_accuracy")):
        versions = {int(v.tags["iteration"]): v for v in tracker.client.search_model_versions(
            f"name = '{model_name(role)}'")}
        assert 0 in versions and "dev.bench_balanced_acc" not in versions[0].tags
        scored = {k: v for k, v in versions.items() if rank in v.tags}
        # the warm-start and every registered version of an evaluated iteration (a role whose batch was
        # empty is not trained, so not registered, in that iteration)
        assert sorted(scored) == [k for k in sorted(versions) if k == 0 or paths.it(k).eval_metrics.is_file()]
        assert float(scored[0].tags[rank]) == read_json(paths.baseline / "metrics.json")[rank.replace(".", "/", 1)]
        best = max(scored, key=lambda k: (float(scored[k].tags[rank]), -k))
        aliases = tracker.client.get_registered_model(model_name(role)).aliases
        assert str(aliases["best"]) == str(scored[best].version)


def test_judge_warmstart_bench_scores_both_forms_on_the_dev_benchmark_and_leaves_the_run_as_it_was(
        coding_run, tmp_path, capsys):
    """`rla bench judge-warmstart` on the micro run: a row per form and checkpoint, each scoring every dev
    benchmark problem's U tests (the pools hold each problem's reference, so every problem counts), the two
    forms training on different targets; the run folder is unchanged afterwards (checkpoints removed)."""
    from rla_bench.judge_warmstart import main
    from rla_core.errors import BadValue

    paths, _, _ = coding_run
    before = _tree(paths.root)
    out = tmp_path / "judge_warmstart.json"
    assert main(["--run", str(paths.root), "--steps", "3,1", "--out", str(out)]) == 0
    rows = __import__("json").loads(out.read_text())["rows"]
    assert [(r["form"], r["steps"]) for r in rows] == [("plain", 1), ("plain", 3), ("worked", 1), ("worked", 3)]
    problems = len(read_records(paths.coding_benchmark_dev, BenchmarkProblem))
    assert problems > 0
    for row in rows:
        assert row["dev_bench_tests_scored"] == problems * U
        assert 0.0 <= row["dev_bench_ut_accuracy"] <= 1.0 and 0.0 <= row["dev_bench_parse_rate"] <= 1.0
        assert row["train_seconds"] > 0
    assert rows[0]["loss_last10"] != rows[2]["loss_last10"]  # a worked target is another text
    assert "UT accuracy" in capsys.readouterr().out
    assert _diff(before, _tree(paths.root)) == []
    with pytest.raises(BadValue):
        main(["--run", str(paths.root), "--steps", "0,x"])



def test_policy_warmstart_bench_on_coding_repeats_the_baseline_dev_programs(coding_run, tmp_path):
    """`rla bench policy-warmstart` on the coding run: retrained to bootstrap.policy_steps from the reference
    programs `bootstrap` trained on, the policy writes the baseline evaluation's dev programs byte for byte
    and scores the same dev pass@1."""
    from rla_bench.policy_warmstart import main

    paths, _, _ = coding_run
    steps = run_config(paths.root).bootstrap.policy_steps
    out = tmp_path / "policy_warmstart.json"
    assert main(["--run", str(paths.root), "--steps", str(steps), "--keep", "--out", str(out)]) == 0
    (row,) = __import__("json").loads(out.read_text())["rows"]
    before = read_json(paths.baseline / "metrics.json")
    assert row["dev_pass_at_1"] == before["dev/pass_at_1"] and row["dev_episodes"] == before["dev/episodes"] > 0
    kept = paths.root / "bench_policy_warmstart" / "policy" / f"step{steps}" / "dev_programs.jsonl"
    assert kept.read_bytes() == (paths.baseline / "dev_programs.jsonl").read_bytes()
    __import__("shutil").rmtree(paths.root / "bench_policy_warmstart")

def test_engine_bench_on_a_coding_run_uses_the_rollouts_own_prompts(coding_run, tmp_path):
    """`rla bench engine` accepts a coding run: its prompts are, token for token, the prompts the real
    rollout of iteration 1 gave the policy for the same problems, and the prefill's FLOPs are counted
    and set against the fp32 and bf16 matmul peaks measured in the same run."""
    import json

    from flows.cli import main
    from rla_bench.common import load_role, policy_prompts
    from rla_core.adaptation.store import TaskStore

    paths, _, _ = coding_run
    seeded = TaskStore.load(paths.seed_store).active_tasks()
    _, tokenizer = load_role(paths.root)
    ids, texts, commands = policy_prompts(paths.root, len(seeded), tokenizer, coding=True)
    by_task = {task.task_id: prompt for task, prompt in zip(seeded, ids)}
    rolled = [t for t in read_records(paths.it(1).trajectories, Trajectory) if t.task_id in by_task]
    assert rolled and commands == [[]] * len(seeded)
    assert all(t.steps[0].prompt_ids == by_task[t.task_id] for t in rolled)
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--run", str(paths.root), "--prompts", "2", "--new-tokens", "2",
                 "--repeats", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["dtype"] == "float32" and result["decode_attention"] == "model"  # tiny models: unchanged
    peak = result["matmul_peak_gflops"]
    for row in result["results"]:
        ours = row["backends"]["ours (transformers engine)"]
        assert ours["prefill_flops"] > 0
        rate = ours["prefill_flops"] / ours["prefill_seconds"] / 1e9
        assert ours["prefill_of_bf16_peak"] == pytest.approx(rate / peak["large_gemm_2048_bf16"])
        assert ours["prefill_of_fp32_peak"] == pytest.approx(rate / peak["large_gemm_2048"])


def test_ablation_report_reads_the_coding_runs_own_metrics(coding_run):
    """The ablation report on a real coding run folder: held-out pass@1 and the judge's UT accuracy, read
    from the metrics the coding evaluation wrote (not the games' balanced accuracy, which coding lacks)."""
    from tasks.reports.ablation import read_run, summary_markdown

    paths, _, _ = coding_run
    result = read_run(paths.root, "e", 0)
    baseline_metrics = read_json(paths.baseline / "metrics.json")
    final_metrics = read_json(paths.it(2).eval_metrics)
    assert result.judge_metric == "judge benchmark UT accuracy"
    assert result.judge_bench == [baseline_metrics["bench/ut_accuracy"], final_metrics["bench/ut_accuracy"]]
    assert result.success == [baseline_metrics["heldout/success_rate"], final_metrics["heldout/success_rate"]]
    assert result.success[-1] == final_metrics["heldout/pass_at_1"]
    # dev at each evaluation and the iteration it was measured at (the length table's input)
    assert result.dev == [baseline_metrics["dev/success_rate"], final_metrics["dev/success_rate"]]
    assert result.dev_at == [0, 2] == result.evaluated
    table = summary_markdown([result], ["e"])
    assert "judge benchmark UT accuracy before → after" in table and "(e) full loop, λ = 0" in table
    assert f"{result.judge_bench[0]:.3f} → {result.judge_bench[-1]:.3f}" in table
    # the judge on each iteration's own programs: the judge stage's UT accuracy, iteration by iteration
    judged = [read_json(paths.stage(k, "judge") / "_DONE")["metrics"]["judge/ut_accuracy"] for k in (1, 2)]
    assert result.train_judge == judged and result.train_judge_metric == "judge UT accuracy on the iteration's programs"
    assert "Judge UT accuracy on the iteration's programs, per iteration" in table
    assert f"| (e) full loop, λ = 0 | {judged[0]:.3f} | {judged[1]:.3f} |" in table


def test_a_judge_scored_before_gets_its_scores_back_exactly(coding_run, tmp_path, monkeypatch):
    """The warm-start judge's benchmark scores are in the run's cache (tasks/settings/judge_scores.py): a
    second scoring of it returns the baseline's tests and metrics without generating; scoring it afresh
    (eval.reuse_judge_scores: false) gives the same tests and metrics."""
    from tasks.common import eval_seed
    from tasks.settings.coding import score_benchmark
    from tasks.settings.judge_scores import cache_dir

    paths, _, _ = coding_run
    cfg = run_config(str(paths.root))
    entries = len(list(cache_dir(paths).iterdir()))
    logged = read_json(paths.baseline / "metrics.json")
    expected = {k.split("/", 1)[1]: v for k, v in logged.items() if k.startswith("bench/")}
    with monkeypatch.context() as patch:  # a hit generates nothing
        patch.setattr("tasks.settings.coding.tests_for", lambda *a, **k: pytest.fail("the judge was run again"))
        reused = score_benchmark(paths, cfg, paths.bootstrap / "judge", paths.coding_benchmark,
                                 tmp_path / "a.jsonl", eval_seed(cfg))
    assert len(list(cache_dir(paths).iterdir())) == entries
    off = cfg.model_copy(deep=True)
    off.eval.reuse_judge_scores = False
    fresh = score_benchmark(paths, off, paths.bootstrap / "judge", paths.coding_benchmark, tmp_path / "b.jsonl",
                            eval_seed(cfg))
    assert reused == fresh == expected and expected
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes() \
        == (paths.baseline / "benchmark_tests.jsonl").read_bytes()

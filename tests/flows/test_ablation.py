"""`rla ablation` end to end on micro sizes: two rows share one seed's warm-start, every run is a child of
the ablation's MLflow run, the summary files are written, and a re-run skips what is done."""
from __future__ import annotations

import csv
import json
import math

import pytest
from mlflow import MlflowClient

from flows.ablation import ablation
from rla_core.ablation import ROWS
from rla_core.config import PROJECT_ROOT
from tasks.paths import RunPaths
from tasks.summaries import read_summary
from tasks.tracking.tracker import PARENT_TAG


@pytest.fixture(scope="module")
def finished(harness, micro, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    dev = out / "dev.jsonl"  # 4 shipped dev tasks: the report's dev table is read from their evaluation
    dev.write_text("".join(open(PROJECT_ROOT / "data" / "household" / "dev.jsonl").readlines()[:4]))
    benchmarks = []  # the first 40 steps of each shipped judge benchmark: scored at every evaluation
    for name in ("judge_benchmark.jsonl", "judge_benchmark_dev.jsonl"):
        benchmarks.append(out / name)
        benchmarks[-1].write_text("".join(open(PROJECT_ROOT / "data" / "household" / name).readlines()[:40]))
    overrides = micro + [f"run.output_dir={out}", "environment.heldout_tasks=6", "train.optimizer_steps=2",
                         f"eval.dev_file={dev}", f"eval.judge_benchmark={benchmarks[0]}",
                         f"eval.dev_judge_benchmark={benchmarks[1]}"]
    result = ablation(None, overrides, seeds=1, rows="ad", name="abl")
    return result, overrides


def test_rows_share_the_seeds_warm_start_and_differ_in_their_switches(finished):
    result, _ = finished
    root = RunPaths.of(result["root"]).root
    a, d = RunPaths.of(root / "a-seed0"), RunPaths.of(root / "d-seed0")
    for rel in ("models/bootstrap/policy/model.safetensors", "models/bootstrap/judge/model.safetensors",
                "seed/heldout.jsonl", "baseline/metrics.json"):
        assert (a.root / rel).read_bytes() == (d.root / rel).read_bytes(), rel
    assert "reward:\n  step_weight: 0.0" in a.config.read_text()
    assert "adapt: true" in d.config.read_text() and "adapt: false" in a.config.read_text()
    for paths in (a, d):
        assert paths.is_complete(1)


def test_summary_files_and_mlflow_parent_with_a_child_per_run(finished):
    result, _ = finished
    files = result["files"]
    rows = list(csv.DictReader(open(files["csv"])))
    assert [(r["row"], r["seed"]) for r in rows] == [("a", "0"), ("d", "0")]
    assert all(len(r["success"].split()) == 2 for r in rows)  # warm-start + iteration 1
    table = open(files["markdown"]).read()
    assert "(a) outcome only" in table and "(d) + environment adaptation (full)" in table and "(d) − (a)" in table
    compute = [line for line in table.splitlines() if line.startswith("| (") and "optimizer steps" not in line]
    episodes = {r["row"]: float(r["episodes"]) for r in rows}
    assert episodes["a"] == episodes["d"] == 4 * 8  # one budget: K tasks × N episodes in both rows
    assert [float(r["policy_steps"]) for r in rows] == [2.0, 2.0]
    assert sum("| yes |" in line for line in compute) == 2  # both rows at equal compute, not flagged
    # the judge on each iteration's own steps, read from the run's judge stage (the games: μ = p₊ + p₋)
    assert "Judge μ on the iteration's labelled steps, per iteration" in table
    for r in rows:
        judged = read_summary(RunPaths.of(result["root"]).root.joinpath(f"{r['row']}-seed0")
                              .joinpath("iterations", "iter_0001", "judge")).metrics
        assert r["train_judge_metric"] == "judge μ on the iteration's labelled steps"
        assert float(r["train_judge"]) == pytest.approx(judged.get("judge/mu", math.nan), abs=1e-4, nan_ok=True)
    # the dev split, where λ is chosen: each row's λ and its dev success before and after, from its evaluations
    dev_lines = table.split("Dev success (eval.dev_file", 1)[1].split("\n\n", 2)[1].splitlines()[2:]
    for line, r in zip(dev_lines, rows):
        run = RunPaths.of(result["root"]).root / f"{r['row']}-seed0"
        before = json.loads((run / "baseline" / "metrics.json").read_text())["dev/success_rate"]
        after = json.loads((run / "iterations" / "iter_0001" / "evaluate" / "metrics.json").read_text())["dev/success_rate"]
        weight = "0" if r["row"] == "a" else f"{float(r['weight']):g}"
        assert line == (f"| ({r['row']}) {ROWS[r['row']].label} | {weight} | 1 | {before:.3f} | "
                        f"{after:.3f} |")
    assert float(rows[1]["weight"]) > 0 and float(rows[0]["weight"]) == 0
    assert open(files["plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    uri = f"sqlite:///{result['root']}/mlflow.db"
    client = MlflowClient(uri)
    parent_id = open(f"{result['root']}/mlflow_run_id.txt").read().strip()
    children = client.search_runs([client.get_run(parent_id).info.experiment_id],
                                  filter_string=f"tags.{PARENT_TAG} = '{parent_id}'")
    assert sorted(c.data.tags["rla.ablation.row"] for c in children) == ["a", "d"]
    assert {c.info.status for c in children} == {"FINISHED"}
    artifacts = {f.path for f in client.list_artifacts(parent_id, "ablation")}
    assert artifacts == {"ablation/ablation.csv", "ablation/ablation.md", "ablation/ablation.png"}
    assert "a/heldout_final_mean" in client.get_run(parent_id).data.metrics


def test_ablation_without_fixed_optimizer_steps_is_refused(micro, tmp_path):
    from rla_core.config import ConfigError

    with pytest.raises(ConfigError, match="train.optimizer_steps"):
        ablation(None, micro + [f"run.output_dir={tmp_path}"], seeds=1, rows="ad", name="abl")
    assert not (tmp_path / "abl").exists()


def test_rerun_skips_completed_rows(finished):
    result, overrides = finished
    stage = RunPaths.of(result["root"]).root / "d-seed0" / "iterations" / "iter_0001" / "train_policy" / "_DONE"
    before = stage.stat().st_mtime_ns
    again = ablation(None, overrides, seeds=1, rows="ad", name="abl")
    assert stage.stat().st_mtime_ns == before
    assert again["table"] == result["table"]


def test_a_sweep_row_reuses_an_earlier_ablations_warm_start(finished, tmp_path):
    """`--warm-start DIR`: a new ablation's seed starts from DIR's warm start, copied (not recomputed), and
    trains its own row; a config that differs beyond λ and the rows' switches is refused, naming the key."""
    from rla_core.config import ConfigError
    from tasks.checks import preflight

    result, overrides = finished
    source = RunPaths.of(result["root"]).root / "a-seed0"
    sweep = ablation(None, overrides, seeds=1, rows="e", name="sweep", warm_start=result["root"])
    run = RunPaths.of(sweep["root"]).root / "e-seed0"
    for rel in ("models/bootstrap/_DONE", "models/bootstrap/judge/model.safetensors", "seed/heldout.jsonl",
                "baseline/metrics.json"):
        assert (run / rel).read_bytes() == (source / rel).read_bytes(), rel
    assert (run / "models/bootstrap/_DONE").stat().st_mtime_ns == (source / "models/bootstrap/_DONE").stat().st_mtime_ns
    assert RunPaths.of(run).is_complete(1) and "adapt: true" in (run / "config.yaml").read_text()
    client = MlflowClient(f"sqlite:///{sweep['root']}/mlflow.db")
    child = client.get_run(open(run / "mlflow_run_id.txt").read().strip())
    assert child.data.tags["rla.ablation.warm_start"] == str(source)
    from tasks.settings.judge_scores import cache_dir  # the judge scores computed there came along

    copied = {e.name for e in cache_dir(RunPaths.of(source)).iterdir()}
    assert copied and copied <= {e.name for e in cache_dir(RunPaths.of(run)).iterdir()}
    # where a run is logged, whether it registers its checkpoints and how often it is evaluated on the way do
    # not make another warm start (rla_core.ablation.UNMEASURED_KEYS)
    preflight.check_ablation(None, overrides + ["tracking.register_models=false", "run.eval_every=1"], 1, "e",
                             "other", result["root"])
    # nor do the keys only the iterations read: a dev sweep of the judge's lr or band reuses the warm start
    preflight.check_ablation(None, overrides + ["train.judge_lr=0.5", "train.lr=0.5", "coding.judge_alpha_high=1.0"],
                             1, "e", "other", result["root"])
    with pytest.raises(ConfigError, match="bootstrap.policy_steps: .* there, 1 here"):
        preflight.check_ablation(None, overrides + ["bootstrap.policy_steps=1"], 1, "e", "other", result["root"])


def _run_copy(source, folder, edits=None):
    """A run folder named `folder` holding `source`'s config.yaml with the dotted `edits` applied (only the
    config is read when runs are collected)."""
    import yaml

    tree = yaml.safe_load((source / "config.yaml").read_text())
    for key, value in (edits or {}).items():
        node = tree
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(tree))
    return folder


def test_ablation_report_joins_rows_of_two_ablations(finished, tmp_path):
    """`rla ablation-report`: rows (a), (d) of one ablation and row (e) of a sweep in one table, with the
    numbers each ablation's own report has for its runs; unlike runs are refused before anything is written."""
    from flows.cli import main
    from tasks.reports.ablation_runs import collect_runs, report_runs

    result, overrides = finished
    root = RunPaths.of(result["root"]).root
    sweep = RunPaths.of(ablation(None, overrides, seeds=1, rows="e", name="sweep", warm_start=result["root"])["root"]).root
    joined = report_runs([str(root), str(sweep / "e-seed0")], str(tmp_path / "joined"))
    rows = list(csv.DictReader(open(joined["files"]["csv"])))
    assert [(r["row"], r["seed"]) for r in rows] == [("a", "0"), ("d", "0"), ("e", "0")]
    own = {r["row"]: r for r in csv.DictReader(open(result["files"]["csv"]))}
    own["e"] = next(csv.DictReader(open(sweep / "ablation.csv")))
    for r in rows:
        assert {k: v for k, v in r.items() if k != "run_dir"} == {k: v for k, v in own[r["row"]].items() if k != "run_dir"}
    assert "| (e) − (d) | 1 |" in joined["table"] and joined["unfinished"] == []
    assert open(tmp_path / "joined" / "ablation.md").read() == joined["table"]

    a, d, e = root / "a-seed0", root / "d-seed0", sweep / "e-seed0"
    refused = {
        "row \\(a\\), seed 0 twice": [str(root), str(_run_copy(a, tmp_path / "x" / "a-seed0"))],
        "named row \\(d\\) .* but its config has λ = 0": [str(_run_copy(a, tmp_path / "y" / "d-seed0"))],
        "row \\(d\\) at two values of λ": [str(root), str(_run_copy(d, tmp_path / "w" / "d-seed1",
                                                                      {"reward.step_weight": 0.05}))],
        "not the same experiment .*bootstrap.policy_steps: .* in a-seed0, 7": [
            str(root), str(_run_copy(e, tmp_path / "z" / "e-seed1", {"bootstrap.policy_steps": 7}))],
    }
    from rla_core.errors import UserError

    refused["not the same experiment .*run.iterations: 1 in a-seed0, 2"] = [
        str(root), str(_run_copy(e, tmp_path / "v" / "e-seed1", {"run.iterations": 2}))]
    # the judge's training keys separate runs that train their judge (d-seed0 is the first of those) ...
    refused["not the same experiment as .*d-seed0 \\(coding.judge_alpha_high: .* in d-seed0, 1.0\\)"] = [
        str(root), str(_run_copy(e, tmp_path / "t" / "e-seed1", {"coding.judge_alpha_high": 1.0}))]
    for message, folders in refused.items():
        with pytest.raises(UserError, match=message):
            report_runs(folders, str(tmp_path / "refused"))
    assert not (tmp_path / "refused").exists()
    # ... but not a fixed-judge row from them: row (a) is the same run whatever its unused judge lr or band
    fixed = _run_copy(a, tmp_path / "s" / "a-seed1", {"train.judge_lr": 0.5, "coding.judge_alpha_high": 1.0})
    assert [(r.row, r.seed) for r in collect_runs([str(root), str(fixed)])] == [("a", 0), ("a", 1), ("d", 0)]
    # a seed evaluated more often on the way, logged and versioned elsewhere, is the same experiment
    other = _run_copy(e, tmp_path / "u" / "e-seed1", {"run.eval_every": 1, "tracking.register_models": False,
                                                      "versioning.dvc": False, "run.keep_checkpoints": 1})
    assert [(r.row, r.seed) for r in collect_runs([str(root), str(other)])] == [("a", 0), ("d", 0), ("e", 1)]
    assert main(["ablation-report", str(root), "--into", str(root)]) == 2  # would overwrite its own report


def test_a_fixed_judge_is_scored_once_and_reuse_is_exact(finished, tmp_path):
    """Row (a)'s judge is the warm start's: its evaluation after iteration 1 reuses the baseline's benchmark
    scores (eval.reuse_judge_scores), and scoring that judge afresh gives the same verdicts and metrics. Row
    (d) trains its judge: its evaluation scores the new judge."""
    from tasks.common import eval_seed
    from tasks.paths import run_config
    from tasks.settings.episodic import score_judge_benchmark
    from tasks.settings.judge_scores import cache_dir

    result, _ = finished
    root = RunPaths.of(result["root"]).root
    a, d = RunPaths.of(root / "a-seed0"), RunPaths.of(root / "d-seed0")
    files = ("benchmark_verdicts.json", "dev_benchmark_verdicts.json")
    for name in files:
        assert (a.it(1).root / "evaluate" / name).read_bytes() == (a.baseline / name).read_bytes(), name
    entries = list(cache_dir(a).iterdir())
    assert len(entries) == len(files)  # the baseline's two; iteration 1 added none and rewrote none (a hit)
    done = (a.baseline / "_DONE").stat().st_mtime_ns
    assert all((entry / "metrics.json").stat().st_mtime_ns <= done for entry in entries)
    assert len(list(cache_dir(d).iterdir())) == 2 * len(files)  # d's trained judge was scored
    cfg = run_config(a.root).model_copy(deep=True)
    cfg.eval.reuse_judge_scores = False
    fresh = score_judge_benchmark(a, cfg, a.model_dir(2, "judge"), a.judge_benchmark, tmp_path / "v.json",
                                  eval_seed(cfg), cfg.eval.benchmark_m)
    logged = json.loads((a.it(1).root / "evaluate" / "metrics.json").read_text())
    assert fresh == {k.split("/", 1)[1]: v for k, v in logged.items() if k.startswith("bench/")}
    assert (tmp_path / "v.json").read_bytes() == (a.it(1).root / "evaluate" / files[0]).read_bytes()


def test_judge_warmstart_bench_on_a_household_run_retrains_the_bootstrap_judge_and_scores_dev(finished, tmp_path):
    """`rla bench judge-warmstart` on a game run: its checkpoint at bootstrap.judge_steps is the run's own
    warm-started judge, weight for weight (the same pairs, seed and steps as `bootstrap`), and scoring it on the
    dev judge benchmark gives the baseline evaluation's verdicts; the run folder is
    left as it was; --form is refused."""
    import hashlib

    from safetensors.torch import load_file

    from rla_bench.judge_warmstart import main
    from rla_core.errors import BadValue
    from tasks.paths import run_config

    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"
    steps = run_config(str(run)).bootstrap.judge_steps

    def tree():
        return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run.rglob("*")) if p.is_file() and p.suffix != ".lock"}

    before = tree()
    out = tmp_path / "judge_warmstart.json"
    assert main(["--run", str(run), "--steps", f"{steps},1", "--keep", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["form"], r["steps"]) for r in rows] == [("verdict", 1), ("verdict", steps)]
    for row in rows:
        assert 0.0 <= row["dev_bench_balanced_acc"] <= 1.0 and row["train_seconds"] > 0
    baseline = json.loads((run / "baseline" / "metrics.json").read_text())
    assert rows[1]["dev_bench_balanced_acc"] == baseline["dev/bench_balanced_acc"]  # the evaluation's seed
    folder = run / "bench_judge_warmstart" / "verdict" / f"step{steps}"
    verdicts = (folder / "dev_benchmark_verdicts.json").read_bytes()
    assert verdicts == (run / "baseline" / "dev_benchmark_verdicts.json").read_bytes()
    kept = load_file(folder / "model.safetensors")
    own = load_file(run / "models" / "bootstrap" / "judge" / "model.safetensors")
    assert kept.keys() == own.keys() and all(kept[k].equal(own[k]) for k in own)
    # bench/heldout_judge_checkpoint.py on the kept checkpoint (a copy of the run's judge): held-out, and with
    # --dev, it repeats the baseline evaluation's verdicts; --set changes the sampling for the scoring only
    script = _bench_script("heldout_judge_checkpoint.py")
    for flags, theirs in (([], "benchmark_verdicts.json"), (["--dev"], "dev_benchmark_verdicts.json")):
        scored = tmp_path / f"scored{len(flags)}.json"
        assert script.main(["--run", str(run), "--step", str(steps), *flags, "--out", str(scored)]) == 0
        mine = folder / ("dev_verdicts.json" if flags else "heldout_verdicts.json")
        assert mine.read_bytes() == (run / "baseline" / theirs).read_bytes()
        prefix = "dev/bench_" if flags else "bench/"
        assert json.loads(scored.read_text())["balanced_acc"] == baseline[f"{prefix}balanced_acc"]
    greedy = tmp_path / "greedy.json"
    assert script.main(["--run", str(run), "--step", str(steps), "--dev", "--set", "judge.temperature=0",
                        "--out", str(greedy)]) == 0
    scores = json.loads(greedy.read_text())
    assert scores["temperature"] == 0.0 and scores["overrides"] == ["judge.temperature=0"]
    import shutil

    shutil.rmtree(run / "bench_judge_warmstart")
    assert tree() == before
    with pytest.raises(BadValue, match="--form"):
        main(["--run", str(run), "--steps", "1", "--form", "plain"])


def test_judge_labels_on_the_warm_started_policys_steps_join_the_judges_warm_start(finished, tmp_path):
    """bootstrap.judge_policy_tasks: the run's warm-started policy plays fresh (non-reserved) tasks and its
    oracle-labelled steps join the judge's warm-start pairs (more pairs, the same for the same seed); the
    bench trains on them and leaves the run folder as it was."""
    from rla_bench.judge_warmstart import main
    from rla_core.config import load_config
    from tasks.common import bind_environment
    from tasks.settings import setting_for

    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"
    paths = RunPaths.of(run)

    def pairs(tasks: int):
        cfg = load_config([run / "config.yaml"], [f"bootstrap.judge_policy_tasks={tasks}"])
        bind_environment(cfg, run)
        return setting_for(cfg).warm_start_pairs(paths, cfg, "judge")

    plain, joined = pairs(0), pairs(3)
    assert len(joined) > len(plain) and joined == pairs(3)
    assert sum(t.endswith("{1}") for _, t in joined) * 2 == len(joined)  # still balanced
    out = tmp_path / "judge_warmstart.json"
    assert main(["--run", str(run), "--steps", "1", "--set", "bootstrap.judge_policy_tasks=3", "--out", str(out)]) == 0
    [row] = json.loads(out.read_text())["rows"]
    assert row["pairs"] == len(joined) and 0.0 <= row["dev_bench_balanced_acc"] <= 1.0
    assert not (run / "bench_judge_warmstart").exists()


def test_policy_warmstart_bench_repeats_the_runs_own_warm_start_and_its_baseline_dev_episodes(finished, tmp_path):
    """`rla bench policy-warmstart` on a game run: its checkpoint at bootstrap.policy_steps is the run's own
    warm-started policy, weight for weight (bootstrap's own pairs through `warm_start_pairs`), and scoring it
    on dev plays the very episodes the run's baseline evaluation played (same seed, same tasks); the run
    folder is left as it was."""
    import hashlib
    import shutil

    from safetensors.torch import load_file

    from flows.cli import main as cli
    from tasks.paths import run_config

    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"
    steps = run_config(str(run)).bootstrap.policy_steps

    def tree():
        return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run.rglob("*")) if p.is_file() and p.suffix != ".lock"}

    before = tree()
    out = tmp_path / "policy_warmstart.json"
    assert cli(["bench", "policy-warmstart", "--run", str(run), "--steps", f"{steps},1", "--keep",
                "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["form"], r["steps"]) for r in rows] == [("policy", 1), ("policy", steps)]
    baseline = json.loads((run / "baseline" / "metrics.json").read_text())
    assert rows[1]["dev_success_rate"] == baseline["dev/success_rate"]
    assert rows[1]["dev_episodes"] == baseline["dev/episodes"] == 4
    kept = run / "bench_policy_warmstart" / "policy" / f"step{steps}"
    assert (kept / "dev_trajectories.jsonl").read_bytes() == (run / "baseline" / "dev_trajectories.jsonl").read_bytes()
    own = load_file(run / "models" / "bootstrap" / "policy" / "model.safetensors")
    mine = load_file(kept / "model.safetensors")
    assert mine.keys() == own.keys() and all(mine[k].equal(own[k]) for k in own)
    assert rows[0]["loss_last10"] != rows[1]["loss_last10"]
    shutil.rmtree(run / "bench_policy_warmstart")
    assert tree() == before


@pytest.mark.slow  # 40 s; no shipped config runs a DAgger round (tried on dev, not adopted); the seam
# itself (runner episodes -> replay_walk -> pairs) stays in CI: tests/rla_core/test_dagger.py
def test_a_dagger_round_in_the_bench_is_the_bootstraps_own(finished, tmp_path):
    """bench/policy_dagger.py from a game run's warm-started policy: with --score-start its sampled dev episodes
    are the baseline evaluation's; the round's checkpoint is weight for weight the one the bootstrap stage makes
    with the same bootstrap.policy_dagger_* keys (which trains the policy, saves it and runs the same round from
    it); the run folder is left as it was."""
    import hashlib
    import shutil

    from safetensors.torch import load_file

    from rla_core.config import load_config
    from rla_core.errors import BadValue
    from tasks.common import bind_environment
    from tasks.settings import setting_for

    script = _bench_script("policy_dagger.py")
    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"

    def tree(root):
        return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(root.rglob("*")) if p.is_file() and p.suffix != ".lock"}

    before, out = tree(run), tmp_path / "dagger"
    start = run / "models" / "bootstrap" / "policy"
    assert script.main(["--run", str(run), "--policy", str(start), "--tasks", "3", "--steps", "2", "--score-start",
                        "--out-dir", str(out)]) == 0
    assert tree(run) == before
    got = json.loads((out / "result.json").read_text())
    baseline = json.loads((run / "baseline" / "metrics.json").read_text())
    assert got["start_dev"]["sampled/dev/success_rate"] == baseline["dev/success_rate"]
    assert (out / "start" / "sampled" / "dev_trajectories.jsonl").read_bytes() == \
        (run / "baseline" / "dev_trajectories.jsonl").read_bytes()
    assert got["start_dev"]["greedy/dev/episodes"] == 4 and 0 <= got["dev"]["greedy/dev/success_rate"] <= 1
    assert got["round"]["bootstrap/dagger_pairs"] > 0 and got["round"]["bootstrap/dagger_steps"] == 2
    mine = load_file(out / "policy" / "model.safetensors")
    old = load_file(start / "model.safetensors")
    assert mine.keys() == old.keys() and any(not mine[k].equal(old[k]) for k in old)  # it trained
    # the bootstrap stage with the same keys, on a copy of the run: the same pairs, the same weights
    copy = tmp_path / "copy"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns("iterations", "mlartifacts", "mlflow.db"))
    cfg = load_config([copy / "config.yaml"], ["bootstrap.policy_dagger_tasks=3", "bootstrap.policy_dagger_steps=2"])
    bind_environment(cfg, copy)
    summary = setting_for(cfg).bootstrap(RunPaths.of(copy), cfg)
    assert summary["bootstrap/dagger_pairs"] == got["round"]["bootstrap/dagger_pairs"]
    theirs = load_file(copy / "models" / "bootstrap" / "policy" / "model.safetensors")
    assert theirs.keys() == mine.keys() and all(theirs[k].equal(mine[k]) for k in mine)
    with pytest.raises(BadValue, match="inside the starting checkpoint"):
        script.main(["--run", str(run), "--policy", str(start), "--tasks", "1", "--steps", "1",
                     "--out-dir", str(start / "x")])


def test_heldout_policy_checkpoint_replays_the_baseline_evaluation_and_plays_greedy(finished, tmp_path):
    """bench/heldout_policy_checkpoint.py on a game run's warm-started policy: at the run's eval.temperature
    it plays the very held-out episodes the baseline evaluation played (same seed, same tasks); at 0 it
    plays greedy; its files go outside the run, which is left as it was, and an --out-dir inside is refused."""
    import hashlib

    from rla_core.errors import BadValue
    from tasks.paths import run_config

    script = _bench_script("heldout_policy_checkpoint.py")
    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"

    def tree():
        return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(run.rglob("*")) if p.is_file() and p.suffix != ".lock"}

    before, sampled, greedy = tree(), tmp_path / "sampled", tmp_path / "greedy"
    temperature = run_config(str(run)).eval.temperature
    assert temperature > 0
    assert script.main(["--run", str(run), "--temperature", str(temperature), "--out-dir", str(sampled)]) == 0
    baseline = json.loads((run / "baseline" / "metrics.json").read_text())
    scores = json.loads((sampled / "scores.json").read_text())
    assert scores["heldout/success_rate"] == baseline["heldout/success_rate"]
    played = (sampled / "heldout_trajectories.jsonl").read_bytes()
    assert played == (run / "baseline" / "heldout_trajectories.jsonl").read_bytes()
    assert script.main(["--run", str(run), "--out-dir", str(greedy)]) == 0
    scores = json.loads((greedy / "scores.json").read_text())
    assert scores["temperature"] == 0.0 and 0.0 <= scores["heldout/success_rate"] <= 1.0
    assert len((greedy / "heldout_trajectories.jsonl").read_text().splitlines()) == 6
    assert tree() == before
    # the warm start's episodes (as replayed here) and the trained policy's final ones, on the same held-out
    # tasks and samples, paired by bench/paired_episodes.py
    final = sorted(run.glob("iterations/iter_*/evaluate/heldout_trajectories.jsonl"))[-1].parent
    paired, out = _bench_script("paired_episodes.py"), tmp_path / "paired.json"
    files = [str(sampled / "heldout_trajectories.jsonl"), str(final / "heldout_trajectories.jsonl")]
    assert paired.main([*files, "--names", "start,end", "--out", str(out)]) == 0
    row = json.loads(out.read_text())
    end = json.loads((final / "metrics.json").read_text())["heldout/success_rate"]
    assert row["success"] == {"start": baseline["heldout/success_rate"], "end": end}
    assert row["both"] + row["only_start"] + row["only_end"] + row["neither"] == row["episodes"] == 12
    assert row["difference_end_minus_start"] == (row["only_end"] - row["only_start"]) / 12
    assert sum(f["tasks"] for f in row["by_family"].values()) == 12
    with pytest.raises(SystemExit, match="different episodes"):  # one greedy episode a task against two sampled
        paired.main([files[0], str(greedy / "heldout_trajectories.jsonl")])
    with pytest.raises(BadValue, match="inside the run folder"):
        script.main(["--run", str(run), "--out-dir", str(run / "greedy")])
    assert tree() == before


def test_judge_on_episodes_scores_each_judge_on_the_oracle_labels_of_dev_episodes(finished, tmp_path):
    """bench/judge_on_episodes.py on a game run's baseline dev episodes: one row per judge, its p+/p- against
    the episodes' oracle labels; the same judge twice gives the same row (the evaluation's seed); held-out
    episodes are refused."""
    from rla_core.errors import BadValue
    from rla_core.schemas import Trajectory
    from tasks.storage.files import read_records

    script = _bench_script("judge_on_episodes.py")
    result, _ = finished
    run = RunPaths.of(result["root"]).root / "a-seed0"
    dev = run / "baseline" / "dev_trajectories.jsonl"
    judge = run / "models" / "bootstrap" / "judge"
    out = tmp_path / "rows.json"
    assert script.main(["--run", str(run), "--episodes", str(dev), "--judge", str(judge), "--judge", str(judge),
                        "--out", str(out)]) == 0
    first, second = json.loads(out.read_text())["rows"]
    steps = [s for t in read_records(dev, Trajectory) for s in t.steps if s.oracle_good is not None]
    assert first["verdicts"] == len(steps) * run_config_m(run) and first["good_steps"] == sum(s.oracle_good for s in steps)
    assert run_config_m(run) == 1 and first["disagreeing_steps_rate"] == 0.0
    # two greedy samples a step always agree: no step would train the judge
    assert script.main(["--run", str(run), "--episodes", str(dev), "--judge", str(judge), "--set", "eval.judge_m=2",
                        "--set", "judge.temperature=0", "--out", str(out)]) == 0
    greedy = json.loads(out.read_text())["rows"][0]
    assert greedy["verdicts"] == 2 * len(steps) and greedy["disagreeing_steps_rate"] == 0.0
    # four samples a step at temperature 1 from the micro judge: some steps get differing verdicts
    assert script.main(["--run", str(run), "--episodes", str(dev), "--judge", str(judge), "--set", "eval.judge_m=4",
                        "--out", str(out)]) == 0
    sampled = json.loads(out.read_text())["rows"][0]
    assert sampled["verdicts"] == 4 * len(steps) and 0.0 < sampled["disagreeing_steps_rate"] <= 1.0
    rates = [first[k] for k in ("p_pos", "p_neg") if k in first]
    assert rates and all(0.0 <= r <= 1.0 for r in rates)
    assert {k: v for k, v in first.items() if k != "seconds"} == {k: v for k, v in second.items() if k != "seconds"}
    with pytest.raises(BadValue, match="held-out tasks"):
        script.main(["--run", str(run), "--episodes", str(run / "baseline" / "heldout_trajectories.jsonl"),
                     "--judge", str(judge)])


def test_paired_episodes_exact_mcnemar():
    """The exact two-sided McNemar p-value on the discordant pairs, against hand-computed binomial tails."""
    mcnemar = _bench_script("paired_episodes.py").mcnemar_exact
    assert mcnemar(0, 5) == 2 / 32
    assert mcnemar(1, 9) == mcnemar(9, 1) == 2 * 11 / 1024
    assert mcnemar(3, 3) == mcnemar(0, 0) == 1.0


def _bench_script(name: str):
    """A script of bench/ loaded as a module (bench/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), PROJECT_ROOT / "bench" / name)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def run_config_m(run) -> int:
    from tasks.paths import run_config

    return run_config(str(run)).eval.judge_m

"""The judge-score cache's key and reuse (tasks/settings/judge_scores.py): the key changes with anything a
scoring depends on and with nothing else, and a hit gives back the first scoring's file and metrics without
scoring again. The end-to-end check on the real judge and benchmark is in tests/flows/test_ablation.py."""
from __future__ import annotations

import json

import pytest

from rla_core.config import load_config
from tasks.paths import RunPaths
from tasks.settings.judge_scores import cache_dir, scored_once, scores_key

WEIGHT = "reward.step_weight"


@pytest.fixture()
def parts(tmp_path):
    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "model.safetensors").write_bytes(b"weights")
    (judge / "config.json").write_text("{}")
    bench = tmp_path / "bench.jsonl"
    bench.write_text('{"step": 1}\n')
    return judge, bench


def _key(parts, sets=(), seed=0, m=2):
    judge, bench = parts
    return scores_key(load_config(None, list(sets)), WEIGHT, judge, bench, seed, m)


def test_the_key_follows_what_the_verdicts_depend_on(parts):
    judge, bench = parts
    base = _key(parts)
    assert _key(parts) == base
    # keys that cannot change a given judge's verdicts: λ, whether the judge trains, adaptation, run name
    for free in ("reward.step_weight=0.7", "judge.train=false", "environment.adapt=false", "run.name=other",
                 "train.lr=0.5", "run.iterations=9", "eval.reuse_judge_scores=false"):
        assert _key(parts, [free]) == base, free
    # and the ones that can
    for bound in ("judge.temperature=0.3", "judge.max_new_tokens=7", "models.dtype=bfloat16",
                  "rollout.history_turns=1"):
        assert _key(parts, [bound]) != base, bound
    assert _key(parts, seed=1) != base and _key(parts, m=3) != base
    (judge / "optimizer.pt").write_bytes(b"moments")  # the optimizer's state is not the judge
    assert _key(parts) == base
    (judge / "model.safetensors").write_bytes(b"weightz")
    assert _key(parts) != base
    (judge / "model.safetensors").write_bytes(b"weights")
    bench.write_text('{"step": 2}\n')
    assert _key(parts) != base


def test_a_hit_returns_the_first_scoring_without_scoring(parts, tmp_path):
    judge, bench = parts
    paths = RunPaths.of(tmp_path / "run")
    cfg = load_config()
    calls = []

    def score(out):
        def run():
            calls.append(out)
            out.write_text(f"verdicts {len(calls)}")
            return {"balanced_acc": 0.1 * len(calls)}
        return run

    first, second = tmp_path / "a" / "v.json", tmp_path / "b" / "other.json"  # the name does not matter
    first.parent.mkdir(), second.parent.mkdir()
    assert scored_once(paths, cfg, WEIGHT, judge, bench, first, 0, 2, score(first)) == {"balanced_acc": 0.1}
    assert scored_once(paths, cfg, WEIGHT, judge, bench, second, 0, 2, score(second)) == {"balanced_acc": 0.1}
    assert calls == [first] and second.read_text() == "verdicts 1"
    [entry] = cache_dir(paths).iterdir()
    assert json.loads((entry / "metrics.json").read_text()) == {"balanced_acc": 0.1}
    # another seed is another scoring; reuse switched off always scores and leaves the cache alone
    third = tmp_path / "c.json"
    assert scored_once(paths, cfg, WEIGHT, judge, bench, third, 1, 2, score(third)) == {"balanced_acc": 0.2}
    off = load_config(None, ["eval.reuse_judge_scores=false"])
    assert scored_once(paths, off, WEIGHT, judge, bench, third, 0, 2, score(third)) == {"balanced_acc": pytest.approx(0.3)}
    assert len(calls) == 3 and len(list(cache_dir(paths).iterdir())) == 2

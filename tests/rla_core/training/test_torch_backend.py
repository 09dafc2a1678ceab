"""The "torch" trainer: exact gradient accumulation, sample/advantage pairing, drops, persistence."""
from __future__ import annotations

import pytest
import torch

from rla_core.config import ModelSpec, TrainConfig
from rla_core.models.factory import build_model, load_pretrained
from rla_core.models.tokenizer import train_tokenizer
from rla_core.schemas import TrainingSample
from rla_core.training import TRAINERS, get_trainer
from rla_core.training.batching import response_logprobs
from rla_core.training.torch_backend import OPTIMIZER_FILE, TorchTrainer

MAX_POSITIONS = 24
METRIC_NAMES = {
    "loss", "pg_loss", "kl", "clip_fraction", "grad_norm", "samples", "dropped_too_long", "optimizer_steps",
}


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer([f"take apple {i} from shelf \\boxed{{{i}}}" for i in range(30)], vocab_size=300)


def tiny_model(tokenizer, seed: int = 0):
    spec = ModelSpec(
        hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64, max_positions=MAX_POSITIONS
    )
    return build_model(spec, tokenizer, seed=seed)


def sample(prompt: list[int], response: list[int], advantage: float, index: int = 0) -> TrainingSample:
    return TrainingSample(
        prompt_ids=prompt, response_ids=response, advantage=advantage,
        task_id=f"task-{index}", sample_index=index, step_index=0,
    )


def varied_samples(count: int) -> list[TrainingSample]:
    """Different prompt/response lengths (so padding differs) and advantages of both signs."""
    out = []
    for index in range(count):
        prompt = [10 + (index * 7 + k) % 200 for k in range(2 + index % 5)]
        response = [40 + (index * 3 + k) % 200 for k in range(1 + index % 4)]
        out.append(sample(prompt, response, advantage=(-1.0) ** index * (0.5 + index / 10), index=index))
    return out


def config(**overrides) -> TrainConfig:
    return TrainConfig(**{"minibatch_size": 4, "micro_batch_size": 2, "max_optimizer_steps": 4, **overrides})


def flat_params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def response_logprob(model, item: TrainingSample) -> float:
    return float(response_logprobs(model, [item], micro_batch_size=1)[0].sum())


def test_registry_lookup_lists_valid_names():
    assert get_trainer("torch") is TorchTrainer and TRAINERS["torch"] is TorchTrainer
    with pytest.raises(KeyError, match="torch"):
        get_trainer("no-such-backend")


def test_parameters_change_and_metrics_are_reported(tokenizer):
    model = tiny_model(tokenizer)
    before = flat_params(model).clone()
    trainer = get_trainer("torch")(model, config(), 1e-3, None)
    metrics = trainer.train(varied_samples(10), None, rng_seed=0)
    assert METRIC_NAMES <= set(metrics)
    assert metrics["optimizer_steps"] == 3 and metrics["samples"] == 10  # ceil(10 / 4) mini-batches
    assert metrics["grad_norm"] > 0 and metrics["dropped_too_long"] == 0
    assert not torch.equal(flat_params(model), before)


def test_minibatches_are_one_pass_of_near_equal_disjoint_batches(tokenizer):
    trainer = TorchTrainer(tiny_model(tokenizer), config(max_optimizer_steps=None), 1e-3)
    scored = trainer.score(varied_samples(10))
    batches = trainer.minibatches(scored, rng_seed=3)
    assert [len(b) for b in batches] == [3, 4, 3]  # ceil(10/4) batches, none over 4, no tiny remainder
    ids = [item.sample.sample_index for batch in batches for item in batch]
    assert sorted(ids) == list(range(10)) and ids != list(range(10))  # every sample once, shuffled
    assert ids == [i.sample.sample_index for b in trainer.minibatches(scored, rng_seed=3) for i in b]
    capped = TorchTrainer(tiny_model(tokenizer), config(max_optimizer_steps=2), 1e-3)
    first_two = [i.sample.sample_index for b in capped.minibatches(scored, 3) for i in b]
    assert first_two == ids[:7]  # an explicit cap keeps the first batches of the same pass


def test_a_fixed_step_count_splits_all_samples_evenly(tokenizer):
    trainer = TorchTrainer(tiny_model(tokenizer), config(optimizer_steps=4, minibatch_size=2), 1e-3)
    batches = trainer.minibatches(varied_samples(10), rng_seed=3)
    assert [len(b) for b in batches] == [2, 3, 2, 3]  # 4 steps; minibatch_size does not apply
    assert sorted(s.sample_index for b in batches for s in b) == list(range(10))
    assert len(trainer.minibatches(varied_samples(3), rng_seed=3)) == 3  # never an empty mini-batch


def test_minibatches_keep_samples_of_one_prompt_together(tokenizer):
    """The m judge samples of a step share a prompt: they are shuffled as one group."""
    steps = varied_samples(6)
    judge = [s.model_copy(update={"response_ids": [50 + l], "judge_sample": l, "sample_index": 10 * i + l})
             for i, s in enumerate(steps) for l in range(3)]
    trainer = TorchTrainer(tiny_model(tokenizer), config(optimizer_steps=3), 1e-3)
    batches = trainer.minibatches(judge, rng_seed=5)
    assert [len(b) for b in batches] == [6, 6, 6]
    for batch in batches:
        prompts = [tuple(s.prompt_ids) for s in batch]
        assert all(prompts.count(p) == 3 for p in prompts)
    assert sorted(s.sample_index for b in batches for s in b) == sorted(s.sample_index for s in judge)


def test_exact_steps_trains_the_steps_asked_for_with_fewer_prompt_groups_than_steps(tokenizer):
    """Three problems' programs (three groups of one prompt each, as the coding data stage keeps them) and
    optimizer_steps = 4: four real optimizer steps, every sample trained once; train.exact_steps = false
    (runs written before the key) keeps whole groups and takes three."""
    groups = [[sample([11 + p, 12, 13], [40 + p + k, 41], (-1.0) ** k, index=8 * p + k) for k in range(8)]
              for p in range(3)]
    samples = [s for group in groups for s in group]
    for exact, steps in ((True, 4), (False, 3)):
        trainer = TorchTrainer(tiny_model(tokenizer), config(optimizer_steps=4, max_optimizer_steps=None,
                                                             exact_steps=exact), 1e-3)
        batches = trainer.minibatches(samples, rng_seed=1)
        assert len(batches) == steps and sorted(s.sample_index for b in batches for s in b) == list(range(24))
        metrics = trainer.train(samples, None, rng_seed=1)
        assert (metrics["optimizer_steps"], metrics["samples_trained"]) == (steps, 24)
        assert trainer.optimizer.state_dict()["state"][0]["step"] == steps  # AdamW really stepped that often
    from rla_core.config import LEGACY_VALUES, load_config

    assert load_config().train.exact_steps is True and LEGACY_VALUES["train.exact_steps"] is False


def test_train_counts_samples_trained_and_left_over_by_a_cap(tokenizer):
    samples = varied_samples(10)
    full = TorchTrainer(tiny_model(tokenizer), config(max_optimizer_steps=None), 1e-3).train(samples)
    assert (full["samples"], full["samples_trained"], full["samples_over_cap"], full["optimizer_steps"]) == (10, 10, 0, 3)
    capped = TorchTrainer(tiny_model(tokenizer), config(max_optimizer_steps=1), 1e-3).train(samples)
    assert (capped["samples_trained"], capped["samples_over_cap"], capped["optimizer_steps"]) == (3, 7, 1)


def test_gradient_accumulation_is_exact(tokenizer):
    """One mini-batch of 8: micro 8 and micro 2 give the same gradient and, after the step, the
    same parameters. (Adam's first step is nearly scale-free, so the gradient check is the one
    that catches a loss scaled twice.)"""
    samples = varied_samples(8)
    results = []
    for micro in (8, 2):
        model = tiny_model(tokenizer, seed=1)
        cfg = config(minibatch_size=8, micro_batch_size=micro, max_optimizer_steps=1, grad_clip=100.0)
        trainer = TorchTrainer(model, cfg, 2e-4)
        grads = _grads(trainer, samples)
        metrics = trainer.train(samples, None, rng_seed=0)
        assert metrics["optimizer_steps"] == 1
        results.append((grads, flat_params(model), metrics))
    (grads_full, params_full, m_full), (grads_micro, params_micro, m_micro) = results
    assert torch.allclose(grads_full, grads_micro, rtol=1e-4, atol=1e-8)
    assert torch.allclose(params_full, params_micro, rtol=0, atol=1e-6)
    assert m_full["loss"] == pytest.approx(m_micro["loss"], abs=1e-6)
    assert m_full["grad_norm"] == pytest.approx(m_micro["grad_norm"], rel=1e-5)


def _grads(trainer: TorchTrainer, samples: list[TrainingSample]) -> torch.Tensor:
    trainer.optimizer.zero_grad(set_to_none=False)
    trainer.accumulate_gradients(trainer.score(samples))
    return torch.cat([p.grad.flatten().clone() for p in trainer.model.parameters()])


def test_gradient_is_linear_in_each_samples_own_advantage(tokenizer):
    """At ρ = 1 (first step, π_ref = π_old) the gradient is −Σ_b Â_b ∇(mean log π_b) / B: flipping
    one sample's advantage flips exactly its own contribution."""
    first, second = varied_samples(2)
    trainer = TorchTrainer(tiny_model(tokenizer), config(micro_batch_size=2), 1e-3)
    with_adv = lambda item, adv: item.model_copy(update={"advantage": adv})  # noqa: E731
    both = _grads(trainer, [first, second])
    only_first = _grads(trainer, [first, with_adv(second, 0.0)])
    only_second = _grads(trainer, [with_adv(first, 0.0), second])
    flipped = _grads(trainer, [with_adv(first, -first.advantage), second])
    assert only_first.abs().max() > 1e-4 and only_second.abs().max() > 1e-4
    # Anchored to each sample alone (mini-batch of 1, so half the weight): no swapped pairings.
    assert torch.allclose(only_first, _grads(trainer, [first]) / 2, atol=1e-7)
    assert torch.allclose(only_second, _grads(trainer, [second]) / 2, atol=1e-7)
    assert torch.allclose(both, only_first + only_second, atol=1e-7)
    assert torch.allclose(flipped, -only_first + only_second, atol=1e-7)


def test_update_follows_each_samples_advantage_after_a_drop(tokenizer):
    """A too-long sample sits between the two others: if advantages were paired by position after
    dropping it, the first response would get its −1 and go down."""
    good = sample([11, 12, 13], [50, 51], advantage=1.0, index=0)
    too_long = sample([20] * MAX_POSITIONS, [60], advantage=-1.0, index=1)
    bad = sample([14, 15, 16], [70, 71], advantage=-1.0, index=2)
    model = tiny_model(tokenizer)
    start = (response_logprob(model, good), response_logprob(model, bad))
    cfg = config(minibatch_size=2, micro_batch_size=2, max_optimizer_steps=1)
    trainer = TorchTrainer(model, cfg, 1e-2)
    for seed in range(5):
        metrics = trainer.train([good, too_long, bad], None, rng_seed=seed)
        assert metrics["dropped_too_long"] == 1 and metrics["samples"] == 2
    assert response_logprob(model, good) > start[0] + 0.5
    assert response_logprob(model, bad) < start[1] - 0.5


def test_flipping_one_advantage_flips_only_that_response(tokenizer):
    first = sample([11, 12, 13], [50, 51], advantage=1.0, index=0)
    second = sample([14, 15, 16], [70, 71], advantage=-1.0, index=1)
    changes = []
    for second_adv in (-1.0, 1.0):
        model = tiny_model(tokenizer)
        items = [first, second.model_copy(update={"advantage": second_adv})]
        start = [response_logprob(model, item) for item in items]
        cfg = config(minibatch_size=4, micro_batch_size=4, max_optimizer_steps=1)
        TorchTrainer(model, cfg, 1e-2).train(items * 2, None, 0)
        changes.append([response_logprob(model, item) - s for item, s in zip(items, start)])
    assert changes[0][0] > 0 and changes[1][0] > 0  # the untouched sample goes up both times
    assert changes[0][1] < 0 < changes[1][1]  # the flipped one follows its sign


def test_too_long_samples_are_dropped_and_counted(tokenizer):
    fits = sample([11] * (MAX_POSITIONS - 2), [50, 51], 1.0, index=0)  # exactly max_positions
    over = sample([11] * (MAX_POSITIONS - 1), [50, 51], 1.0, index=1)
    empty = sample([11], [], 1.0, index=2)
    metrics = TorchTrainer(tiny_model(tokenizer), config(), 1e-3).train([fits, over, empty], None, 0)
    assert metrics["dropped_too_long"] == 1 and metrics["samples"] == 1 and metrics["dropped_empty"] == 1
    nothing = TorchTrainer(tiny_model(tokenizer), config(), 1e-3).train([over], None, 0)
    assert nothing["optimizer_steps"] == 0 and nothing["dropped_too_long"] == 1


def test_reference_old_vs_initial(tokenizer):
    samples = varied_samples(4)
    one_step = dict(minibatch_size=4, max_optimizer_steps=1)
    old = TorchTrainer(tiny_model(tokenizer), config(reference="old", **one_step), 1e-3)
    assert old.train(samples, None, 0)["kl"] == pytest.approx(0.0, abs=1e-6)  # π_ref = π_old, ρ = 1
    anchored = TorchTrainer(tiny_model(tokenizer), config(reference="initial", **one_step), 1e-3)
    with pytest.raises(ValueError, match="reference"):
        anchored.train(samples, None, 0)
    assert anchored.train(samples, tiny_model(tokenizer, seed=5), 0)["kl"] > 1e-3


def test_optimizer_state_persists_across_save_and_load(tokenizer, tmp_path):
    samples = varied_samples(8)
    cfg = config(max_optimizer_steps=2)
    trainer = TorchTrainer(tiny_model(tokenizer), cfg, 1e-3)
    trainer.train(samples, None, rng_seed=0)
    trainer.save(tmp_path / "iter-1", tokenizer=tokenizer)
    assert (tmp_path / "iter-1" / OPTIMIZER_FILE).is_file()

    model, _ = load_pretrained(tmp_path / "iter-1")
    resumed = get_trainer("torch")(model, cfg, 5e-4, str(tmp_path / "iter-1" / OPTIMIZER_FILE))
    saved, restored = trainer.optimizer.state_dict(), resumed.optimizer.state_dict()
    assert saved["state"].keys() == restored["state"].keys() and saved["state"]
    for index, state in saved["state"].items():
        assert torch.equal(state["exp_avg"], restored["state"][index]["exp_avg"])
        assert torch.equal(state["exp_avg_sq"], restored["state"][index]["exp_avg_sq"])
        assert float(state["step"]) == float(restored["state"][index]["step"]) == 2
    assert resumed.optimizer.param_groups[0]["lr"] == 5e-4  # the configured lr wins

    # Resuming from disk continues exactly as the live trainer would.
    resumed.optimizer.param_groups[0]["lr"] = 1e-3
    trainer.train(samples, None, rng_seed=1)
    resumed.train(samples, None, rng_seed=1)
    assert torch.equal(flat_params(trainer.model), flat_params(resumed.model))


def test_load_optimizer_errors_name_the_path(tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="optimizer"):
        TorchTrainer(tiny_model(tokenizer), config(), 1e-3, tmp_path / "missing.pt")


def test_rollout_logprobs_are_the_recomputed_old_logprobs(tokenizer):
    """The seam engine → trainer: the log-probs the transformers engine records while sampling are
    π_old of the update (the same weights), so using them changes the update only by float rounding."""
    from rla_core.rollout.base import SamplingParams
    from rla_core.rollout.hf_engine import TransformersEngine

    model = tiny_model(tokenizer)
    engine = TransformersEngine(model, tokenizer, batch_size=8)
    prompts = [tokenizer(f"take apple {i} from shelf")["input_ids"] for i in range(6)]
    generations = engine.generate(prompts, SamplingParams(max_new_tokens=5, temperature=1.0, seed=3, n=2))
    samples = [TrainingSample(prompt_ids=prompts[k // 2], response_ids=g.token_ids, advantage=(-1.0) ** k,
                              task_id="t", sample_index=k, step_index=0, old_logprobs=g.logprobs)
               for k, g in enumerate(generations) if g.token_ids]
    recomputed = response_logprobs(model, samples, 4, tokenizer.pad_token_id)
    for item, again in zip(samples, recomputed, strict=True):
        assert torch.allclose(torch.tensor(item.old_logprobs), again, atol=1e-5)
    results = {}
    for mode in ("recompute", "rollout"):
        trainer = TorchTrainer(tiny_model(tokenizer), config(old_logprobs=mode, max_optimizer_steps=None), 1e-2)
        results[mode] = (trainer.train(samples, rng_seed=1), flat_params(trainer.model))
    for name in ("loss", "pg_loss", "kl", "grad_norm"):
        assert results["rollout"][0][name] == pytest.approx(results["recompute"][0][name], rel=1e-4, abs=1e-6)
    # Float rounding of π_old moves each weight by a tiny fraction of the update itself (Adam divides by
    # the gradient's own scale, so a weight with a near-zero gradient shows a rounding difference larger
    # than its gradient would suggest: 1e-5 of a 3e-2 update here).
    step = float((results["recompute"][1] - flat_params(tiny_model(tokenizer))).abs().max())
    assert step > 1e-3  # the update moved the weights
    assert float((results["rollout"][1] - results["recompute"][1]).abs().max()) <= 1e-3 * step

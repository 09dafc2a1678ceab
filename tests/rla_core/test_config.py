from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

from rla_core.config import PROJECT_ROOT, Config, ConfigError, load_config


def test_defaults_load_and_match_the_model_defaults():
    cfg = load_config()
    assert cfg == Config()
    assert cfg.reward.step_weight == 1.0 and cfg.judge.train and cfg.environment.adapt


def test_yaml_then_set_overrides_apply_in_order(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("rollout:\n  n: 4\nreward:\n  step_weight: 0.5\n")
    cfg = load_config([path], ["rollout.n=8", "judge.train=false"])
    assert cfg.rollout.n == 8
    assert cfg.reward.step_weight == 0.5
    assert cfg.judge.train is False


def test_unknown_key_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="rollout.nn"):
        load_config(overrides=["rollout.nn=3"])
    path = tmp_path / "bad.yaml"
    path.write_text("environmnet:\n  adapt: false\n")
    with pytest.raises(ConfigError, match="environmnet"):
        load_config([path])


@pytest.mark.parametrize("key, near", [
    ("rollout.nn", ["rollout.n"]), ("environmnet", ["environment"]), ("judge.mm", ["judge.m"]),
    ("models.policy.hiden_size", ["models.policy.hidden_size"]), ("rollout.vllm.dtyp", ["rollout.vllm.dtype"]),
    ("train.deepspeed.zero", ["train.deepspeed.zero_stage"]),  # a prefix of the key
    ("rollout.lr", ["train.lr", "bootstrap.lr"]),  # in another section
    ("run.colour", []),
])
def test_an_unknown_key_suggests_the_near_ones(key, near):
    from rla_core.config import close_keys

    assert close_keys(key) == near


def test_an_unknown_key_is_one_line_with_its_suggestion_from_set_and_from_a_yaml_file(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(overrides=["rollout.nn=4"])
    assert str(err.value) == "unknown config key 'rollout.nn'; did you mean 'rollout.n'?"
    (tmp_path / "a.yaml").write_text("rollout:\n  n: 4\n")
    (tmp_path / "b.yaml").write_text("rollout:\n  n: 4\n  vllm:\n    dtyp: auto\n")
    with pytest.raises(ConfigError) as err:
        load_config([tmp_path / "a.yaml", tmp_path / "b.yaml"])
    assert str(err.value) == (f"{tmp_path / 'b.yaml'}: unknown config key 'rollout.vllm.dtyp'; did you mean "
                              "'rollout.vllm.dtype'?")
    with pytest.raises(ConfigError, match="unknown config key 'colour'; `rla config` lists the keys"):
        load_config(overrides=["colour=red"])


def test_bad_value_names_the_key_and_value():
    with pytest.raises(ConfigError, match=r"rollout\.n.*-1"):
        load_config(overrides=["rollout.n=-1"])
    with pytest.raises(ConfigError, match="train.reference"):
        load_config(overrides=["train.reference=newest"])


def test_band_must_be_ordered():
    with pytest.raises(ConfigError, match="alpha_low"):
        load_config(overrides=["environment.alpha_low=0.9"])


def test_the_judges_band_may_only_widen():
    assert load_config(overrides=["coding.judge_alpha_high=1.0"]).coding.judge_alpha_high == 1.0
    assert load_config().coding.judge_alpha_high is None  # the paper: the policy's band
    with pytest.raises(ConfigError, match=r"coding.judge_alpha_high \(0.5\) must be at least environment.alpha_high \(0.8\)"):
        load_config(overrides=["coding.judge_alpha_high=0.5"])
    with pytest.raises(ConfigError, match="judge_alpha_high"):
        load_config(overrides=["coding.judge_alpha_high=1.5"])


def test_a_dagger_round_needs_both_its_tasks_and_steps_and_a_multi_turn_game():
    boot = load_config(overrides=["bootstrap.policy_dagger_tasks=200", "bootstrap.policy_dagger_steps=60"]).bootstrap
    assert (boot.policy_dagger_tasks, boot.policy_dagger_steps, boot.policy_dagger_temperature) == (200, 60, 0.0)
    assert load_config().bootstrap.policy_dagger_tasks == 0  # no round unless asked
    for one in ("bootstrap.policy_dagger_tasks=200", "bootstrap.policy_dagger_steps=60"):
        with pytest.raises(ConfigError, match="policy_dagger_tasks .* and policy_dagger_steps .* go together"):
            load_config(overrides=[one])
    with pytest.raises(ConfigError, match="one turn"):
        load_config([REPO / "configs" / "coding.yaml"],
                    ["bootstrap.policy_dagger_tasks=2", "bootstrap.policy_dagger_steps=1"])
    with pytest.raises(ConfigError, match="policy_dagger_temperature"):
        load_config(overrides=["bootstrap.policy_dagger_temperature=-1"])


def test_override_without_equals_sign_is_rejected():
    with pytest.raises(ConfigError, match="section.key=value"):
        load_config(overrides=["rollout.n"])


def test_missing_file_is_reported(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config([tmp_path / "nope.yaml"])


REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", sorted((REPO / "configs").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads(path):
    load_config([path])


def test_real_model_preset_uses_the_scale_out_backends():
    cfg = load_config([REPO / "configs/presets/qwen2.5-7b-instruct-8gpu.yaml"])
    assert (cfg.rollout.backend, cfg.train.backend) == ("vllm", "deepspeed")
    assert (cfg.rollout.tasks_per_iteration, cfg.rollout.n, cfg.judge.m, cfg.rollout.max_steps) == (16, 8, 3, 40)
    assert cfg.train.deepspeed.zero_stage == 3 and cfg.train.deepspeed.num_procs == 8


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("train.deepspeed.offload_params=true", "train.deepspeed"),
        ("train.deepspeed.zero_stage=4", "train.deepspeed.zero_stage"),
        ("storage.backend=s3", "storage"),
        ("rollout.vllm.gpu_memory_utilization=1.5", "rollout.vllm.gpu_memory_utilization"),
    ],
)
def test_scale_out_sections_reject_bad_values(override, key):
    with pytest.raises(ConfigError, match=f"config key '{key}'"):
        load_config(None, [override])


def _models_in(annotation) -> list[type[BaseModel]]:
    """The section models an annotation holds: itself, or inside `X | None`, `list[X]`, `dict[str, X]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in _models_in(arg)]


def _fields(model: type[BaseModel], prefix: str = ""):
    """(dotted name, FieldInfo) of every field of `model` and, recursively, of its section models."""
    for name, info in model.model_fields.items():
        dotted = f"{prefix}{name}"
        yield dotted, info
        for section in _models_in(info.annotation):
            yield from _fields(section, f"{dotted}.")


def test_every_config_field_has_a_description():
    """`rla config` shows each key's description: a field added without one fails here."""
    fields = dict(_fields(Config))
    assert "rollout.vllm.weight_sync" in fields and "models.environment.hidden_size" in fields  # recursion works
    assert [name for name, info in fields.items() if not (info.description or "").strip()] == []


def test_config_differences_name_nested_keys_and_leave_out_what_a_run_may_change():
    from rla_core.config import config_differences

    old = load_config(None, ["environment.knobs={rooms: 2}"])
    same = load_config(None, ["environment.knobs={rooms: 2}", "run.iterations=9", "run.output_dir=elsewhere",
                              "orchestration.gpu_deployment=rla-stage/gpu"])
    assert config_differences(old, same) == []
    new = load_config(None, ["environment.knobs={rooms: 3, closed: 1}", "rollout.n=4"])
    assert config_differences(old, new) == ["environment.knobs.rooms", "rollout.n", "environment.knobs.closed"]


@pytest.mark.parametrize("text, where", [
    ("run:\n  name: x\n  seed: 3: 4\n", "x.yaml:3: mapping values are not allowed here"),
    ("run:\n\tname: x\n", "x.yaml:2: found character '\\t'"),
    ("run: [1, 2\n", "x.yaml:1: expected ',' or ']'"),  # the file ends inside the list: the line that opened it
])
def test_yaml_errors_name_the_file_and_line_in_one_line(tmp_path, text, where):
    (tmp_path / "x.yaml").write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config([tmp_path / "x.yaml"])
    assert str(err.value).startswith(f"{tmp_path}/{where}") and "\n" not in str(err.value)


def test_a_run_config_written_before_the_sampler_key_loads_with_the_sampler_it_ran_with(tmp_path):
    """A run's config.yaml holds every key; one written before `rollout.sampler` existed ran with
    torch.multinomial, and must continue and reproduce with it. A new config gets the faster default."""
    import yaml

    from rla_core.config import config_to_yaml, load_run_config, run_mismatch

    assert load_config().rollout.sampler == "inverse_cdf"
    written = yaml.safe_load(config_to_yaml(load_config()))
    del written["rollout"]["sampler"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(written))
    loaded = load_run_config(old)
    assert loaded.rollout.sampler == "multinomial"
    assert loaded.model_copy(update={"rollout": loaded.rollout.model_copy(update={"sampler": "inverse_cdf"})}) \
        == load_config()  # nothing else changed
    assert load_config([old]).rollout.sampler == "inverse_cdf"  # a user's config file: the default
    current = tmp_path / "current.yaml"
    current.write_text(config_to_yaml(load_config()))
    assert load_run_config(current).rollout.sampler == "inverse_cdf"  # a key that is there is kept
    assert load_run_config(old, ["rollout.sampler=inverse_cdf"]).rollout.sampler == "inverse_cdf"
    refusal = run_mismatch("runs/old", loaded, load_config())
    assert refusal is not None and "rollout.sampler=multinomial" in refusal and "rollout.sampler=inverse_cdf" in refusal
    with pytest.raises(ConfigError, match="rollout.sampler"):
        load_config(overrides=["rollout.sampler=gumbel"])


def test_the_dvc_pipeline_params_are_the_quickstart():
    """params.yaml (the root DVC pipeline) runs the quickstart's config under its own run name."""
    quick = load_config([PROJECT_ROOT / "configs" / "quickstart.yaml"], []).model_dump()
    params = load_config([PROJECT_ROOT / "params.yaml"], []).model_dump()
    quick["run"].pop("name"), params["run"].pop("name")
    assert params == quick

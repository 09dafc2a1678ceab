"""Bad configs and YAML files (fresh run folder: it must not appear): one clear line for each, nothing
changed (the check and the fixtures: bad_input_helpers.py).

Cases by category (parametrised ids start with the category): configs 21, yaml 14.
"""
from __future__ import annotations

import pytest

from rla_core.config import PROJECT_ROOT
from tests.flows.bad_input_helpers import QUICK, args, assert_one_line_and_nothing_changed, registry
from tests.flows.bad_input_helpers import cwd, flows, template  # noqa: F401  (fixtures; flows: autouse)

CASES: list = []
case = registry(CASES)


# ---- configs (fresh run folder: it must not appear)
@case("configs", "unknown config key 'rollout.nn'; did you mean 'rollout.n'?")
def unknown_key(cwd, template):
    return args("rollout.nn=3")


@case("configs", "judge.m", "0")
def zero_judge_samples(cwd, template):
    return args("judge.m=0")


@case("configs", "rollout.n", "lots")
def wrong_type(cwd, template):
    return args("rollout.n=lots")


@case("configs", "environment.alpha_low must be < environment.alpha_high")
def alpha_band_reversed(cwd, template):
    return args("environment.alpha_low=0.9")


@case("configs", "environment.name", "kitchen")
def unknown_environment(cwd, template):
    return args("environment.name=kitchen")


@case("configs", "rollout.backend", "vlm")
def unknown_rollout_backend(cwd, template):
    return args("rollout.backend=vlm")


@case("configs", "train.backend", "jax")
def unknown_trainer_backend(cwd, template):
    return args("train.backend=jax")


@case("configs", "environment.rewriter")
def unknown_rewriter(cwd, template):
    return args("environment.rewriter=gpt")


@case("configs", "run.name", "'..'")
def run_name_climbs_out(cwd, template):
    return args("run.name=..")


@case("configs", "run.name", "/etc")
def run_name_absolute(cwd, template):
    return args("run.name=/etc")


@case("configs", "run.output_dir", "runs")
def output_dir_is_a_file(cwd, template):
    (cwd / "runs").write_text("not a folder")
    return args()


@case("configs", "rollout.n", "section.key=value")
def override_without_value(cwd, template):
    return args("rollout.n")


@case("configs", "storage.bucket")
def s3_without_bucket(cwd, template):
    return args("storage.backend=s3")


@case("configs", "offload_params", "zero_stage 3")
def offload_without_zero3(cwd, template):
    return args("train.deepspeed.offload_params=true")


@case("configs", "not found", "nope.yaml")
def config_file_missing(cwd, template):
    return args(config=[cwd / "nope.yaml"])


@case("configs", "is a folder")
def config_file_is_a_folder(cwd, template):
    (cwd / "configs").mkdir()
    return args(config=[cwd / "configs"])


@case("configs", "rollout.n.x")
def override_below_a_value(cwd, template):
    return args("rollout.n=3", "rollout.n.x=1")


@case("configs", "unknown ablation rows", "valid: abcd")
def ablation_unknown_rows(cwd, template):
    return [*args(command="ablation"), "--rows", "xyz"]


@case("configs", "--seeds")
def ablation_no_seeds(cwd, template):
    return [*args(command="ablation"), "--seeds", "0"]


@case("configs", "reward.step_weight")
def ablation_without_step_weight(cwd, template):
    return [*args("reward.step_weight=0", command="ablation"), "--rows", "ab"]


@case("configs", "coding.judge_test_weight (λ of this setting) must be > 0", "(d)")
def coding_ablation_without_judge_test_weight(cwd, template):  # coding's λ is its own key, not reward.step_weight
    coding = str(PROJECT_ROOT / "configs" / "coding.yaml")
    return [*args("train.optimizer_steps=2", command="ablation", config=[coding]), "--rows", "ad"]


# ---- YAML files
def yaml_case(text: str | bytes):
    def make(cwd, template):
        path = cwd / "x.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return args(config=[QUICK, path])
    return make


for _name, _text, _expected in [
    ("mapping_value_in_a_value", "run:\n  name: x\n  seed: 3: 4\n", ("x.yaml:3:", "mapping values")),
    ("unterminated_quote", 'run:\n  name: "x\nrollout:\n  n: 3\n', ("x.yaml:", "quoted scalar")),
    ("tab_indent", "run:\n\tname: x\n", ("x.yaml:2:", "'\\t'")),
    ("nul_character", "run:\n  name: x\x00\n", ("x.yaml:2:", "U+0000")),
    ("not_utf8", b"run:\n  name: \xff\xfe\n", ("x.yaml:2:", "not UTF-8")),
    ("top_level_list", "- run\n- rollout\n", ("x.yaml", "top level must be a mapping")),
    ("python_tag", "run: !!python/object:os.system x\n", ("x.yaml:1:", "constructor")),
    ("unclosed_flow_list", "environment:\n  reserved_files: [a, b\nrollout: {}\n", ("x.yaml:3:", "','")),
    ("undefined_alias", "run: &a\n  name: *b\n", ("x.yaml:2:", "alias")),
    ("section_is_a_number", "rollout: 3\n", ("config key 'rollout'", "dictionary")),
    ("bad_indent", "run:\n  name: x\n name2: y\n", ("x.yaml:3:", "block")),
    ("unknown_key_near_a_known_one", "rollout:\n  nn: 4\n",
     ("x.yaml: unknown config key 'rollout.nn'", "did you mean 'rollout.n'?")),
]:
    case("yaml", *_expected, name=_name)(yaml_case(_text))


@case("yaml", "--set rollout.n", "not valid YAML")
def set_value_not_yaml(cwd, template):
    return args("rollout.n=[1")


@case("yaml", "second.yaml:2:")
def second_of_two_files(cwd, template):
    (cwd / "first.yaml").write_text("rollout:\n  n: 4\n")
    (cwd / "second.yaml").write_text("run:\n  seed: [1\n")
    return args(config=[QUICK, cwd / "first.yaml", cwd / "second.yaml"])


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("make, expected", CASES)
def test_bad_input_is_one_line_and_changes_nothing(make, expected, cwd, template, capsys, flows):
    assert_one_line_and_nothing_changed(make, expected, cwd, template, capsys, flows)

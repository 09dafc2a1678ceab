"""`rla config`: the resolved config tree with values, defaults and descriptions."""
from pathlib import Path

from flows.cli import main
from flows.config_cmd import config_keys, format_value, render_config
from rla_core.config import Config, load_config

QUICKSTART = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"


def _leaves(model, prefix=""):
    """Dotted name and description of every non-section field, walked from the models themselves."""
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if hasattr(type(value), "model_fields"):
            yield from _leaves(value, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", info.description


def _line(text: str, key: str) -> str:
    return next(line for line in text.splitlines() if line[2:].split(" ", 1)[0] == key)


def test_an_overridden_key_shows_its_value_and_its_default():
    text = render_config(load_config([QUICKSTART], ["rollout.n=4"]))
    line = _line(text, "rollout.n")
    assert line.startswith("* ") and "4 (default 8)" in line and "N trajectories per task" in line
    # a key the quickstart sets, one it leaves alone, and a nested default that is not ModelSpec's own
    assert _line(text, "train.reference").startswith("* ") and "initial (default old)" in text
    assert _line(text, "rollout.max_steps").startswith("  ") and "default" not in _line(text, "rollout.max_steps")
    assert "(default" not in _line(text, "models.environment.hidden_size")


def test_every_field_appears_with_its_description():
    cfg = load_config([QUICKSTART], ["rollout.n=4"])
    text = render_config(cfg)
    flat = " ".join(text.split())  # descriptions are wrapped over lines
    leaves = dict(_leaves(cfg))
    assert len(leaves) > 100 and sorted(key.name for key in config_keys(cfg)) == sorted(leaves)
    for name, description in leaves.items():
        assert _line(text, name)
        assert description and " ".join(description.split()) in flat, name
    for section in ("[run]", "[models.policy]", "[rollout.vllm]", "[train.deepspeed]", "[orchestration]"):
        assert section in text


def test_lines_are_aligned_and_fit_the_width():
    text = render_config(Config(), width=120)
    rows = [line for line in text.splitlines() if line[:2] in ("  ", "* ") and line[2:3] not in ("", " ")]
    value_columns = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in rows}
    assert len(value_columns) == 1  # every value starts in the same column
    assert max(len(line) for line in text.splitlines()) <= 120
    assert "0 differ from their default" in text


def test_values_print_as_set_takes_them():
    assert [format_value(v) for v in (None, True, 0.0003, "auto", [], {"a": [1, 2]}, "1")] == \
        ["null", "true", "0.0003", "auto", "[]", "{a: [1, 2]}", "'1'"]


def test_the_command_prints_the_tree(capsys):
    assert main(["config", "--config", str(QUICKSTART), "--set", "rollout.n=4"]) == 0
    out = capsys.readouterr().out
    assert "4 (default 8)" in _line(out, "rollout.n") and "data/household/heldout.jsonl" in out


def test_without_config_it_prints_the_defaults(capsys):
    assert main(["config"]) == 0
    assert "0 differ from their default" in capsys.readouterr().out


def test_a_bad_key_is_one_line_naming_the_key(capsys):
    assert main(["config", "--config", str(QUICKSTART), "--set", "rollout.nn=3"]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.count("\n") == 0 and err.startswith("rla: error:") and "rollout.nn" in err
    assert captured.out == ""


def test_a_bad_value_names_the_key(capsys):
    assert main(["config", "--set", "judge.m=0"]) == 2
    err = capsys.readouterr().err
    assert "judge.m" in err and err.startswith("rla: error:")

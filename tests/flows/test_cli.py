"""The CLI fails fast with one clear line on bad input, before any flow or server starts."""
from flows.cli import main


def test_unknown_key_is_one_line_naming_the_key(capsys):
    assert main(["run", "--config", "configs/quickstart.yaml", "--set", "rollout.nn=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("rla: error:") and "rollout.nn" in err


def test_bad_value_names_key_and_value(capsys):
    assert main(["quickstart", "--set", "judge.m=0"]) == 2
    err = capsys.readouterr().err
    assert "judge.m" in err and "0" in err


def test_missing_config_file_is_reported(capsys, tmp_path):
    assert main(["run", "--config", str(tmp_path / "missing.yaml")]) == 2
    assert "not found" in capsys.readouterr().err


def test_run_without_config_is_refused(capsys):
    assert main(["eval"]) == 2
    assert "--config" in capsys.readouterr().err


def test_ui_without_a_run_is_refused(capsys, tmp_path):
    assert main(["ui", "--run", str(tmp_path)]) == 2
    assert "no MLflow store" in capsys.readouterr().err

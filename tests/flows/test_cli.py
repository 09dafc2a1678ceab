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


def test_sigterm_stops_like_ctrl_c_and_leaves_no_prefect_server(tmp_path):
    """`kill PID` on a running `rla run`: exit 130 with the resume hint, and the ephemeral Prefect API
    server it started (a child process) is gone too (it used to be left running as an orphan)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    command = [sys.executable, "-m", "flows.cli", "run", "--config", "configs/quickstart.yaml",
               "--set", f"run.output_dir={tmp_path}", "--set", "run.name=sigterm"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    try:
        server = None
        deadline = time.monotonic() + 180
        while server is None and time.monotonic() < deadline and proc.poll() is None:
            server = next((c for c in psutil.Process(proc.pid).children(recursive=True)
                           if "uvicorn" in " ".join(c.cmdline())), None)
            time.sleep(0.5)
        assert server is not None, "the run never started its ephemeral Prefect server"
        time.sleep(3)  # let the flow get going
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 130, output[-2000:]
        assert "re-run the same command to continue" in output
        server.wait(timeout=30)  # raises psutil.TimeoutExpired if the server outlives the run
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_user_errors_are_one_line_and_bugs_keep_their_traceback(capsys, monkeypatch):
    import pytest

    from flows import cli
    from rla_core.errors import BadValue

    def user_mistake(args):
        raise BadValue("iteration 7 needs iteration 6 complete")

    monkeypatch.setattr(cli, "_dispatch", user_mistake)
    assert main(["eval"]) == 2
    assert capsys.readouterr().err.strip() == "rla: error: iteration 7 needs iteration 6 complete"

    def bug(args):
        raise KeyError("slot_id")  # a programming error must not pass for a user error

    monkeypatch.setattr(cli, "_dispatch", bug)
    with pytest.raises(KeyError, match="slot_id"):
        main(["eval"])


def _subparsers(parser, path=("rla",)):
    """(command path, parser) of `parser` and of every subcommand below it."""
    import argparse

    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from _subparsers(child, (*path, name))


def test_every_argument_of_every_subcommand_has_help():
    import argparse

    from flows.cli import _parser

    missing = []
    for path, parser in _subparsers(_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                missing += [(*path, a.dest) for a in action._choices_actions if not (a.help or "").strip()]
            elif not isinstance(action, argparse._HelpAction) and not (action.help or "").strip():
                missing.append((*path, "/".join(action.option_strings) or action.dest))
    assert missing == []
    assert len(list(_subparsers(_parser()))) > 15  # the walk reaches sandbox run and bench's parts


def test_the_summary_leaves_out_metrics_neither_side_has(tmp_path):
    """No greedy pass (eval.greedy_at_end false), no dev split: no `n/a n/a` rows; one-sided ones stay."""
    from flows.commands import summary_table
    from rla_core.config import PROJECT_ROOT, config_to_yaml, load_config

    cfg = load_config([PROJECT_ROOT / "configs" / "quickstart.yaml"], ["eval.greedy_at_end=false"])
    (tmp_path / "config.yaml").write_text(config_to_yaml(cfg))
    (tmp_path / "baseline").mkdir()
    (tmp_path / "baseline" / "metrics.json").write_text(
        '{"heldout/episodes": 4, "heldout/success_rate": 0.25, "bench/p_pos": 0.5}')
    table = summary_table(str(tmp_path))
    assert "greedy" not in table and "dev" not in table and "n/a n/a" not in " ".join(table.split())
    lines = {line[:28].strip(): line[28:].split() for line in table.splitlines() if line[:28].strip()}
    assert lines["held-out success (sampled)"] == ["0.250", "n/a"]  # before only: still shown
    assert lines["judge benchmark p+"] == ["0.500", "n/a"]
    from tasks.settings.episodic import EpisodicSetting

    assert {label for label, _ in EpisodicSetting.summary_rows} & set(lines) == {"held-out success (sampled)", "judge benchmark p+"}


def test_one_table_holds_every_command_the_parser_accepts():
    from flows.cli import COMMANDS, _parser

    top = {path[1] for path, _ in _subparsers(_parser()) if len(path) == 2}
    assert top == set(COMMANDS) and len(top) == 16
    flows = {name for name, command in COMMANDS.items() if command.flow}
    assert flows == {"quickstart", "run", "seed", "bootstrap", "eval", "ablation", "data", "reproduce", "bench"}


def test_a_command_without_a_config_says_so(capsys):
    assert main(["run"]) == 2
    assert "rla run needs --config FILE" in capsys.readouterr().err

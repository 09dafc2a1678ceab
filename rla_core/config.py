"""Typed run configuration: one default per field (the schema: rla_core/config_schema.py, re-exported here),
YAML overrides, `--set a.b=v` overrides.

Unknown keys and bad values fail at load with a message that names the key (an unknown one with the
nearest valid keys, and the YAML file it is in).
"""
from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path
from typing import Any

import yaml
import yaml.reader
from pydantic import BaseModel, ValidationError

from rla_core.config_schema import (  # noqa: F401  (re-exported: every importer reads the schema from here)
    ModelSpec, ModelsConfig, RunConfig, EnvironmentConfig, VllmConfig, RolloutConfig, JudgeConfig,
    RewardConfig, DeepSpeedConfig, TrainConfig, CodingConfig, TextWorldConfig, BootstrapConfig, EvalConfig,
    TrackingConfig, VersioningConfig, GatesConfig, StorageConfig, OrchestrationConfig, Config,
)
from rla_core.errors import UserError


class ConfigError(UserError, ValueError):
    """A config key or value is invalid; the message names the key."""


PROJECT_ROOT = Path(__file__).resolve().parent.parent


def resolve_data_path(path: str | Path) -> Path:
    """A data file named in a config: absolute, else relative to the working directory when it exists
    there, else relative to the project root (so `data/household/heldout.jsonl` works from anywhere)."""
    path = Path(path)
    if path.is_absolute() or path.exists():
        return path.resolve()
    return PROJECT_ROOT / path


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"{dotted}: '{key}' is not a section")
    node[keys[-1]] = value


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _yaml_error(err: yaml.YAMLError, text: str) -> tuple[int | None, str]:
    """(1-based line or None, the problem in words) of a YAML parse error."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark, start = err.problem_mark or err.context_mark, err.context_mark
        if start is not None and mark is not None and not text[mark.index:].strip():
            mark = start  # the file ended inside a construct: name the line that opened it
        line = mark.line + 1 if mark is not None else None
        problem = err.problem or err.context or "not valid YAML"
        if err.problem and err.context:
            at = f", line {start.line + 1}" if start is not None and start.line + 1 != line else ""
            problem += f" ({err.context}{at})"
        return line, problem
    if isinstance(err, yaml.reader.ReaderError):  # a character YAML does not allow (NUL, other controls)
        char = f"U+{err.character:04X}" if isinstance(err.character, int) else repr(err.character)
        return text[: err.position].count("\n") + 1, f"character {char} is not allowed in YAML"
    return None, str(err).splitlines()[0]


def parse_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML; ConfigError `where:LINE: problem` when it does not parse."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        line, problem = _yaml_error(err, text)
        raise ConfigError(f"{where}:{line}: {problem}" if line else f"{where}: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{where}: YAML nested too deeply") from None


def parse_override(text: str) -> tuple[str, Any]:
    """`rollout.n=8` -> ("rollout.n", 8); the value is parsed as YAML."""
    if "=" not in text:
        raise ConfigError(f"override '{text}' must look like section.key=value")
    key, raw = text.split("=", 1)
    if not raw.strip():
        return key.strip(), None
    try:
        return key.strip(), yaml.safe_load(raw)
    except yaml.YAMLError as err:
        problem = _yaml_error(err, raw)[1]
        raise ConfigError(f"--set {key.strip()}: value {raw!r} is not valid YAML ({problem})") from None


def _shown(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _explain(err: ValidationError) -> str:
    first = err.errors()[0]
    key = ".".join(str(p) for p in first["loc"]) or "<root>"
    if first["type"] == "extra_forbidden":
        return unknown_key_message(key)
    if first["type"] == "value_error":  # a check across keys (e.g. the alpha band): its message says it all
        return f"config key '{key}': {first['msg'].removeprefix('Value error, ')}"
    return f"config key '{key}': {first['msg']} (got {_shown(first.get('input'))})"


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The section class a config field holds, or None for a value field."""
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _section_at(dotted: str) -> type[BaseModel] | None:
    """The section class at a dotted path ('' = the whole config), or None when the path names no section."""
    model: type[BaseModel] | None = Config
    for part in filter(None, dotted.split(".")):
        field = model.model_fields.get(part) if model is not None else None
        model = _section_of(field.annotation) if field is not None else None
    return model


def config_key_names(model: type[BaseModel] | None = None, prefix: str = "") -> list[str]:
    """Every valid dotted key of the config (sections and values), in config order."""
    keys: list[str] = []
    for name, field in (model or Config).model_fields.items():
        keys.append(prefix + name)
        if (section := _section_of(field.annotation)) is not None:
            keys += config_key_names(section, f"{prefix}{name}.")
    return keys


def _near_name(name: str, names: list[str]) -> str | None:
    """The name in `names` closest to `name` (difflib, a little stricter than its 0.6: colour is not rollout),
    else the first that begins with it (3+ characters); None if none."""
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.65)
    return near[0] if near else next((n for n in names if len(name) >= 3 and n.startswith(name)), None)


def close_keys(key: str) -> list[str]:
    """Valid dotted keys near an unknown one: a key of the same section with a similar name
    (`rollout.nn` -> rollout.n), else the value keys of any section whose last part is similar
    (`rollout.lr` -> train.lr, bootstrap.lr); at most 3."""
    parent, _, leaf = key.rpartition(".")
    section = _section_at(parent)
    if section is not None and (near := _near_name(leaf, list(section.model_fields))):
        return [f"{parent}.{near}" if parent else near]
    values = [k for k in config_key_names() if _section_at(k) is None]
    near = _near_name(leaf, list(dict.fromkeys(k.rsplit(".", 1)[-1] for k in values)))
    return [k for k in values if k.rsplit(".", 1)[-1] == near][:3]


def unknown_key_message(key: str) -> str:
    """`unknown config key 'KEY'` with the nearest valid keys (or where to find them)."""
    near = close_keys(key)
    hint = f"did you mean {' or '.join(repr(k) for k in near)}?" if near else "`rla config` lists the keys"
    return f"unknown config key '{key}'; {hint}"


def _unknown_key(data: dict[Any, Any], model: type[BaseModel], prefix: str = "") -> str | None:
    """The first dotted key of a YAML tree that `model` has no field for (its sections walked), or None."""
    for key, value in data.items():
        field = model.model_fields.get(key) if isinstance(key, str) else None
        if field is None:
            return f"{prefix}{key}"
        section = _section_of(field.annotation)
        if section is not None and isinstance(value, dict):
            if (found := _unknown_key(value, section, f"{prefix}{key}.")) is not None:
                return found
    return None


def _read_yaml_file(path: Path) -> dict[str, Any]:
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[err.start]:02x})") from None
    data = parse_yaml(text, str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping of config sections, got a {type(data).__name__}")
    return data


def load_config(paths: list[str | Path] | None = None, overrides: list[str] | None = None) -> Config:
    """Defaults, then each YAML file in order, then `--set` overrides."""
    tree: dict[str, Any] = {}
    for path in paths or []:
        data = _read_yaml_file(Path(path))
        if (unknown := _unknown_key(data, Config)) is not None:  # named with its file, before the merge
            raise ConfigError(f"{path}: {unknown_key_message(unknown)}")
        tree = _merge(tree, data)
    return _config_from_tree(tree, overrides)


def _config_from_tree(tree: dict[str, Any], overrides: list[str] | None) -> Config:
    for item in overrides or []:
        key, value = parse_override(item)
        _set_dotted(tree, key, value)
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_explain(err)) from None


# Keys added after run folders were first written, with the value that every run written before them used.
# A run's config.yaml holds every key (config_to_yaml), so a run config without such a key predates it.
LEGACY_VALUES: dict[str, Any] = {"rollout.sampler": "multinomial", "rollout.candidates": "on_top",
                                  "rollout.decode_attention": "model", "train.stop_gradient": False,
                                  "rollout.drop_finished": False,
                                  "train.exact_steps": False}


def load_run_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """A run's own config.yaml, then `overrides`. The keys of LEGACY_VALUES that it lacks get their legacy
    value, so a run written by an earlier version continues and reproduces with what it ran with."""
    tree = _read_yaml_file(Path(path))
    for key, value in LEGACY_VALUES.items():
        node: Any = tree
        for part in key.split(".")[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and key.rsplit(".", 1)[-1] not in node:
            _set_dotted(tree, key, value)
    return _config_from_tree(tree, overrides)


def config_to_yaml(config: Config) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


# What a run may change between invocations: its length, where its folder is, where its stages run.
RUN_FREE_KEYS = ("run.iterations", "run.output_dir", "run.keep_checkpoints", "eval.reuse_judge_scores",
                 "orchestration")
_UNSET = object()


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def key_under(key: str, names: tuple[str, ...] | list[str]) -> bool:
    """Whether the dotted config `key` is one of `names` or inside one of them (a section's name covers its
    keys; "run.eval" does not cover "run.eval_every")."""
    return any(key == name or key.startswith(name + ".") for name in names)


def _free(key: str) -> bool:
    return key_under(key, RUN_FREE_KEYS)


def config_differences(old: Config, new: Config) -> list[str]:
    """The dotted keys, in config order, whose values differ between two configs of a run, besides
    RUN_FREE_KEYS (which may change to continue a run); [] when `new` may continue `old`'s run."""
    a, b = _leaves(old.model_dump()), _leaves(new.model_dump())
    keys = list(a) + [k for k in b if k not in a]
    return [k for k in keys if not _free(k) and a.get(k, _UNSET) != b.get(k, _UNSET)]


def _value_text(value: Any) -> str:
    if value is _UNSET:
        return "(unset)"
    text = value if isinstance(value, str) and value.isprintable() else json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def shown_value(cfg: Config, key: str) -> str:
    """The value of the dotted `key` in `cfg`, short, for messages that name the keys two configs differ in."""
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part, None)
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _flag_value(value: Any) -> str:
    """`value` as `--set` reads it back: plain where YAML parses the text to the same value, else JSON."""
    if isinstance(value, str) and value.isprintable():
        try:
            if yaml.safe_load(value) == value:
                return value
        except yaml.YAMLError:
            pass
    return json.dumps(value, default=str)


def run_mismatch(where: str, old: Config, new: Config) -> str | None:
    """The one-line refusal to continue the run at `where` (holding `old`) with `new`, naming the first
    differing keys with both values; None when `new` may continue it."""
    keys = config_differences(old, new)
    if not keys:
        return None
    a, b = _leaves(old.model_dump()), _leaves(new.model_dump())
    shown = keys[:3]
    there = ", ".join(f"{k}={_value_text(a.get(k, _UNSET))}" for k in shown)
    here = ", ".join(f"{k}={_value_text(b.get(k, _UNSET))}" for k in shown)
    more = f" (and {len(keys) - 3} more differing keys)" if len(keys) > 3 else ""
    # the flags that continue it as it ran (a run from an earlier version lacks the keys added since: theirs
    # are LEGACY_VALUES, which a new config's defaults differ from)
    flags = [f"{k}={_flag_value(a[k])}" for k in keys if k in a]
    continue_with = " ".join("--set " + shlex.quote(flag) for flag in flags) \
        if len(flags) == len(keys) <= 6 and all(len(flag) <= 100 for flag in flags) else ""
    return (f"{where} holds a run with a different config ({there}; this config has {here}{more}); choose "
            "another run.name (only run.iterations and orchestration may change to continue a run)"
            + (f", or continue it as it ran: {continue_with}" if continue_with else ""))

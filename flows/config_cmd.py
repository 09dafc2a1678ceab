"""`rla config`: the resolved config tree, one line per key: dotted name, value, default when it differs, and the
field's description (all taken from the models in rla_core/config_schema.py, so the listing never goes stale).

    [rollout]  policy episodes per iteration
      rollout.backend         transformers       rollout engine: transformers | vllm
    * rollout.n               4 (default 8)      N trajectories per task

`*` marks a key whose value differs from its default. Each section lists its own keys first, then its
subsections (e.g. [rollout.vllm]).
"""
from __future__ import annotations

import shutil
import textwrap
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel

from rla_core.config import Config, load_config

VALUE_WIDTH = 20  # longer values push their description to the next line, as argparse does with long options
MIN_DESCRIPTION_WIDTH = 40


@dataclass(frozen=True)
class Key:
    """One leaf of the config tree."""

    name: str  # dotted, e.g. rollout.vllm.dtype
    value: Any
    default: Any
    description: str

    @property
    def changed(self) -> bool:
        return self.value != self.default


@dataclass(frozen=True)
class Section:
    """One section model of the tree: its own keys, then its subsections."""

    name: str  # dotted, e.g. rollout.vllm
    description: str
    keys: list[Key]
    sections: list[Section]


def format_value(value: Any) -> str:
    """A value as `--set` takes it (YAML flow style): null, true, [a, b], {k: v}, 'quoted' when ambiguous."""
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=10**9, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


def _section(name: str, description: str, model: BaseModel, default: BaseModel) -> Section:
    keys, sections = [], []
    for field, info in type(model).model_fields.items():
        value, default_value = getattr(model, field), getattr(default, field)
        dotted = f"{name}.{field}" if name else field
        if isinstance(value, BaseModel):
            sections.append(_section(dotted, info.description or "", value, default_value))
        else:
            keys.append(Key(dotted, value, default_value, info.description or ""))
    return Section(name, description, keys, sections)


def config_tree(config: Config) -> list[Section]:
    """The top-level sections of `config`; defaults are those of `Config()` at the same place, so that e.g.
    models.environment.hidden_size defaults to the environment model's own size, not ModelSpec's."""
    return _section("", "", config, Config()).sections


def _walk(sections: list[Section]) -> list[Section]:
    out: list[Section] = []
    for section in sections:
        out += [section, *_walk(section.sections)]
    return out


def config_keys(config: Config) -> list[Key]:
    """Every leaf key of `config`, in the order `render_config` prints them."""
    return [key for section in _walk(config_tree(config)) for key in section.keys]


def _value_text(key: Key) -> str:
    text = format_value(key.value)
    return f"{text} (default {format_value(key.default)})" if key.changed else text


def render_config(config: Config, width: int = 120) -> str:
    """The resolved config as aligned text, grouped by section, at most `width` columns where words allow."""
    sections = _walk(config_tree(config))
    keys = [key for section in sections for key in section.keys]
    key_width = max(len(key.name) for key in keys)
    value_width = min(VALUE_WIDTH, max(len(_value_text(key)) for key in keys))
    indent = 2 + key_width + 2 + value_width + 2
    wrap_width = max(MIN_DESCRIPTION_WIDTH, width - indent)
    lines: list[str] = []
    for section in sections:
        if lines:
            lines.append("")
        lines.append(f"[{section.name}]  {section.description}".rstrip())
        for key in section.keys:
            head = f"{'*' if key.changed else ' '} {key.name:<{key_width}}  {_value_text(key):<{value_width}}  "
            description = textwrap.wrap(key.description, wrap_width, break_long_words=False,
                                        break_on_hyphens=False) or [""]
            if len(head) > indent:  # a long value: its description starts on the next line
                lines.append(head.rstrip())
            else:
                lines.append((head + description.pop(0)).rstrip())
            lines += [" " * indent + part for part in description]
    changed = sum(key.changed for key in keys)
    lines += ["", f"{len(keys)} keys, {changed} differ from their default (*); set one with --set KEY=VALUE"]
    return "\n".join(lines) + "\n"


def show_config(configs: list[str], overrides: list[str]) -> int:
    """`rla config`: print the config that `--config`/`--set` resolve to (defaults when none is given)."""
    config = load_config(configs, overrides)  # a bad key or value raises ConfigError, naming the key
    width = shutil.get_terminal_size((120, 24)).columns
    print(render_config(config, width=max(width, 80)), end="")
    return 0

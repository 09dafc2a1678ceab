"""The registry idiom shared by every variant family: names, lazy built-ins, duplicate and unknown names."""
from __future__ import annotations

import sys

import pytest

from rla_core.adaptation.rewriters import REWRITERS, get_rewriter
from rla_core.envs.base import ENVIRONMENTS
from rla_core.errors import UnknownName, UserError
from rla_core.registry import Registry
from rla_core.rollout.base import ENGINES
from rla_core.training.base import TRAINERS


def test_register_get_and_duplicates():
    reg: Registry[int] = Registry("widget", "section.widget")
    assert reg.register("one")(1) == 1 and reg.get("one") == 1 and reg["one"] == 1
    reg.add("one", 1)  # the same value again is fine
    with pytest.raises(ValueError, match="widget 'one' is already registered"):
        reg.add("one", 2)
    with pytest.raises(UnknownName) as error:
        reg.get("two")
    assert str(error.value) == "unknown widget 'two' (section.widget); valid: ['one']"
    assert isinstance(error.value, UserError) and isinstance(error.value, KeyError)


def test_a_builtin_module_is_imported_only_when_its_name_is_asked_for(tmp_path, monkeypatch):
    (tmp_path / "rla_fake_variant.py").write_text(
        "from tests.rla_core.test_registry import LAZY\nLAZY.add('fake', 'loaded')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "rla_fake_variant" not in sys.modules and "fake" in LAZY and LAZY.names() == ["fake"]
    assert LAZY.get("fake") == "loaded" and "rla_fake_variant" in sys.modules


LAZY: Registry[str] = Registry("lazy thing", "x.y", {"fake": "rla_fake_variant"})


@pytest.mark.parametrize("registry, key, valid", [
    (TRAINERS, "train.backend", ["deepspeed", "torch"]),
    (ENGINES, "rollout.backend", ["transformers", "vllm"]),
    (ENVIRONMENTS, "environment.name", ["household"]),
    (REWRITERS, "environment.rewriter", ["llm", "procedural"]),
])
def test_every_family_names_its_config_key_and_valid_names(registry, key, valid):
    with pytest.raises(UnknownName) as error:
        registry.get("nope")
    message = str(error.value)  # other tests may register more names: the built-ins must be listed
    assert f"'nope' ({key}); valid: [" in message and all(f"'{name}'" in message for name in valid)


def test_rewriters_are_built_by_name():
    assert type(get_rewriter("procedural")).__name__ == "ProceduralRewriter"

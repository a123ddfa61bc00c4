# Two commands on a fresh machine:  make demo   |   make test
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: help demo lint test test-slow bench clean

help:  ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $@ $(VENV)/.installed

demo: $(VENV)/.installed  ## install and run the quickstart evaluation (offline, embedded PostgreSQL)
	$(BIN)/evalbench run --config configs/quickstart.yaml

lint: $(VENV)/.installed-dev  ## ruff, mypy and import-linter (pyproject.toml: [tool.ruff], [tool.mypy], [tool.importlinter])
	$(BIN)/ruff check evalbench tests
	$(BIN)/mypy
	$(BIN)/lint-imports

test: lint  ## lint, then the tests (all but the slow end-to-end ones), with the dev extra installed
	$(BIN)/python -m pytest -m "not slow" --durations=15

test-slow: $(VENV)/.installed-dev  ## the slow end-to-end tests (CI runs them after make test)
	$(BIN)/python -m pytest -m slow

bench: $(VENV)/.installed  ## harness vs floor efficiency, latency efficiency, memory, workers (BENCH_ARGS=--full: full sizes)
	$(BIN)/python bench/run_bench.py $(BENCH_ARGS)

clean:  ## remove the virtual environment and results
	rm -rf $(VENV) results bench/out

# The two commands a new machine needs: `make run` (the system on the built-in emulators)
# and `make test` (lint, types, and the default test tiers). Both build the virtualenv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv run emulators test lint typecheck unit integration infra bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: venv
	$(BIN)/python -m services.local $(ARGS)

emulators: venv
	$(BIN)/python -m emulators $(ARGS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: venv
	$(BIN)/mypy

test: lint typecheck
	$(BIN)/pytest $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: venv
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

infra: venv
	$(BIN)/pytest tests/infra $(PYTEST_ARGS)

bench: venv
	$(BIN)/python -m tests.benchmarks $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

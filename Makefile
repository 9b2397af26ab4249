# Thin aliases only; the logic lives in deploykit and its tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: install test unit lint golden lab lab-down bench clean plan-example

install: $(BIN)/deploykit

$(BIN)/deploykit: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

test: install lint unit

unit: install
	$(BIN)/pytest tests

lint: install
	$(BIN)/ruff check deploy_kit tests bench
	$(BIN)/mypy

golden: install
	$(BIN)/pytest tests/unit/test_golden.py --update-golden

bench: install
	$(BIN)/python bench/plan_render.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache

plan-example: install
	$(BIN)/deploykit plan -i example
	$(BIN)/deploykit render -i example -o out/example

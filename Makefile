# Thin aliases only; the logic lives in deploykit and its tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DK     := $(BIN)/deploykit

.PHONY: install test unit lab-test lint golden lab lab-down bench clean plan-example dist ee-context

install: $(DK)

$(DK): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

## The main job on the built-in local lab (root): lab up, converge, verify.
lab: install
	$(DK) lab up
	$(DK) up --inventory lab
	$(DK) verify --inventory lab

lab-down: install
	$(DK) lab down

## Everything CI runs: lint, type checks, unit tests, then the lab suite (root).
test: install lint
	$(BIN)/pytest tests

unit: install
	$(BIN)/pytest tests/unit

lint: install
	$(BIN)/ruff check deploy_kit tests bench plugins tools
	$(BIN)/mypy
	ANSIBLE_CONFIG=ansible.cfg $(BIN)/ansible-lint -q roles playbooks

golden: install
	$(BIN)/pytest tests/unit/test_golden.py --update-golden

bench: install
	$(BIN)/python bench/plan_render.py
	$(BIN)/python bench/lab.py
	$(BIN)/python bench/rerun.py
	$(DK) bench storage --inventory lab

## The wheel (roles, playbooks, templates inside) and the Ansible collection, in dist/.
dist: install
	rm -rf dist && $(BIN)/pip wheel -q --no-deps --no-build-isolation -w dist .
	$(BIN)/ansible-galaxy collection build --force --output-path dist .

## The build context for an AWX/AAP execution environment (then: ansible-builder build).
ee-context: dist
	$(BIN)/ansible-builder create -f execution-environment.yml --context context \
	  --output-filename Containerfile

plan-example: install
	$(DK) plan -i example
	$(DK) render -i example -o out/example

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist context *.egg-info

# Thin aliases only; the logic lives in deploykit and its tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DK     := $(BIN)/deploykit
# a fresh venv outside the checkout holding the built wheels (wheel-venv; docs/install.md)
INSTALLED ?= /var/tmp/deploykit-installed

.PHONY: install test test-lab test-upstream unit lint golden docs lab lab-down bench clean plan-example dist ee-context set-version \
        lab-prefetch-background wheel-venv gpu-kv-bundle test-gpu-proof

install: $(DK)

$(DK): pyproject.toml deploykit-lab/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]' -e ./deploykit-lab
	touch $@

## The main job on the built-in local lab (root): lab up, converge, verify.
# every lab profile has a vault (`deploykit lab status --json`: vault_password_file): the
# generated secrets go into inventory/lab/.deploykit-secrets.vault.yml
LAB_VAULT := --vault-password-file /var/lib/deploykit-lab/vault-password
lab: install
	$(DK) lab up
	$(DK) up --inventory lab $(LAB_VAULT)
	$(DK) verify --inventory lab $(LAB_VAULT)

lab-down: install
	$(DK) lab down

## Tier 1, what CI runs: lint, unit, checks, loopback integration, and one lab session
## (tests/lab/core: the serving profile) driven through the installed wheel (DEPLOYKIT_CLI,
## wheel-venv). The lab's downloads and Go builds start first, in the background, beside
## lint and the unit tests (root only; without root the lab skips). The unit and check
## tests run on every core (pytest-xdist); integration and the lab share daemons and
## ports, so they run one at a time.
test: install lab-prefetch-background lint wheel-venv
	$(BIN)/pytest -n auto tests/unit tests/checks
	DEPLOYKIT_CLI=$(INSTALLED)/bin/deploykit \
	  $(BIN)/pytest -m "not tier2" tests/integration tests/lab/core

## Tier 2: every other lab profile, each its own session (lab up --profile ...), in turn.
test-lab: install
	rm -f runs/lab-prefetch.*
	$(BIN)/pytest -m tier2 tests/integration
	$(BIN)/pytest --durations=0 tests/router tests/lab/serving tests/lab/faults tests/lab/day2 tests/lab/secured \
	  tests/lab/ansible tests/lab/failover tests/lab/monitoring tests/lab/teams

## Not part of `make test`: the rendered example, goldens and one variant per compat.yaml row
## against that row's pinned upstream code (vLLM's parser, vLLM's rope override replayed with
## transformers, LMCache's loaders and its extensions' symbols against the row's torch,
## NIXL's plugins). Needs PyPI; downloads are cached in $DEPLOYKIT_UPSTREAM_CACHE
## (/var/cache/deploykit/upstream). docs/upstream.md has the results and run times.
test-upstream: install
	$(BIN)/pytest tests/upstream

lab-prefetch-background: install
	@if [ "$$(id -u)" = 0 ]; then \
	  mkdir -p runs && rm -f runs/lab-prefetch.*; \
	  ( $(DK) lab prefetch > runs/lab-prefetch.log 2>&1; echo $$? > runs/lab-prefetch.rc ) \
	    < /dev/null & echo $$! > runs/lab-prefetch.pid; \
	  echo "lab prefetch started in the background (runs/lab-prefetch.log)"; fi

unit: install
	$(BIN)/pytest -n auto tests/unit

lint: install
	$(BIN)/ruff check deploy_kit deploykit-lab tests bench plugins tools
	$(BIN)/mypy
	ANSIBLE_CONFIG=ansible.cfg $(BIN)/ansible-lint -q roles playbooks

golden: install
	$(BIN)/pytest tests/unit/test_golden.py --update-golden

## docs/settings.md, generated from the settings model and the roles' argument specs.
docs: install
	$(BIN)/python tools/settings_reference.py

bench: install
	$(BIN)/python bench/plan_render.py
	$(BIN)/python bench/render_scale.py
	$(BIN)/python bench/lab.py
	$(BIN)/python bench/rerun.py
	$(BIN)/python bench/ttft_agreement.py
	$(DK) bench storage --inventory lab
	$(DK) bench ttft --inventory lab --lengths 4096 --repeats 3

## The wheels bench/gpu-kv-proof.py installs offline on a lent GPU machine: LMCache 0.5.6 and
## what its S3 path imports that the machine's image lacks, for GPU_KV_PYTHONS, and the
## planner's figures (plan.json). Carried as `gpu-kv-bundle` (docs/benchmarks.md).
## GPU_KV_FULL=1 adds what the image has (for a bare venv).
GPU_KV_PYTHONS ?= 3.11,3.12
GPU_KV_FULL ?=
gpu-kv-bundle: install
	$(BIN)/python bench/gpu-kv-bundle.py --out gpu-kv-bundle --pythons $(GPU_KV_PYTHONS) \
	  $(if $(GPU_KV_FULL),--full)

## The GPU KV proof's CPU mode as CI would run it (not part of `make test`; about 3 minutes):
## a full bundle for this Python, a bare venv made from it offline with torch from the
## lab's cached wheelhouse, the bundled S3 server, 4 of the model's 64 layers.
WHEELHOUSE ?= /var/cache/deploykit/wheelhouse/cpu-vllm-0.32.0-lmcache-0.5.6-py311
test-gpu-proof: install
	$(BIN)/python bench/gpu-kv-bundle.py --out runs/gpu-kv-bundle-cpu --full \
	  --pythons $$($(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	$(PYTHON) bench/gpu-kv-proof.py --bundle runs/gpu-kv-bundle-cpu --device cpu --layers 4 \
	  --chunks 8 --repeats 3 --torch-from $(WHEELHOUSE) --out runs/gpu-kv-proof-cpu \
	  --work /var/tmp/deploykit-gpu-kv-cpu

## The sdist and the wheel built from it (roles, playbooks, templates inside), the lab's
## wheel and the Ansible collection, in dist/.
dist: install
	$(BIN)/python tools/version.py --check
	rm -rf dist && $(BIN)/python -m build -o dist .
	$(BIN)/python -m build --wheel -o dist deploykit-lab
	$(BIN)/ansible-galaxy collection build --force --output-path dist .

## The product and lab wheels installed into a fresh venv outside the checkout, as a user's.
wheel-venv: dist
	rm -rf $(INSTALLED) && $(PYTHON) -m venv $(INSTALLED)
	$(INSTALLED)/bin/pip install -q dist/deploykit-*.whl dist/deploykit_lab-*.whl

## The build context for an AWX/AAP execution environment (then: ansible-builder build).
ee-context: dist
	$(BIN)/python tools/version.py --check-dist dist
	$(BIN)/ansible-builder create -f execution-environment.yml --context context \
	  --output-filename Containerfile

## A new version: pyproject.toml, then every copy (galaxy.yml, __version__, meta/requirements.txt).
set-version:
	$(BIN)/python tools/version.py --set $(VERSION)

plan-example: install
	$(DK) plan -i example
	$(DK) render -i example -o out/example

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist context *.egg-info

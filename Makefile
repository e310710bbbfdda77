# The two commands of the README: `make run` (the offline review over examples/) and `make test`.
# Both set up a virtual environment with everything they need on a fresh machine.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Azurite, Microsoft's Azure Storage emulator, for the Azure Blob loader tests (from npm).
AZURITE_VERSION := 3.35.0
AZURITE := $(VENV)/node/node_modules/.bin/azurite-blob

.PHONY: run test lint format bench image dist clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Review the example manifests against the example cluster state. The examples include pods the
# policies deny on purpose, so exit status 1 (something denied) is the expected result here.
run: $(STAMP)
	@status=0; $(BIN)/gpu-admission review -f examples/manifests \
		--cluster-state examples/cluster-state.yaml || status=$$?; \
	if [ $$status -gt 1 ]; then exit $$status; fi

$(AZURITE): | $(STAMP)
	@if command -v npm >/dev/null; then \
		npm install --silent --no-audit --no-fund --prefix $(VENV)/node azurite@$(AZURITE_VERSION); \
	else echo "npm not found: the Azure Blob loader tests will be skipped (CI installs npm)"; fi

test: $(STAMP) $(AZURITE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tools/test_suite.py $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports --no-cache

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The container image, with the engine this machine has (docs/image.md); IMAGE=name:tag to rename.
image:
	bash tools/image/build.sh

# A wheel of the `gpu-admission` command for an operator's laptop (docs/install.md).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .
	rm -rf build  # setuptools' staging copy of the sources
	@ls dist/*.whl

bench: $(STAMP)
	$(BIN)/python -m bench.admission

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache

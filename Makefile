# wfbench: `make demo` and `make test` are the two set-up commands; both bootstrap .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wfbench-installed
export DAGSTER_HOME := $(CURDIR)/dagster_home

.PHONY: bootstrap demo test ui check bench schema clean-artifacts

# Re-installs only when pyproject.toml changes; uses uv when it is on PATH.
$(STAMP): pyproject.toml
	@if command -v uv >/dev/null 2>&1; then \
	  [ -x $(PY) ] || uv venv --python $(PYTHON) $(VENV); \
	  uv pip install --python $(PY) -q -e '.[dev]'; \
	else \
	  [ -x $(PY) ] || $(PYTHON) -m venv $(VENV); \
	  $(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'; \
	fi
	@touch $@

bootstrap: $(STAMP)

demo: bootstrap
	$(VENV)/bin/wfbench validate tasks
	$(VENV)/bin/wfbench sync
	$(VENV)/bin/wfbench inputs
	$(VENV)/bin/wfbench evolve
	$(VENV)/bin/wfbench evolve
	$(VENV)/bin/wfbench cells
	$(VENV)/bin/wfbench explain
	$(VENV)/bin/wfbench ledger verify

test: bootstrap
	$(PY) -m pytest

ui: bootstrap
	$(VENV)/bin/wfbench sync
	$(VENV)/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

check: bootstrap
	$(VENV)/bin/ruff format --check bench_assets tests bench
	$(VENV)/bin/ruff check bench_assets tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/wfbench schema --check
	$(VENV)/bin/dagster definitions validate -w workspace.yaml

bench: bootstrap
	$(PY) bench/inputs.py
	$(PY) bench/cells.py
	$(PY) bench/gate_calibration.py
	$(PY) bench/generation.py

schema: bootstrap
	$(VENV)/bin/wfbench schema

clean-artifacts:
	rm -rf dagster_home/artifacts

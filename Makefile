# wfbench: `make demo` and `make test` are the two set-up commands; both bootstrap .venv.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wfbench-installed
export DAGSTER_HOME := $(CURDIR)/dagster_home

.PHONY: bootstrap demo demo-skill-eval docker-demo test ui check bench schema clean-artifacts

# `make ui` serves the reports folder here, so the decision's report link opens in the browser;
# decisions made by `make demo` link to it too.
REPORTS_PORT ?= 3001
demo ui: export WFBENCH_REPORT_URL ?= http://127.0.0.1:$(REPORTS_PORT)

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

# The skill-eval demo (issue 26): a plugin's `claude plugin eval` suite imported, replayed offline
# from real-CLI transcripts and decided by the gate, with its own Dagster instance.
demo-skill-eval: bootstrap
	$(PY) -m tests.data.skill_eval.demo skill-eval-demo/tasks

# `make demo` with every queued run in its own container on a real Docker engine (root; Debian:
# `apt-get install docker.io mmdebstrap`). Images are built locally, no registry needed, and
# cached; WHEELHOUSE=DIR installs the dependencies from DIR offline. deploy/docker/README.md.
docker-demo: bootstrap
	deploy/docker/demo.sh

# The suite is mostly waiting on subprocesses (sandboxed runs, Dagster runs, servers), so more
# workers than cores still pays: TEST_WORKERS=3 on CI's 2 cores. TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 3
test: bootstrap
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

ui: bootstrap
	$(VENV)/bin/wfbench sync
	@reports="$${WFBENCH_ARTIFACTS:-dagster_home/artifacts}/reports"; mkdir -p "$$reports"; \
	$(PY) -m http.server --bind 127.0.0.1 --directory "$$reports" $(REPORTS_PORT) \
	  >/dev/null 2>&1 & trap 'kill $$!' EXIT; \
	echo "reports: $(WFBENCH_REPORT_URL)/"; \
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

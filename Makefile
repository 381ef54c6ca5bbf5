# dcaudit — every target installs what it needs into .venv/ first.
PY      := .venv/bin/python
UV      := .venv/bin/uv
DCAUDIT := .venv/bin/dcaudit
export DCAUDIT_HOME ?= $(CURDIR)/workspace
# Byte-compiled modules make every later `dcaudit`/pytest process start seconds faster (pyarrow pulls in pandas).
unexport PYTHONDONTWRITEBYTECODE
# Use the shared mirror when it sits beside the repo (as in CI); DCAUDIT_MIRROR overrides.
export DCAUDIT_MIRROR ?= $(if $(wildcard $(CURDIR)/../shared/data/MANIFEST.md),$(abspath $(CURDIR)/../shared/data),)

.PHONY: help install lock test lint bench bench-1e8 bench-1e9 bench-deepchecks audit-tox21 audit-jarvis audit-matbench audit-vision audit-all simulate clean

help:  ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.venv/.installed: pyproject.toml requirements.lock
	python3 -m venv .venv
	.venv/bin/pip install -q --disable-pip-version-check uv
	$(UV) pip install -q --compile-bytecode --python $(PY) -r requirements.lock
	$(UV) pip install -q --python $(PY) --no-deps -e .
	@# matplotlib scans the system fonts into a cache file on its first import (0.3-0.6 s here, seconds
	@# with many fonts installed): build it now rather than in the first report
	$(PY) -c "import matplotlib.font_manager"
	touch $@

install: .venv/.installed  ## create .venv/ from the lock file (every extra, spark included)

lock:  ## re-resolve requirements.lock from pyproject.toml
	$(UV) pip compile pyproject.toml --extra all -o requirements.lock --python-version 3.11

test: install  ## run the test suite (uses DCAUDIT_MIRROR for real data)
	$(PY) -m pytest -q -p no:cacheprovider

# mypy checks the core (dcaudit/, cli and api included), audits/ and pipelines/ ([tool.mypy] in pyproject.toml);
# reports/, connectors/ and features/ are read for their types only. The folders install as dcaudit.* through
# package-dir, which mypy cannot follow through the editable install, so they are linked under
# .venv/mypy-path/dcaudit/ (mypy_path) and the report names each file by its place in the repository.
MYPY_LINKS := .venv/mypy-path/dcaudit

lint: install  ## ruff, and mypy over the core, audits and pipelines
	.venv/bin/ruff check .
	@mkdir -p $(MYPY_LINKS) && for d in audits connectors features pipelines reports; do \
		ln -sfn $(CURDIR)/$$d $(MYPY_LINKS)/$$d; done
	@.venv/bin/mypy > .venv/mypy.out; status=$$?; sed 's|^$(MYPY_LINKS)/||' .venv/mypy.out; exit $$status

bench: install  ## performance benchmarks (1e6, 1e7 synthetic, whole commands, Tox21/JARVIS/vision) -> bench/results/latest.parquet
	$(PY) bench/suite.py
	$(PY) bench/whole.py
	$(PY) bench/completion.py
	$(PY) bench/replay.py
	$(PY) bench/jarvis_replay.py
	$(PY) bench/vision.py

bench-1e8: install  ## fiber audit of 1e8 candidates x 8 binary columns (DuckDB memory_limit 8GB, spills beyond) vs polars streaming
	$(PY) bench/suite.py --sizes 1e8 --only fiber_audit:exact --no-pandas --polars --memory-limit 8GB

bench-1e9: install  ## the same at 1e9 candidates (generates a 1.8 GB Parquet file in $DCAUDIT_HOME/bench first: ~2.5 min)
	$(PY) bench/suite.py --sizes 1e9 --only fiber_audit:exact --no-pandas --polars --memory-limit 8GB

DEEPCHECKS_VENV := $(DCAUDIT_HOME)/bench/deepchecks-venv
bench-deepchecks: install  ## dcaudit vs deepchecks ConflictingLabels (its own venv: bench/peers/deepchecks.lock)
	test -x $(DEEPCHECKS_VENV)/bin/python || $(UV) venv -q -p 3.11 $(DEEPCHECKS_VENV)
	$(UV) pip install -q --python $(DEEPCHECKS_VENV)/bin/python -r bench/peers/deepchecks.lock
	$(PY) bench/deepchecks_peer.py --python $(DEEPCHECKS_VENV)/bin/python

audit-tox21: install  ## Tox21: do the 7 NR assays decide SR-p53? (evidence package in workspace/runs)
	$(DCAUDIT) run tox21

audit-jarvis: install  ## JARVIS dft_3d: does predicted formation energy decide band gap / stability? (15 models, replay, MBJ probe)
	$(DCAUDIT) run jarvis

audit-matbench: install  ## Matbench v0.1 (composition, leaderboard, Magpie) and Matbench Discovery (needs the WBM summary)
	$(DCAUDIT) run matbench
	-$(DCAUDIT) run matbench-discovery

audit-vision: install  ## vision: digits (8 models, 4 corruptions, 25 splits) and MNIST-C — do clean predictions decide robustness?
	$(DCAUDIT) run vision

audit-all: install  ## every built-in spec (dcaudit run --all: reuses unchanged results, exit 1/2/75 on trouble)
	$(DCAUDIT) run --all
	$(MAKE) --no-print-directory simulate

simulate: install  ## controlled response-space experiments with the paper's seeds (DESIGN §6)
	$(DCAUDIT) simulate conformal --seeds 50
	$(DCAUDIT) simulate leaderboard --seeds 50
	$(DCAUDIT) simulate acquisition --seeds 200 --geometries 50

clean:  ## remove the workspace (downloads, tables, runs, catalog)
	rm -rf workspace

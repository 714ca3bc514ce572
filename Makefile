PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-all lint typecheck docs clean venv results

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) evaluate.py

# The packages the type checker covers (mypy, configured in pyproject.toml's [tool.mypy]).
TYPECHECK_DIRS := envs heuristics evaluation training agents

typecheck: $(STAMP)
	$(VENV)/bin/mypy $(TYPECHECK_DIRS)

# The fast tier (<= 5 min on 2 cores): the type check, then every test but those marked slow.
test: $(STAMP) typecheck
	WANDB_MODE=disabled $(PY) -m pytest -q -m "not slow"

# The whole suite, slow tier included: what CI (.ci/run) runs.
test-all: $(STAMP) typecheck
	WANDB_MODE=disabled $(PY) -m pytest -q

# The documentation site (mkdocs.yml) into site/; broken links fail the build (--strict). The
# env pages are generated from the env class docstrings first (docs/_scripts/hooks.py).
DOCS_STAMP := $(VENV)/.docs-installed

$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) build site *.egg-info

# Every results table and figure of the documentation, stage by stage, resumable
# (evaluation/report; fragments in results/tables/, cache in results/report/). Needs
# SERVEGYM_DATA / SERVEGYM_LATENCY_DATA for the stages that read the real traces and measurements.
# The Vidur cross-check (stage peer-vidur) also needs SERVEGYM_VIDUR_PYTHON (docs/benchmarks/peer-vidur.md).
results: $(STAMP)
	$(PY) -m evaluation.report -j 2

# Two entry points: `make demo` and `make test`. Both build .venv from scratch when needed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXTRAS ?= dev,transport,ray,cosim,learn,team,transparent

.PHONY: demo test lint typecheck bench clean venv native

# The install compiles the simulator, control algorithms and policy hooks with mypyc
# (src/coorp/_accel/_build_hook.py, ~60 s); without a C compiler it falls back to plain
# Python and `native` says so, once.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP)

# Rebuild the compiled modules if their sources were edited since they were built (an
# editable install would otherwise fall back to plain Python, with a warning), then
# print one line: compiled, or plain Python and why.
native: $(STAMP)
	@COORP_PURE=1 $(BIN)/python -m coorp._accel ensure

demo: native
	$(BIN)/coorp compare scenarios/crl-5.toml --seeds 1-5 --out results/demo

test: native
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples
	$(BIN)/mypy
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks examples
	$(BIN)/ruff format --check src tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy

bench: native
	$(BIN)/python benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) results .pytest_cache .mypy_cache .ruff_cache

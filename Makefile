# Two entry points: `make demo` and `make test`. Both build .venv from scratch when needed.
#
# One .venv, two levels: `make demo` installs the core only (`uv pip install -e .`: what
# `coorp compare` needs; 217 MB on a fresh clone (uv included), as README says), `make test` every extra
# as well (the dev tools, Parquet, Ray, MuJoCo, DDS, Zenoh, ...; ~1.1 GB). `make test`
# after `make demo` adds the extras to the same .venv; `make demo` after `make test` finds
# what it needs. Each level has its stamp (.venv/.installed-core, .venv/.installed);
# installing everything refreshes both.
# The interpreter a new .venv is made from: tools/pick_python.py prefers a statically
# linked Python with its C headers (fleet-200 runs ~8-10 % less CPU time on Debian's
# /usr/bin/python3.11 than on pyenv's shared-library 3.11.7: docs/compare.md, "A fleet").
# `make PY=...` overrides it; an existing .venv is kept.
PY ?= $(shell python3 tools/pick_python.py || echo python3)
VENV := .venv
BIN := $(VENV)/bin
CORE := $(VENV)/.installed-core
FULL := $(VENV)/.installed
UV := $(BIN)/uv
# pytest workers, one per core; the tests that time real sockets run in a pass of their own,
# after the rest (tests/suite_split.py).
JOBS ?= auto
EXTRAS ?= dev,parquet,transport,ray,cosim,learn,team,transparent

.PHONY: demo test lint typecheck bench clean venv native

# The install compiles the simulator, control algorithms and policy hooks with mypyc
# (src/coorp/_accel/_build_hook.py, ~60 s); without a C compiler it falls back to plain
# Python and `native` says so, once.
# uv (installed into the .venv by pip, first) resolves and downloads in parallel: `make
# test`'s ~100 packages took 44 s wall and 7 s of CPU where pip took 272 s and 54 s (same
# machine, same run, load 22). The project's own compile step is the same with either.
$(UV):
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv

$(CORE): pyproject.toml Makefile | $(UV)
	$(UV) pip install --quiet --python $(BIN)/python -e .
	touch $@

$(FULL): pyproject.toml Makefile | $(UV)
	$(UV) pip install --quiet --python $(BIN)/python -e ".[$(EXTRAS)]"
	touch $@ $(CORE)

venv: $(FULL)

# Rebuild the compiled modules if their sources were edited since they were built (an
# editable install would otherwise fall back to plain Python, with a warning), then
# print one line: compiled, or plain Python and why. (The rebuild needs the dev extra's
# mypy: a demo-only .venv keeps what the install compiled.)
native: $(FULL)
	@COORP_PURE=1 $(BIN)/python -m coorp._accel ensure

# The demo prints its own wall time, with the machine's cores and load.
demo: $(CORE)
	@COORP_PURE=1 $(BIN)/python -m coorp._accel ensure
	$(BIN)/coorp compare scenarios/crl-5.toml --seeds 1-5 --out results/demo

test: native
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/ruff format --check src tests benchmarks examples tools
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -n $(JOBS) -m 'not realtime'
	$(BIN)/python -m pytest -q -n $(JOBS) -m realtime

lint: $(FULL)
	$(BIN)/ruff check src tests benchmarks examples tools
	$(BIN)/ruff format --check src tests benchmarks examples tools

typecheck: $(FULL)
	$(BIN)/mypy

bench: native
	$(BIN)/python benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) results .pytest_cache .mypy_cache .ruff_cache

# The two commands in the README's quickstart. Both create .venv and install what they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# torch is pinned: the machine carries a CPU build of exactly this version, an unpinned torch
# pulls gigabytes of CUDA wheels. xgboost-cpu is the same xgboost module without the CUDA deps.
DEV_DEPS := torch==2.13.0 "xgboost-cpu>=3.0,<4" "llvmlite>=0.44" "onnx>=1.15" "onnxruntime>=1.17" \
	"tqdm>=4.60" "matplotlib>=3.7" "pyarrow>=14"
STAMP := $(VENV)/.installed

# The suite again with the native backend and the math libraries (ATen, oneDNN, MKL, OpenBLAS)
# held to lower x86-64 levels, so one machine runs the code paths an AVX2 or SSE4.2 CPU takes.
# Empty (the default): the levels below this CPU's (`cpu_level --below-host`): x86-64-v3 and v2
# on an AVX-512 host, only v2 on an AVX2 host (its own run takes the v3 paths already).
# `make test-cpu-levels CPU_LEVELS="x86-64-v3 x86-64-v2"` forces a list.
CPU_LEVELS ?=

.PHONY: demo test test-all test-gpu test-cpu-levels lint typecheck clean env bench-deps bench
# Peers for benchmarks only (demo and test do not need them): ONNX converters, TL2cgen (with
# treelite's GTIL) and oneDAL (scikit-learn-intelex's daal4py).
PEER_DEPS := "skl2onnx>=1.16" "onnxmltools>=1.12" "tl2cgen>=1.0" "scikit-learn-intelex>=2025"

env: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(DEV_DEPS)
	$(BIN)/python -m pip install -q -e ".[dev,sklearn,lightgbm,pandas,serve,dask,spark,skorch,tvm]"
	# pyspark 4 runs on Java 17 or 21: Debian 12's default JRE is 17
	command -v java >/dev/null || (apt-get update -qq && \
	  apt-get install -y -qq --no-install-recommends default-jre-headless)
	# shared-library export tests: aarch64 cross-compiler and qemu-user (docs/export.md)
	command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends \
	  gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user)
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m peregrine.demo

# Default run: everything but slow and peer-comparison tests, on both cores.
test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m "not slow and not peer" --timeout 900

test-cpu-levels: $(STAMP)
	levels="$(CPU_LEVELS)"; \
	[ -n "$$levels" ] || levels=$$($(BIN)/python -m peregrine.tools.cpu_level --below-host); \
	echo "== levels below this CPU's: $${levels:-none}"; \
	for level in $$levels; do \
	  echo "== forced CPU level $$level"; \
	  $(BIN)/python -m peregrine.tools.cpu_level $$level -- \
	    $(BIN)/python -m pytest -n 2 -m "not slow and not peer" --timeout 900 || exit $$?; \
	done

# The tests marked gpu (the conformance suite on CUDA among them) on a machine with an NVIDIA GPU;
# `make test` skips them where CUDA is missing. The Makefile's torch is a CPU build: install a
# CUDA build of torch in .venv first.
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -n 4 -m gpu --timeout 900

test-all: $(STAMP)
	$(BIN)/python -m pytest -n 2 --timeout 1800

bench-deps: $(STAMP)
	$(BIN)/python -m pip install -q $(PEER_DEPS)

bench: bench-deps
	$(BIN)/python benchmarks/bench_trees.py

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/ruff format --check src tests benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build dist src/*.egg-info .pytest_cache

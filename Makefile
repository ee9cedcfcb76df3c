# Set-up and entry points. `make run` runs the default study and writes the report;
# `make test` runs the test suite. Both build their environments first.
PYTHON ?= python3
VENV := .venv
MXNET_VENV := .venvs/mxnet
BIN := $(VENV)/bin

.PHONY: setup mxnet-env environments system-deps run test lint bench gpu-check gpu-wheels clean

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[driver,pytorch,data,test]'
	touch $@

# MXNet 1.9.1 needs numpy < 1.24, so it lives in its own environment, built with a Python
# 3.8-3.11 found on the machine. Without one, set-up still succeeds, a line says why, and
# MXNet cells are recorded as skipped (envs/mxnet_env.py).
mxnet-env: $(MXNET_VENV)/.installed

$(MXNET_VENV)/.installed: envs/mxnet.txt pyproject.toml envs/mxnet_env.py
	$(PYTHON) envs/mxnet_env.py --venv $(MXNET_VENV) --requirements envs/mxnet.txt

# Both environments at once: they are independent, and pip spends most of its time
# waiting on the disk or the network (about 25 s less on 2 cores). Each one's output is
# printed whole when it finishes.
environments:
	@$(MAKE) --no-print-directory -j2 --output-sync=target setup mxnet-env

# Programs the tests drive for real: headless Chromium (report rendering). Installed
# when we may (root with apt); the tests that need them say so when they are absent.
system-deps:
	@bash tests/system-deps.sh

# `make run CONFIG=my.yaml` runs another config (Snakemake's --configfile), in place of
# config/config.yaml.
CONFIG ?=
run: environments
	$(BIN)/snakemake --cores all $(if $(CONFIG),--configfile '$(CONFIG)')
	@echo "report: results/report/index.html"

test: environments system-deps
	$(BIN)/python -m pytest -q -rs

lint: setup
	$(BIN)/ruff check src tests benchmarks workflow/scripts envs
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

bench: environments
	$(BIN)/python benchmarks/harness_overhead.py --out results/benchmarks/harness_overhead.json
	$(BIN)/python benchmarks/op_timing.py --out results/benchmarks/op_timing.json
	$(BIN)/python benchmarks/monitor_overhead.py --out results/benchmarks/monitor_overhead.json
	$(BIN)/python benchmarks/monitor_pss.py --out results/benchmarks/monitor_pss.json
	$(BIN)/python benchmarks/data_loaders.py --out results/benchmarks/data_loaders.json
	$(BIN)/python benchmarks/compare_honesty.py --out results/benchmarks/compare_honesty.json

# The GPU acceptance check (benchmarks/gpu_acceptance.py), for a lent GPU machine as it is:
# its own python3 with torch, our code from src/, no install. Packages it lacks travel as
# wheels in .whl/ (made here by `make gpu-wheels`) and are installed into /tmp/site first.
OUT ?= results/gpu-check
GPU_PYTHON ?= python3
GPU_BUDGET ?= 420
GPU_ONLY ?=
GPU_WHEELS = jsonschema==4.25.1 jsonschema-specifications==2025.9.1 referencing==0.36.2 \
	rpds-py==0.27.1 altair==5.5.0 vl-convert-python==1.8.0

gpu-check:
	if ls .whl/*.whl >/dev/null 2>&1; then \
	  $(GPU_PYTHON) -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
	    --upgrade --target /tmp/site .whl/*.whl; fi; \
	PYTHONPATH=src:/tmp/site PYTHONUNBUFFERED=1 $(GPU_PYTHON) benchmarks/gpu_acceptance.py --out $(OUT) --budget $(GPU_BUDGET) \
	  $(if $(GPU_ONLY),--only $(GPU_ONLY))

gpu-wheels:
	python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)

clean:
	rm -rf results .snakemake

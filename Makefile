# Two commands on a fresh machine:
#   make demo   create .venv, install leaklab, build the tiny model if needed, run recipe=tiny_cpt
#   make test   create .venv, install leaklab + dev tools, lint, run the tests (what CI runs)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU machines take this pin first, so no CUDA wheels are pulled; machines with a GPU keep their build.
TORCH_CPU ?= torch==2.13.0
STAMP  := $(VENV)/.leaklab-installed
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
QUIET  := 2>&1 | grep -v "WARNING: Location" || true
# Two pytest workers (pytest-xdist), a whole test file each at a time, longest files first (tests/conftest.py;
# --no-loadscope-reorder keeps that order, where xdist would put the files with the most tests first and the
# longest one-test files last): what CI's two cores can run side by side. TEST_PARALLEL= runs the suite in one process.
TEST_WORKERS  ?= 2
TEST_PARALLEL ?= -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: demo test test-full test-fast lint format bench clean browser gpu-check reproduce reproduce-smoke

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(BIN)/python -c "import torch" 2>/dev/null; then \
		echo "no GPU found: installing the CPU build of PyTorch ($(TORCH_CPU))"; \
		$(PIP) install "$(TORCH_CPU)" $(QUIET); fi
	$(PIP) install -e ".[dev]" $(QUIET)
	@$(BIN)/python -c "import leaklab, torch, transformers; print('leaklab installed; torch', torch.__version__)"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/accelerate launch --config_file launch/single.yaml leaklab/train.py recipe=tiny_cpt

test: $(STAMP) browser lint
	$(BIN)/python -m pytest -q $(TEST_PARALLEL)

# The whole suite plus the tests marked `full`: the demo-sized testbed (the real tiny model built in a fresh
# cache, then tiny_cpt's 8 epochs: about 11 more minutes on one thread).
test-full: $(STAMP) browser lint
	$(BIN)/python -m pytest -q --full $(TEST_PARALLEL)

# The report's browser test (tests/report/test_report_browser.py) drives a headless Chromium: Debian's package,
# installed here when missing and run as root (as CI is); otherwise that test is skipped and says why.
browser:
	@if command -v chromium >/dev/null 2>&1; then echo "browser: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the report's browser test"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium) >/dev/null 2>&1 \
			|| echo "could not install chromium: the browser test will be skipped"; \
	else echo "no chromium (and not root with apt-get): the browser test will be skipped"; fi

# Re-measure every number the docs state about the embedded testbed (leaklab/reproduce/stated_numbers.yaml):
# train the recipes (a run already in runs/ is resumed or only evaluated), print claim / stated / measured / ok,
# write the measured tables to docs/generated/ and fail when a claim does not reproduce.
reproduce: $(STAMP)
	$(BIN)/python -m leaklab.reproduce --output-dir runs --docs docs/generated

# The same machinery on tiny sizes (minutes), into a scratch folder; tests/test_reproduce.py runs it in make test.
REPRODUCE_SMOKE_DIR ?= $(or $(TMPDIR),/tmp)/leaklab-reproduce-smoke
reproduce-smoke: $(STAMP)
	$(BIN)/python -m leaklab.reproduce --smoke --output-dir $(REPRODUCE_SMOKE_DIR)/runs --docs $(REPRODUCE_SMOKE_DIR)/docs

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" $(TEST_PARALLEL)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)
	for b in bench/bench_*.py; do $(BIN)/python $$b || exit 1; done

# Every GPU path on random-init Qwen2.5-0.5B / 7B shapes (bench/gpu_check.py); ~8 min on one H100.
# No GPU: the CPU smoke sizes. GPU_CHECK_ARGS passes options, e.g. GPU_CHECK_ARGS="--sizes 0.5b".
# It installs nothing (a GPU node may have no network): the .venv's Python when there is one, else
# $(PYTHON) with the node's own torch; the script imports leaklab from this checkout.
gpu-check:
	$(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON)) bench/gpu_check.py $(GPU_CHECK_ARGS)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache

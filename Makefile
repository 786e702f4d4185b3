# The two set-up commands of the README. Each creates its own virtual environment from nothing.
#   make demo   install xlakit with the demo extras and run `xlakit demo` (cold vs warm start on real workloads)
#   make test   install xlakit with the test extras; lint, and run the whole suite on the default Python and,
#               beside it, the cache tests on Python 3.12 with the newest jax pip gives there (when a 3.12 exists)
PYTHON ?= python3
VENV ?= .venv
PY312 ?= $(shell for p in $$HOME/.pyenv/versions/3.12*/bin/python python3.12; do $$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && echo $$p && break; done)
VENV312 ?= .venv-312
CACHE_TESTS = tests/test_store_envelope.py tests/test_store_local.py tests/test_store_entries.py tests/test_store_folder.py \
              tests/test_store_hostile.py tests/test_secret.py tests/test_environment.py tests/test_api.py \
              tests/test_transparent.py tests/test_executable_cache.py tests/test_cache_decisions.py \
              tests/test_placement_keys.py tests/test_serialize.py tests/test_fleet_coordinate.py \
              tests/test_unpickle_policy.py tests/test_partition_devices.py

.PHONY: demo test lint test-default test-py312 venv benchmark clean browser

# Installs go through uv, itself installed once by pip into .venv-uv: measured from nothing on this 2-core machine,
# the test extras took 146 s of CPU with pip and 44 s with uv (see docs/make-test.md), and uv's own
# `venv` skips the pip that `python -m venv` installs and byte-compiles (11 s of CPU per environment); uv puts pip
# and itself in each environment instead (tests run `pip download` and `uv pip install`). Bytecode is compiled ahead
# for the demo only, whose cold start must not pay for it: compiling the test environment's 1.7 GB took 68 s of
# CPU (4 s without), while the tests compile only the modules they import, once (tests/conftest.py turns bytecode
# writing on for every process they start; test-default imports what collection imports once before its workers).
# The test environment leaves out the packages in tests/uv-excludes.txt (uv >= 0.10's --excludes), each with its reason:
# an optional dependency whose import cost every test process CPU and that no test uses.
UV_DIR ?= .venv-uv
UV = $(UV_DIR)/bin/uv
$(UV):
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install --quiet --upgrade --target $(UV_DIR) 'uv>=0.10'

# $(1): the environment's folder, $(2): its Python
UV_VENV = $(UV) venv --quiet --allow-existing --python $(2) $(1) && \
          $(UV) pip install --quiet --python $(1)/bin/python --upgrade pip 'uv>=0.10'
UV_INSTALL = $(UV) pip install --quiet --python $(1)/bin/python --upgrade

# The demo runs on the accelerator JAX would use, so its environment gets that accelerator's JAX: a Cloud TPU VM
# (its chips appear as /dev/accel* or /dev/vfio/*) jax[tpu] (libtpu), a machine with an NVIDIA driver jax[cuda12];
# elsewhere the CPU jax that xlakit depends on. JAX_ACCELERATOR=none (or tpu, cuda12, ...) overrides the guess.
JAX_ACCELERATOR ?= $(shell if ls /dev/accel* /dev/vfio/[0-9]* >/dev/null 2>&1; then echo tpu; \
                     elif command -v nvidia-smi >/dev/null 2>&1; then echo cuda12; else echo none; fi)
comma := ,
JAX_FOR_DEMO = $(if $(filter-out none,$(JAX_ACCELERATOR)),'jax[$(JAX_ACCELERATOR)]>=0.9.0$(comma)<0.13')

$(VENV)/.installed-%: pyproject.toml | $(UV)
	$(call UV_VENV,$(VENV),$(PYTHON))
	$(call UV_INSTALL,$(VENV)) $(if $(filter demo,$*),--compile-bytecode $(JAX_FOR_DEMO)) \
	  $(if $(filter test,$*),--excludes tests/uv-excludes.txt) -e '.[$*]'
	touch $@

demo: $(VENV)/.installed-demo
	$(VENV)/bin/xlakit demo

# Lint, the default suite and the Python 3.12 cache tests run side by side (each one's output printed whole when
# it ends): the machine's two cores stay busy through mypy's single-threaded run and the default suite's last
# files, where one after the other left a core idle. The 3.12 environment is built meanwhile.
test:
	@$(MAKE) --no-print-directory -j4 --output-sync=target lint test-default test-py312

# ruff (rules in pyproject.toml) and mypy over the package; both must be clean.
lint: $(VENV)/.installed-test
	$(VENV)/bin/ruff check xlakit tests benchmarks
	$(VENV)/bin/mypy xlakit

# pytest-xdist workers, whole files to one worker (module fixtures such as the S3 server and JupyterLab start
# once). Three on 2 cores: the Binder build's worker mostly waits on pip, and subprocess starts and browsers wait
# too. Wall-clock bounds in the tests are scaled by the run queue per CPU (tests/conftest.py: cpu_share).
TEST_WORKERS ?= 3
# Each xdist worker collects every test file, so in a new environment the three would each byte-compile all that
# collection imports (jax, flax, pandas, IPython, plotly, ...): ~22 s of CPU apiece. One collection first writes the
# bytecode once (its output is not needed: the run below reports any collection error).
test-default: $(VENV)/.installed-test browser
	@$(VENV)/bin/python -m pytest -q --collect-only -p no:cacheprovider >/dev/null 2>&1 || true
	XLAKIT_TEST_BINDER=1 $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# One pytest process, no xdist workers: it shares the cores with the default suite's three and still ends minutes
# before it; a second worker cost its own start and collection (~8 s of CPU) for no earlier end of `make test`.

# Only what the cache tests import (xlakit's own dependencies, pytest): no JupyterLab, browser or flax there.
$(VENV312)/.installed-cache-test: pyproject.toml | $(UV)
	$(call UV_VENV,$(VENV312),$(PY312))
	$(call UV_INSTALL,$(VENV312)) -e '.[cache-test]'
	touch $@

test-py312: $(if $(PY312),$(VENV312)/.installed-cache-test)
	@if [ -z "$(PY312)" ]; then echo "test-py312: no Python 3.12 on this machine; skipped"; exit 0; fi; \
	set -e; $(VENV312)/bin/python -c 'from importlib.metadata import version; print("cache tests on Python 3.12, jax", version("jax"))'; \
	$(VENV312)/bin/python -m pytest -q -p no:xdist $(CACHE_TESTS)

# Debian's chromium-headless-shell for the real-browser widget tests (tests/test_browser*.py; Playwright's own browser
# download does not work here): the old headless mode, without the full browser's UI processes (tests/lab_harness.py
# says what that saves); a full `chromium` on PATH serves too. Installed only when neither is there; as root a failed
# install fails the target (CI must run the tests); as another user it prints a note and the tests skip with their reason.
browser:
	@if command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = "0" ]; then apt-get update && apt-get install -y chromium-headless-shell; \
	else echo "browser: no chromium and this is not root; 'sudo apt-get install chromium-headless-shell' enables tests/test_browser*.py"; fi

benchmark: $(VENV)/.installed-test
	$(VENV)/bin/python benchmarks/warm_start.py

clean:
	rm -rf $(VENV) $(VENV312) $(UV_DIR) build dist *.egg-info

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

# Installs go through uv (itself installed by pip first): measured from nothing on this 2-core machine, the test
# extras took 146 s of CPU with pip and 44 s with uv (see README, "Running the tests"). Bytecode is compiled ahead
# for the demo only, whose cold start must not pay for it: compiling the test environment's 1.7 GB took 68 s of
# CPU (4 s without), while the tests compile only the modules they import, once (tests/conftest.py turns bytecode
# writing on for every process they start).
# The test environment leaves out the packages in tests/uv-excludes.txt (uv >= 0.10's --excludes), each with its reason:
# an optional dependency whose import cost every test process CPU and that no test uses.
UV_INSTALL = $(1)/bin/python -m pip install --quiet --upgrade 'uv>=0.10' && $(1)/bin/uv pip install --quiet \
             --python $(1)/bin/python --upgrade

$(VENV)/.installed-%: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(call UV_INSTALL,$(VENV)) $(if $(filter demo,$*),--compile-bytecode) \
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
test-default: $(VENV)/.installed-test browser
	XLAKIT_TEST_BINDER=1 $(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# Two workers: they share the cores with the default suite's three, and finish well before it.
TEST312_WORKERS ?= 2

# Only what the cache tests import (xlakit's own dependencies, pytest): no JupyterLab, browser or flax there.
$(VENV312)/.installed-cache-test: pyproject.toml
	$(PY312) -m venv $(VENV312)
	$(call UV_INSTALL,$(VENV312)) -e '.[cache-test]'
	touch $@

test-py312: $(if $(PY312),$(VENV312)/.installed-cache-test)
	@if [ -z "$(PY312)" ]; then echo "test-py312: no Python 3.12 on this machine; skipped"; exit 0; fi; \
	set -e; $(VENV312)/bin/python -c 'import jax; print("cache tests on Python 3.12, jax", jax.__version__)'; \
	$(VENV312)/bin/python -m pytest -q -n $(TEST312_WORKERS) --dist loadfile $(CACHE_TESTS)

# Debian's chromium for the real-browser widget test (tests/test_browser.py; Playwright's own browser download
# does not work here). Installed only when missing; as root a failed install fails the target (CI must run the
# test); as another user it prints a note and the test skips with its reason.
browser:
	@if [ "$$(id -u)" = "0" ]; then \
	  command -v chromium >/dev/null || (apt-get update && apt-get install -y chromium); \
	elif ! command -v chromium >/dev/null; then \
	  echo "browser: chromium is missing and this is not root; 'sudo apt-get install chromium' enables tests/test_browser.py"; fi

benchmark: $(VENV)/.installed-test
	$(VENV)/bin/python benchmarks/warm_start.py

clean:
	rm -rf $(VENV) $(VENV312) build dist *.egg-info

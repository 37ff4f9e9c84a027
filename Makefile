# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates or reuses .venv and installs only what changed (stamp files), so a second run is fast.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
LLAMA_VERSION := 0.3.36
# The native llama.cpp build crashed (SIGSEGV in llama_decode) on these CPUs; these flags are safe everywhere.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF
# pip caches wheels without regard to CMAKE_ARGS, so we keep our own wheel, keyed by version and flags.
LLAMA_WHEELS := $(HOME)/.cache/utu/wheels/llama-$(LLAMA_VERSION)-$(shell echo '$(LLAMA_CMAKE_ARGS)' | cksum | cut -d' ' -f1)

.PHONY: sandbox install install-local install-phoenix install-rl demo test test-fast lint bench phoenix clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(PY) sandbox
	$(PIP) install -e '.[dev]'
	touch $@

# bubblewrap boxes the code agents run (python_executor); installed from Debian when run as root.
sandbox:
	@command -v bwrap >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then echo "installing bubblewrap from Debian..."; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null); \
		else echo "warning: bubblewrap is missing: sudo apt-get install bubblewrap (python_executor needs it)"; fi; }

$(VENV)/.local: | $(VENV)/.core
	@if ! ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1; then \
		echo "building llama-cpp-python $(LLAMA_VERSION) (once, about 5 minutes on 2 cores)..."; \
		mkdir -p $(LLAMA_WHEELS); \
		CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) wheel --no-cache-dir --no-deps "llama-cpp-python==$(LLAMA_VERSION)" -w $(LLAMA_WHEELS); \
	fi
	$(PIP) install --find-links $(LLAMA_WHEELS) "llama-cpp-python[server]==$(LLAMA_VERSION)" -e '.[local,report]'
	touch $@

# torch 2.13.0 is the CPU build on this machine's disk; a bare "torch" would pull a CUDA build of several GB.
$(VENV)/.torch: | $(VENV)/.core
	$(PIP) install torch==2.13.0
	touch $@

install: $(VENV)/.core
install-local: $(VENV)/.local

$(VENV)/.phoenix: pyproject.toml | $(VENV)/.core
	$(PIP) install -e '.[phoenix]'
	touch $@

install-phoenix: $(VENV)/.phoenix

# A local Phoenix UI for traces: prints the address and the PHOENIX_ENDPOINT to export.
phoenix: install-phoenix
	$(PY) -m utu.tracing.phoenix serve

# The RL module (transformers, accelerate, peft, gguf) plus what its tests need (TRL, TensorBoard).
$(VENV)/.rl: pyproject.toml | $(VENV)/.torch
	$(PIP) install -e '.[rl,rl-test]'
	touch $@

install-rl: $(VENV)/.rl

demo: install-local
	$(PY) scripts/demo.py

# The whole suite, integration tests included (real llama.cpp model, real PostgreSQL, real Phoenix).
test: install-local install-phoenix $(VENV)/.rl
	@UTU_TEST_PG_URL=$$(bash scripts/dev/postgres.sh start) && export UTU_TEST_PG_URL && \
		$(PY) -m pytest -q $(PYTEST_ARGS); status=$$?; bash scripts/dev/postgres.sh stop; exit $$status

# Unit tests only: the stub LLM and SQLite, no servers.
test-fast: install $(VENV)/.rl
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

lint: install
	$(PY) -m ruff check utu scripts tests benchmarks
	$(PY) -m ruff format --check utu scripts tests benchmarks

bench: install
	$(PY) benchmarks/llm_client_overhead.py

clean:
	-$(PY) -m utu.llm.local stop
	-$(PY) -m utu.tracing.phoenix stop
	rm -rf .utu utu.db utu.db-* .pytest_cache

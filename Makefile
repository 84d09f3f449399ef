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

.PHONY: install install-test demo test test-slow bench clean

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

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

demo: install
	$(BIN)/editapply pull $(DEMO_MODEL)
	$(BIN)/python -m engine.demo --model $(DEMO_MODEL)

test: install-test
	$(BIN)/editapply pull $(TEST_MODEL)
	$(BIN)/python -m pytest -q

test-slow: install-test
	$(BIN)/editapply pull $(DEMO_MODEL)
	EDITAPPLY_SLOW_TESTS=1 $(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) build *.egg-info

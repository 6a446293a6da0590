# The two entry points are `make run` and `make test`; each bootstraps what it needs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BIN := $(VENV)/bin
TOOLS := .tools
PROTO_STAMP := services/core/dracpu/pb/.generated
PROTO_SRC := $(shell find proto -name '*.proto')
PYTEST_ARGS ?= -rfEs

# Go lives in /usr/local/go/bin on the project machines; login shells are not assumed.
export PATH := $(CURDIR)/$(TOOLS)/bin:$(PATH):/usr/local/go/bin

.PHONY: run test venv protos lint typecheck unit peers real-peers helm-bin chromium clean format bench

run: venv protos
	$(BIN)/dracpu dev up $(RUN_ARGS)

test: venv protos lint typecheck peers helm-bin chromium real-peers
	$(BIN)/pytest $(PYTEST_ARGS)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

protos: $(PROTO_STAMP)

$(PROTO_STAMP): $(VENV)/.installed $(PROTO_SRC) tools/genproto.py
	$(PY) tools/genproto.py
	touch $@

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

typecheck: venv protos
	$(BIN)/mypy services dev

# Real peers the tests drive: the NRI runtime side (Go), helm, a browser.
peers:
	bash tools/bootstrap-peers.sh

# The real-peer tiers (Docker engine, containerd + runc, control plane): tools/tier-*.sh.
real-peers:
	bash tools/real-peers.sh

helm-bin:
	bash tools/install-helm.sh

chromium:
	bash tools/install-chromium.sh

bench: venv protos
	for script in benchmarks/*_bench.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) $(TOOLS) $(PROTO_STAMP)
	find services/core/dracpu/pb -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +

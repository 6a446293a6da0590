# The entry points are `make run`, `make test` and `make check` (the quick loop: lint, type-check
# and the tests needing neither root nor a real peer); each bootstraps what it needs.
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

.PHONY: run test check compat fleet venv protos images lint typecheck unit peers real-peers helm-bin chromium clean format bench cluster-up cluster-down bignode-up bignode-down e2e release

run: venv protos
	$(BIN)/dracpu dev up $(RUN_ARGS)

# Without Go, what Go would build (helm, the NRI peer harnesses) is skipped with one line, and
# so are the tests needing it.
test: venv protos lint typecheck peers chromium real-peers
	bash tools/install-helm.sh --skip-without-go
	bash tools/run-tests.sh all $(PYTEST_ARGS)

check: venv protos lint typecheck
	bash tools/run-tests.sh local $(PYTEST_ARGS)

# The compat checks of the control-plane tier on every Kubernetes release of
# tools/kubernetes-versions (VERSIONS="1.34 1.36" for some), building the missing binaries first;
# prints the table of results and writes it to build/compat/results.md.
compat: venv protos
	bash tools/install-helm.sh
	$(PY) tools/compat.py $(VERSIONS)

# The fleet tier alone (the host on CRI-O and the big-node guest under one control plane), as
# root after `make test`'s bootstrap, plus its own (tools/tier-fleet.sh: the guest node's
# NetworkPolicy enforcer); the peers phase of `make test` leaves it out.
fleet: venv protos
	bash tools/install-helm.sh
	bash tools/tier-fleet.sh bootstrap
	flock /tmp/dracpu-peers.lock $(BIN)/pytest -m fleet -p no:cacheprovider $(PYTEST_ARGS) -s tests/fleet

# The placement algorithm's hot modules compiled by mypyc, once per source, into the tool cache.
venv: $(VENV)/.installed $(VENV)/.harness
	$(PY) tools/compile-algorithm.py

# tests/ on the virtualenv's path, so the benchmarks and scripts import `harness` as the tests
# do (pytest's own `pythonpath` setting does the same for pytest).
$(VENV)/.harness: $(VENV)/.installed
	echo "$(CURDIR)/tests" > "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/dracpu-tests.pth"
	touch $@

# Every version from constraints.txt, the one list the images install from too. Installing the
# package generates dracpu.pb (setup.py's build step runs tools/genproto.py).
$(VENV)/.installed: pyproject.toml setup.py constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -c constraints.txt --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $@

# Regenerates dracpu.pb after a .proto changed in an installed checkout.
protos: $(PROTO_STAMP)

$(PROTO_STAMP): $(VENV)/.installed $(PROTO_SRC) tools/genproto.py
	$(PY) tools/genproto.py
	touch $@

# The five service images and the compose dev image, built offline from wheels prepared here
# (BASE_IMAGE=... to build on another base; the docker tier's private engine: tools/tier-docker.sh).
images:
	bash tools/build-images.sh build

# What an operator installs from, written into dist/ (tools/release.sh): the chart package, the
# five images as OCI archives with their digests, an SBOM per image, the release notes from
# CHANGELOG.md and SHA256SUMS. The version is pyproject.toml's. Root: the images are the docker
# tier's (tools/tier-docker.sh images).
release: venv helm-bin
	bash tools/release.sh

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

# A real one-node cluster (tools/cluster.sh) left running for a user; prints the kubeconfig.
cluster-up:
	DRACPU_TIERS=e2e bash tools/real-peers.sh
	bash tools/cluster.sh up

cluster-down:
	bash tools/cluster.sh down

# The big-node guest (tools/tier-bignode.sh: qemu, 8 vCPUs in 2 sockets and 2 NUMA nodes,
# cgroup v2) booted and left running for a user; `tools/tier-bignode.sh shell` attaches to it.
bignode-up: venv protos
	DRACPU_TIERS="realnode bignode" bash tools/real-peers.sh
	bash tools/tier-bignode.sh up

bignode-down:
	bash tools/tier-bignode.sh down

# The chart on that cluster: bootstrap, helm install (pullPolicy Never), tests/e2e scenarios,
# each step printed with its time; the cluster is stopped afterwards.
e2e: venv protos helm-bin
	DRACPU_TIERS=e2e bash tools/real-peers.sh
	$(BIN)/pytest -m e2e -p no:cacheprovider -rfEs -s tests/e2e

chromium:
	bash tools/install-chromium.sh

bench: venv protos
	for script in benchmarks/*_bench.py; do $(PY) $$script || exit 1; done

clean:
	rm -rf $(VENV) $(TOOLS) $(PROTO_STAMP) .wheels
	find services/core/dracpu/pb -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +

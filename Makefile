# torchjob developer entry points. `make test` installs everything it needs and runs every test.
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXAMPLE_STAMP := $(VENV)/.example-installed
CACHE := $(or $(TORCHJOB_CACHE),$(HOME)/.cache/torchjob)
# The example's wheels (torch's CUDA build: about 4 GB), downloaded once for every venv and image:
# PyPI's answers through this machine's proxy are not kept by pip's own cache.
WHEELS := $(CACHE)/wheels
EXAMPLE_REQUIREMENTS := examples/mnist-ddp/requirements.txt
PROTO_FILES := $(shell find proto -name '*.proto' | sort)
PYTEST_FLAGS ?=
# The commit `make upgrade-test` upgrades from; empty: the test's own (EARLIER).
FROM ?=

.PHONY: help
help: ## the README's first two commands, then every target
	@awk '/^```bash$$/ { inside = 1; next } /^```$$/ { if (inside) exit } inside' README.md
	@echo
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The virtual environment with a current pip; each set of extras below installs into it.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $@

# torch, scikit-learn and tensorboard, for the example and the tests that run real torch; never
# a dependency of the services. PyPI's Linux torch is the CUDA build (about 4 GB with its nvidia
# packages); it runs on CPU as well. `pip download` skips the files it already has.
$(EXAMPLE_STAMP): $(EXAMPLE_REQUIREMENTS) | $(BIN)/python
	$(BIN)/python -m pip download --quiet --dest $(WHEELS) -r $(EXAMPLE_REQUIREMENTS)
	$(BIN)/python -m pip install --quiet --no-index --find-links $(WHEELS) -r $(EXAMPLE_REQUIREMENTS)
	@touch $@

.PHONY: setup
setup: $(STAMP) ## create .venv and install the package with its dev tools

.PHONY: cluster
cluster: ## build kube-apiserver, kube-controller-manager, kube-scheduler, kubectl and etcd from the Go module proxy (cached)
	hack/build-control-plane.sh build

.PHONY: helm
helm: ## install helm from the Go module proxy into ~/.cache/torchjob (cached)
	hack/install-helm.sh install

.PHONY: scale-build
scale-build: ## build kwok (the scale tier's fake nodes) from the Go module proxy into ~/.cache/torchjob (cached)
	hack/build-kwok.sh build

# The scale tier's size: fake GPU nodes (docs/scale.md).
NODES ?= 1000
.PHONY: scale-up
scale-up: $(STAMP) cluster scale-build ## start the scale tier in the background: control plane, kube-scheduler, kwok, NODES fake GPU nodes
	cd tests && ../$(BIN)/python -m support.scale up --nodes $(NODES)

.PHONY: scale-down
scale-down: $(STAMP) ## stop the scale tier started by scale-up and remove its files
	cd tests && ../$(BIN)/python -m support.scale down

.PHONY: kueue-build
kueue-build: ## build Kueue v0.17.0's manager from the Go module proxy into ~/.cache/torchjob, with its CRDs and webhook configurations, for tests/e2e/test_kueue.py (cached)
	hack/build-kueue.sh build

.PHONY: kubeflow-build
kubeflow-build: ## build Kubeflow training-operator v1.9.3 from the Go module proxy into ~/.cache/torchjob, for tests/bench/kubeflow.py (cached)
	hack/build-kubeflow.sh build

.PHONY: node-build
node-build: $(EXAMPLE_STAMP) ## build what a real node needs: Debian packages, Go-built binaries, helm, images (cached)
	hack/node.sh build

.PHONY: node-up
node-up: $(EXAMPLE_STAMP) ## start a real single-node cluster here (as root) with the chart installed; safe to repeat
	hack/node.sh up

.PHONY: node-down
node-down: ## stop the node's processes and remove its network rules, mounts and sandboxes
	hack/node.sh down

.PHONY: demo-cluster
demo-cluster: node-up ## on the real node: apply examples/mnist-ddp/job.yaml, wait, print its test accuracy
	hack/demo-cluster.sh

.PHONY: upgrade-test
upgrade-test: $(STAMP) $(EXAMPLE_STAMP) helm node-build ## on the real node: helm upgrade from commit FROM's chart and image (default: tests/node/test_upgrade.py's EARLIER) to this tree's and back, under two running jobs
	TORCHJOB_UPGRADE_FROM='$(FROM)' $(BIN)/pytest tests/node/test_upgrade.py $(PYTEST_FLAGS)

.PHONY: generate
generate: $(STAMP) ## regenerate the CRDs, the Python API models and their API references from proto/, and docs/settings.md
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=tools/codegen proto/schema_options.proto
	$(BIN)/python -m grpc_tools.protoc -Iproto --plugin=protoc-gen-torchjob=tools/protoc-gen-torchjob \
		--torchjob_out=. $(filter-out proto/schema_options.proto,$(PROTO_FILES))
	$(BIN)/ruff format --quiet services/torchjob/api/*types.py
	$(BIN)/python tools/settings_doc.py > docs/settings.md

.PHONY: pod-schema
pod-schema: $(STAMP) ## regenerate api/pod_schema.py (the Pod fields admission checks) from the Kubernetes OpenAPI
	$(BIN)/python tools/gen-pod-schema
	$(BIN)/ruff format --quiet services/torchjob/api/pod_schema.py

# Standard library only, so it needs no venv: the console's single-file front-end libraries.
.PHONY: vendor
vendor: ## re-fetch the console's front-end files pinned in its VENDOR.json and verify them (tools/vendor_frontend.py --upgrade moves the pins)
	$(PYTHON) tools/vendor_frontend.py

.PHONY: lint
lint: $(STAMP) ## ruff, mypy (strict), the layer contracts and the code rules (tools/code_rules.py)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python tools/code_rules.py services

.PHONY: unit
unit: $(STAMP) ## unit tests only (no cluster)
	$(BIN)/pytest tests/unit $(PYTEST_FLAGS)

.PHONY: e2e
e2e: $(STAMP) cluster kueue-build lua browser ## end-to-end tests on the real control plane
	$(BIN)/pytest tests/e2e $(PYTEST_FLAGS)

.PHONY: chart
chart: $(STAMP) cluster helm ## the Helm chart: lint, render, schema, and installed on the real control plane
	$(BIN)/pytest tests/chart $(PYTEST_FLAGS)

.PHONY: browser
browser: ## Debian's Chromium, which the console's browser tests drive with Playwright
	hack/install-chromium.sh

.PHONY: screenshots
screenshots: $(STAMP) cluster browser ## docs/images: the console's screenshots, taken by its browser tests
	TORCHJOB_SCREENSHOTS=$(CURDIR)/docs/images $(BIN)/pytest tests/e2e/test_console.py \
		tests/e2e/test_console_create.py tests/e2e/test_console_replicas.py $(PYTEST_FLAGS)

.PHONY: lua
lua: ## a Lua interpreter (Debian's lua5.4) for the Argo CD health check's tests
	hack/install-lua.sh

.PHONY: demo
demo: $(STAMP) $(EXAMPLE_STAMP) ## train examples/mnist-ddp locally with `torchjob run` (installs torch)
	cd examples/mnist-ddp && PATH="$(CURDIR)/$(BIN):$$PATH" torchjob run --logs runs/logs job.yaml
	@$(BIN)/python -c 'import json; m = json.load(open("examples/mnist-ddp/runs/mnist-ddp/metrics.json")); print("test accuracy: %.4f" % m["test_accuracy"])'

.PHONY: test
# Kueue is built in the background (several minutes of both cores when cold) while the lint and
# the tests before its own run, mostly waiting on clusters; its tests come last and wait for it.
test: $(STAMP) $(EXAMPLE_STAMP) cluster helm lua browser node-build scale-build ## install what is needed, then lint and run every test
	hack/build-kueue.sh start
	$(MAKE) --no-print-directory lint
	hack/run-tests.sh $(BIN)/pytest $(PYTEST_FLAGS)

# BASELINE=REV: each bench whose --help offers --baseline also measures the services of REV.
BASELINE ?=
.PHONY: bench
bench: $(STAMP) cluster scale-build kubeflow-build ## benchmarks: print figures, never pass/fail; BASELINE=REV also measures REV's services beside them (ratios)
	@for b in tests/bench/*.py; do \
		[[ $$b != */__init__.py ]] || continue; \
		against=(); \
		if [[ -n "$(BASELINE)" ]] && $(BIN)/python $$b --help | grep -- --baseline >/dev/null; then \
			against=(--baseline "$(BASELINE)"); \
		fi; \
		$(BIN)/python $$b "$${against[@]}"; \
	done

.PHONY: clean
clean: ## remove the venv and caches inside the work tree (not the binary cache in $(CACHE))
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis

# Fusebox. `make help` lists the targets; `make run` and `make test` are the two
# a newcomer needs. Nothing here downloads anything but Go modules.

IMG ?= ghcr.io/fusebox-dev/fusebox:latest
# The image of examples/in-cluster, which examples/in-cluster/deploy/app.yaml runs.
EXAMPLE_IMG ?= ghcr.io/fusebox-dev/fusebox-example:latest
# The fuseboxd image: the sidecar the pod webhook injects (pkg/webhook/podinject), and
# the node agent's DaemonSet (config/nodeagent, which `make deploy` points at it).
FUSEBOXD_IMG ?= ghcr.io/fusebox-dev/fuseboxd:latest
# The platforms of the images make image, image-example, image-fuseboxd and image-push
# build: each is a full cross-compile, so `make image PLATFORMS=linux/amd64` takes half
# the time when one is enough (a local cluster, a test).
PLATFORMS ?= linux/amd64,linux/arm64
SHELL = /usr/bin/env bash -o pipefail
# The recipes that build outside the workspace say GOWORK=off themselves; one from the
# caller's environment (a script that exported it, as hack/cluster.sh exec's did) would
# turn go.work off for every other go command here and fail them (missing go.sum entry).
unexport GOWORK
.SHELLFLAGS = -ec

LOCALBIN ?= $(shell pwd)/bin
# The tools below are built from their Go modules once per version, into a cache shared
# by every checkout (hack/gotool.sh), as hack/envtest.sh caches the control plane: a
# fresh clone builds none of them again.
TOOLS_CACHE ?= $(or $(XDG_DATA_HOME),$(HOME)/.local/share)/fusebox-tools/$(shell go env GOOS)-$(shell go env GOARCH)
# TypeScript's compiler and Node's types for `make typecheck-clients`, from the npm registry,
# pinned, installed once per version into the same cache (never globally).
TYPESCRIPT_VERSION ?= 5.9.3
TYPES_NODE_VERSION ?= 20.19.9
TSC_DIR ?= $(TOOLS_CACHE)/typescript-$(TYPESCRIPT_VERSION)-node-$(TYPES_NODE_VERSION)
TSC ?= $(TSC_DIR)/node_modules/.bin/tsc
CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.2
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN ?= $(TOOLS_CACHE)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(TOOLS_CACHE)/kustomize-$(KUSTOMIZE_VERSION)
GOLANGCI_LINT ?= $(TOOLS_CACHE)/golangci-lint-$(GOLANGCI_LINT_VERSION)
HELM ?= $(LOCALBIN)/helm
# The Helm SDK version hack/helm renders and tests the chart with: one version, read from there.
HELM_VERSION ?= $(shell cd hack/helm && GOWORK=off go list -m -f '{{.Version}}' helm.sh/helm/v3)

# Set USE_EXISTING_CLUSTER=true to run the manager against the cluster of your
# KUBECONFIG instead of a local control plane.
USE_EXISTING_CLUSTER ?= false
# Set SAMPLE_WORKLOAD=false for a `make run` without the simulated pods.
SAMPLE_WORKLOAD ?= true

GO_TEST_FLAGS ?= -race
# How many packages' tests make test runs at once. Most of its suites spend their time
# waiting (on an API server, a breaker's open period, an interpreter), so twice the cores
# keeps both busy (docs/benchmarks.md, "CI").
TEST_PACKAGES_AT_ONCE ?= 4
# The tests that drive breakers from one goroutine on a fake clock (the reference model
# and the adaptive limit of pkg/breaker, the fleet simulation of test/bulkhead) skip under
# -race, which has nothing to find there and makes them ten to twenty times slower; make
# test runs their packages a second time without it.
UNRACED_PKGS = ./pkg/breaker ./test/bulkhead

# Every module of the workspace (go.work) but hack/tools: the operator, the breaker
# library and its adapters, bench. `go test ./...` stays inside one module, so the
# targets below name each module's directory. hack/tools holds only the Kubernetes
# commands hack/ builds (go.work says why it is in the workspace).
MODULE_DIRS := $(filter-out $(CURDIR)/hack/tools,$(shell go list -m -f '{{.Dir}}'))
# go vet and golangci-lint compile with the flags of the images and of the cluster's
# binaries (hack/cluster/build.sh), whose compiled packages they then reuse; the tests
# compile with -race, which needs cgo.
SHARED_BUILD_ENV = CGO_ENABLED=0 GOFLAGS=-trimpath
MODULE_PKGS = $(patsubst $(CURDIR)%,.%/...,$(MODULE_DIRS))

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: controller-gen ## Generate the CRD, RBAC and webhook manifests from the Go markers.
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd:allowDangerousTypes=true webhook paths="./api/...;./internal/...;./pkg/webhook/..." output:crd:artifacts:config="$$tmp/crd" output:rbac:artifacts:config="$$tmp/rbac" output:webhook:artifacts:config="$$tmp/webhook" && \
	hack/sync-generated.sh "$$tmp/crd" config/crd/bases "$$tmp/rbac" config/rbac "$$tmp/webhook" config/webhook

.PHONY: generate
generate: controller-gen ## Generate the DeepCopy methods of the API types.
	@tmp="$$(mktemp -d)"; trap 'rm -rf "$$tmp"' EXIT; \
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..." output:object:dir="$$tmp" && \
	hack/sync-generated.sh "$$tmp" api/v1alpha1

.PHONY: fmt
fmt: ## Fail if any Go file is not gofmt'ed.
	@out="$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## Run go vet on every module.
	$(SHARED_BUILD_ENV) go vet $(MODULE_PKGS)
	cd hack/image && GOWORK=off go vet ./...
	cd hack/helm && GOWORK=off go vet ./...
	cd test/cluster && GOWORK=off go vet ./...

.PHONY: tidy
tidy: ## Run go mod tidy in every module (hack/tidy.sh: the unpublished sibling modules replaced by their directories).
	hack/tidy.sh

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (.golangci.yml) on every module of the workspace and on hack/image and hack/helm.
	@set -e; for dir in $(filter-out $(CURDIR)/bench,$(MODULE_DIRS)); do echo "golangci-lint: $${dir#$(CURDIR)/}"; (cd $$dir && $(SHARED_BUILD_ENV) $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...); done
	cd hack/image && GOWORK=off $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...
	cd hack/helm && GOWORK=off $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...
	cd test/cluster && GOWORK=off $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd from source for envtest (once; cached after).
	@hack/envtest.sh >/dev/null

.PHONY: kubectl
kubectl: $(LOCALBIN)/kubectl ## Build bin/kubectl from source at the version of the local API server (hack/tools/go.mod).
$(LOCALBIN)/kubectl: hack/tools/go.mod hack/kubectl.sh | $(LOCALBIN)
	hack/kubectl.sh $@

.PHONY: test
test: manifests generate fmt vet envtest kustomize ## Run every test of every module (envtest suites, unit tests, -race).
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" KUSTOMIZE="$(KUSTOMIZE)" go test $(GO_TEST_FLAGS) -p $(TEST_PACKAGES_AT_ONCE) $(MODULE_PKGS) -count=1
	go test -count=1 $(UNRACED_PKGS)

.PHONY: typecheck-clients
typecheck-clients: $(TSC) ## Check the types the clients promise: mypy on Python's (py.typed), tsc on Node's .d.ts, PHP's typed signatures.
	cd clients/python && /usr/bin/python3 -m mypy --strict src
	$(TSC) -p clients/node --typeRoots $(TSC_DIR)/node_modules/@types
	php clients/php/tests/typecheck.php

.PHONY: test-release
test-release: envtest kustomize ## Test what ships: the image (build, push, pull, run, rebuild: same digest), the chart, the install on envtest.
	cd hack/image && GOWORK=off go test -count=1 -timeout 30m ./...
	assets="$$(hack/envtest.sh)" && cd hack/helm && KUBEBUILDER_ASSETS="$$assets" KUSTOMIZE="$(KUSTOMIZE)" GOWORK=off go test -count=1 -timeout 15m ./...

.PHONY: test-cluster
test-cluster: ## Run test/cluster on a real two-node cluster (CLUSTER_NODES=1: one): build the images, up, load, install with Helm, run, down, check the host (docs/cluster.md).
	test/cluster/run.sh $(CLUSTER_FLAGS)

.PHONY: bench
bench: ## Run the library benchmarks against other Go breakers (see docs/benchmarks.md).
	cd bench && go test -run '^$$' -bench . -benchmem -count 5 ./...

.PHONY: test-clients
test-clients: ## Run the suites of the fuseboxd clients (clients/: Python, Node, PHP) and their examples; make test runs them too.
	go test $(GO_TEST_FLAGS) -count=1 -run 'Test(Python|Node|PHP)Client' ./cmd/fuseboxd
	go test $(GO_TEST_FLAGS) -count=1 ./examples/php-worker ./examples/php-guzzle ./examples/python-worker ./examples/node-worker

.PHONY: bench-clients
bench-clients: ## Measure each fuseboxd client's call: p50/p99 against a live daemon, per call against a hung one and a missing socket (docs/benchmarks.md).
	go test -run '^$$' -bench Clients -benchtime 1x -count 3 ./cmd/fuseboxd

.PHONY: bench-cluster
bench-cluster: envtest ## Measure config and verdict propagation with 20 instances on envtest (p50/p99).
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go test -run '^$$' -bench Propagation -benchtime 50x ./test/e2e

# make bench-fleet: N in-process pods (FLEET_PODS) and the manager binary as a
# separate process on envtest. FLEET_NODES=M binds the pods to M nodes and wires
# them to M node agents (internal/nodeagent) under node-bound identities, in
# node host processes (FLEET_NODE_HOSTS, default one per 2,000 pods); unset, every
# pod writes its own BreakerReport. FLEET_HOLLOW=true runs the M nodes as hollow
# agents fed synthetic pod reports (nodeagent.NewHollow), for more pods than run
# here. See test/fleet for the other FLEET_* knobs
# (FLEET_CYCLES, FLEET_SPEC_SAMPLES, FLEET_BREAKERS, FLEET_WAIT_CAP,
# FLEET_SETTLE_CAP, FLEET_STEADY, FLEET_MANAGER_LOG, FLEET_SCENARIOS, FLEET_PROFILE,
# FLEET_RESTART_BREAKERS, FLEET_RESTART_NAMESPACES), which it passes on.
FLEET_PODS ?= 500
FLEET_NODES ?=
FLEET_NODE_HOSTS ?=
FLEET_HOLLOW ?=
FLEET_CLUSTER_PODS ?= 10000
FLEET_OUT ?=

.PHONY: bench-fleet
bench-fleet: envtest | $(LOCALBIN) ## Fleet loop at scale: N pods (FLEET_PODS, default 500), on M node agents with FLEET_NODES (hollow with FLEET_HOLLOW=true), and the real manager on envtest; table to FLEET_OUT.
	go build -o $(LOCALBIN)/manager ./cmd/manager
	FLEET_BENCH=1 FLEET_PODS="$(FLEET_PODS)" FLEET_NODES="$(FLEET_NODES)" FLEET_NODE_HOSTS="$(FLEET_NODE_HOSTS)" FLEET_HOLLOW="$(FLEET_HOLLOW)" FLEET_CLUSTER_PODS="$(FLEET_CLUSTER_PODS)" FLEET_OUT="$(abspath $(FLEET_OUT))" FLEET_MANAGER="$(LOCALBIN)/manager" \
	KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go test -run '^TestFleet$$' -v -count=1 -timeout 3h ./test/fleet

##@ Build

.PHONY: build
build: manifests generate ## Build the manager binary.
	go build -o $(LOCALBIN)/manager ./cmd/manager

.PHONY: fuseboxd
fuseboxd: | $(LOCALBIN) ## Build the per-pod decision sidecar, bin/fuseboxd (docs/fuseboxd.md).
	go build -o $(LOCALBIN)/fuseboxd ./cmd/fuseboxd

.PHONY: plugin
plugin: | $(LOCALBIN) ## Build the kubectl plugin, bin/kubectl-fusebox (put it on your PATH: `kubectl fusebox`).
	go build -o $(LOCALBIN)/kubectl-fusebox ./cmd/kubectl-fusebox

.PHONY: dashboard-screenshot
dashboard-screenshot: envtest ## Rewrite docs/images/dashboard.png from the dashboard's test in headless Chromium.
	DASHBOARD_SCREENSHOT=$(CURDIR)/docs/images/dashboard.png KUBEBUILDER_ASSETS="$$(hack/envtest.sh)" go test -run '^TestDashboardInChromium$$' -count=1 -v ./internal/plugin

.PHONY: run
run: manifests generate build envtest kubectl plugin ## Run Fusebox, the samples and a simulated workload on a local control plane, printing every change of the breakers (or the manager on your cluster with USE_EXISTING_CLUSTER=true).
ifeq ($(USE_EXISTING_CLUSTER),true)
	$(LOCALBIN)/manager --leader-elect=false --metrics-secure=false
else
	go build -o $(LOCALBIN)/localcluster ./hack/localcluster
	$(LOCALBIN)/localcluster --kubeconfig-out $(LOCALBIN)/local/kubeconfig --manager $(LOCALBIN)/manager --bin $(LOCALBIN) --sample-workload=$(SAMPLE_WORKLOAD)
endif

.PHONY: cluster
cluster: ## Start a real single-node cluster (kubelet, containerd) in namespaces of its own (hack/cluster.sh up --nodes 2: two); docs/cluster.md.
	hack/cluster.sh up

.PHONY: cluster-load
cluster-load: ## Load the images of make image and make image-fuseboxd (the manager's, fuseboxd's) into the cluster of make cluster.
	hack/cluster.sh load $(LOCALBIN)/image.tar
	hack/cluster.sh load $(LOCALBIN)/fuseboxd-image.tar

.PHONY: cluster-down
cluster-down: ## Stop the cluster of `make cluster`; it leaves nothing on the machine.
	hack/cluster.sh down

.PHONY: image
image: ## Build the manager image for PLATFORMS (default linux/amd64,linux/arm64) without a container engine: bin/image (OCI layout), bin/image.tar (docker load).
	cd hack/image && GOWORK=off go run . -root $(CURDIR) -platforms $(PLATFORMS) -tag $(IMG) -layout $(LOCALBIN)/image -archive $(LOCALBIN)/image.tar

.PHONY: image-example
image-example: ## Build the image of examples/in-cluster the same way: bin/image-example (OCI layout), bin/image-example.tar.
	cd hack/image && GOWORK=off go run . -root $(CURDIR) -platforms $(PLATFORMS) -package ./examples/in-cluster -entrypoint /in-cluster -title fusebox-example -tag $(EXAMPLE_IMG) -layout $(LOCALBIN)/image-example -archive $(LOCALBIN)/image-example.tar

.PHONY: image-fuseboxd
image-fuseboxd: ## Build the fuseboxd sidecar image the same way: bin/fuseboxd-image (OCI layout), bin/fuseboxd-image.tar.
	cd hack/image && GOWORK=off go run . -root $(CURDIR) -platforms $(PLATFORMS) -package ./cmd/fuseboxd -entrypoint /fuseboxd -title fuseboxd -tag $(FUSEBOXD_IMG) -layout $(LOCALBIN)/fuseboxd-image -archive $(LOCALBIN)/fuseboxd-image.tar

.PHONY: image-push
image-push: ## Build the image and push it to IMG with your docker credentials (~/.docker/config.json).
	cd hack/image && GOWORK=off go run . -root $(CURDIR) -platforms $(PLATFORMS) -tag $(IMG) -layout $(LOCALBIN)/image -archive $(LOCALBIN)/image.tar -push

.PHONY: docker-build
docker-build: ## Build the manager image with a Docker engine (the Dockerfile; same contents as `make image`).
	docker build -t $(IMG) .

.PHONY: helm-bin
helm-bin: $(HELM) ## Build bin/helm from its Go module, at the version hack/helm tests the chart with.
$(HELM): hack/helm/go.mod | $(LOCALBIN)
	GOBIN=$(LOCALBIN) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: helm
helm: kustomize ## Generate the Helm chart in dist/chart from config/.
	cd hack/helm && GOWORK=off go run . -root $(CURDIR) -kustomize $(KUSTOMIZE)

##@ Deployment

.PHONY: install
install: manifests kustomize ## Install the CRDs into the cluster of your KUBECONFIG.
	$(KUSTOMIZE) build config/crd | kubectl apply --server-side -f -

.PHONY: uninstall
uninstall: manifests kustomize ## Remove the CRDs (and every CircuitBreaker) from the cluster.
	$(KUSTOMIZE) build config/crd | kubectl delete --ignore-not-found -f -

# make deploy's manifests: config/default with IMG as the manager's image and FUSEBOXD_IMG
# as the node agent's and as the sidecar's the pod webhook injects (--fuseboxd-image).
# The images are set in a copy of config/ under bin/deploy, so config/ stays as committed.
DEPLOY_DIR = $(LOCALBIN)/deploy

.PHONY: deploy-manifests
deploy-manifests: kustomize ## Render what make deploy applies into bin/deploy/fusebox.yaml (IMG, FUSEBOXD_IMG), leaving config/ as it is.
	rm -rf $(DEPLOY_DIR) && mkdir -p $(DEPLOY_DIR) && cp -R config $(DEPLOY_DIR)/config
	cd $(DEPLOY_DIR)/config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	cd $(DEPLOY_DIR)/config/nodeagent && $(KUSTOMIZE) edit set image fuseboxd=$(FUSEBOXD_IMG)
	cd $(DEPLOY_DIR)/config/default && $(KUSTOMIZE) edit add patch --kind Deployment --name controller-manager \
		--patch '[{"op": "add", "path": "/spec/template/spec/containers/0/args/-", "value": "--fuseboxd-image=$(FUSEBOXD_IMG)"}]'
	$(KUSTOMIZE) build $(DEPLOY_DIR)/config/default > $(DEPLOY_DIR)/fusebox.yaml

.PHONY: deploy
deploy: manifests deploy-manifests ## Deploy the operator and the node agent to the cluster of your KUBECONFIG (IMG, FUSEBOXD_IMG: both images).
	kubectl apply --server-side -f $(DEPLOY_DIR)/fusebox.yaml

.PHONY: undeploy
undeploy: kustomize ## Remove the operator from the cluster.
	$(KUSTOMIZE) build config/default | kubectl delete --ignore-not-found -f -

##@ Tools (built from Go modules, once per version, into TOOLS_CACHE)

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: controller-gen
$(TSC):
	npm install --no-save --prefix $(TSC_DIR) typescript@$(TYPESCRIPT_VERSION) @types/node@$(TYPES_NODE_VERSION)

controller-gen: $(CONTROLLER_GEN) | $(LOCALBIN) ## bin/controller-gen links to the cached binary, for the commands run by hand.
	@ln -sfn $(CONTROLLER_GEN) $(LOCALBIN)/controller-gen
$(CONTROLLER_GEN):
	hack/gotool.sh $@ sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)

.PHONY: kustomize
kustomize: $(KUSTOMIZE) | $(LOCALBIN) ## bin/kustomize links to the cached binary, for the commands run by hand.
	@ln -sfn $(KUSTOMIZE) $(LOCALBIN)/kustomize
$(KUSTOMIZE):
	hack/gotool.sh $@ sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) | $(LOCALBIN) ## bin/golangci-lint links to the cached binary, for the commands run by hand.
	@ln -sfn $(GOLANGCI_LINT) $(LOCALBIN)/golangci-lint
$(GOLANGCI_LINT):
	hack/gotool.sh $@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

# Portico's make targets are the interface for humans and CI.
SHELL := /bin/bash
K8S_VERSION := 1.37.2
CONTROLPLANE_DIR := $(CURDIR)/bin/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
CONTROLLER_GEN := go tool controller-gen

.PHONY: all generate controlplane test bench bench-l2 chaos fuzz demo build clean

all: build

## generate: regenerate deepcopy code and CRD manifests from api/ (controller-gen).
generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd/bases

## controlplane: build kube-apiserver, etcd and kubectl from source into bin/k8s/<version> (cached).
controlplane:
	@bash hack/controlplane/build.sh $(CONTROLPLANE_DIR)

## build: build Portico's binaries into bin/.
build:
	go build -o bin/ ./cmd/...

## test: unit and integration tests against a real kube-apiserver and etcd.
test: controlplane
	@bad=$$(gofmt -l $$(find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$bad" ]; then echo "gofmt needed (run gofmt -w):"; echo "$$bad"; exit 1; fi
	go vet ./...
	go test -count=1 ./...

## bench: allocator micro-benchmarks, end-to-end controller benchmarks against the real
## apiserver (5000 Services, 3 runs; BENCH_SERVICES=300 BENCH_COUNT=1 for a quick one, as CI
## does) and the L2 failover benchmark. Results go in BENCHMARKS.md.
BENCH_SERVICES ?= 5000
BENCH_COUNT ?= 3
BENCH_L2_RUNS ?= 11
bench: controlplane
	go test -run '^$$' -bench . -benchtime 20000x -count $(BENCH_COUNT) ./controller/allocator/
	PORTICO_BENCH_SERVICES=$(BENCH_SERVICES) go test -run '^$$' -bench '^Benchmark(Burst|Backlog)$$' -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./e2e/
	$(MAKE) bench-l2

## bench-l2 (BENCH_L2_RUNS, default 11): L2 failover, dual answering after a partition, speaker memory and the detection
## trade-off, measured with real speakers in network namespaces (root); the report goes to
## bin/bench-l2.md (its section of BENCHMARKS.md).
bench-l2: controlplane
	@mkdir -p bin
	PORTICO_BENCH_L2_RUNS=$(BENCH_L2_RUNS) PORTICO_BENCH_L2_OUT=$(CURDIR)/bin/bench-l2.md go test -count=1 -run '^$$' -bench '^BenchmarkL2$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-l2.md

## chaos (CHAOS_SERVICES, default 3000; CI runs 300): the chaos tests (build tag chaos, so
## `make test` does not run them): Services churned while controller replicas are SIGKILLed
## and the apiserver and etcd restart; pools reshaped under Services; then every fuzz target
## for FUZZTIME. The report goes to bin/chaos.md (docs/reliability.md quotes a real run).
CHAOS_SERVICES ?= 3000
chaos: controlplane
	@mkdir -p bin && rm -f bin/chaos.md
	go vet -tags chaos ./e2e/
	PORTICO_CHAOS_SERVICES=$(CHAOS_SERVICES) PORTICO_CHAOS_OUT=$(CURDIR)/bin/chaos.md go test -tags chaos -count=1 -run '^TestChaos' -v -timeout 40m ./e2e/ 2>&1 | grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|chaos.*_test.go' | grep -v 'would exceed context deadline'; exit $${PIPESTATUS[0]}
	$(MAKE) fuzz
	@cat bin/chaos.md

## fuzz (FUZZTIME, default 10s each): every Fuzz* function in the module, one after another.
FUZZTIME ?= 10s
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./bin/' | sort); do \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: $$name in $$(dirname $$f) for $(FUZZTIME)"; \
			go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$(dirname $$f) | tail -2; \
			test $${PIPESTATUS[0]} -eq 0; \
		done; \
	done

## demo: a local control plane with Portico's CRDs and the home-lab pool.
DEMO_FLAGS ?=
demo: controlplane
	go run ./cmd/portico-demo $(DEMO_FLAGS)

## clean: remove Portico's binaries (the control plane in bin/k8s is kept).
clean:
	rm -f bin/portico-*

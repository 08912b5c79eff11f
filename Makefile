# Portico's make targets are the interface for humans and CI.
SHELL := /bin/bash
K8S_VERSION := 1.37.2
CONTROLPLANE_DIR := $(CURDIR)/bin/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
CONTROLLER_GEN := go tool controller-gen

.PHONY: all generate controlplane test bench bench-l2 bench-dataplane demo build clean

all: build

## generate: regenerate deepcopy code and CRD manifests from api/ (controller-gen).
generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd/bases

## controlplane: build kube-apiserver, etcd, kubectl, kube-proxy and kube-controller-manager from source into bin/k8s/<version> (cached).
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
## does), the L2 failover benchmark and the HTTP failover through kube-proxy. Results go in BENCHMARKS.md.
BENCH_SERVICES ?= 5000
BENCH_COUNT ?= 3
BENCH_L2_RUNS ?= 11
BENCH_DATAPLANE_RUNS ?= 11
bench: controlplane
	go test -run '^$$' -bench . -benchtime 20000x -count $(BENCH_COUNT) ./controller/allocator/
	PORTICO_BENCH_SERVICES=$(BENCH_SERVICES) go test -run '^$$' -bench '^Benchmark(Burst|Backlog)$$' -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./e2e/
	$(MAKE) bench-l2
	$(MAKE) bench-dataplane

## bench-l2 (BENCH_L2_RUNS, default 11): L2 failover, dual answering after a partition, speaker memory and the detection
## trade-off, measured with real speakers in network namespaces (root); the report goes to
## bin/bench-l2.md (its section of BENCHMARKS.md).
bench-l2: controlplane
	@mkdir -p bin
	PORTICO_BENCH_L2_RUNS=$(BENCH_L2_RUNS) PORTICO_BENCH_L2_OUT=$(CURDIR)/bin/bench-l2.md go test -count=1 -run '^$$' -bench '^BenchmarkL2$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-l2.md

## bench-dataplane (BENCH_DATAPLANE_RUNS, default 11): failover seen by an HTTP client that GETs the
## EXTERNAL-IP every 10 ms through real kube-proxies (root); the report goes to
## bin/bench-dataplane.md (its section of BENCHMARKS.md).
bench-dataplane: controlplane
	@mkdir -p bin
	PORTICO_BENCH_DATAPLANE_RUNS=$(BENCH_DATAPLANE_RUNS) PORTICO_BENCH_DATAPLANE_OUT=$(CURDIR)/bin/bench-dataplane.md go test -count=1 -run '^$$' -bench '^BenchmarkDataplane$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-dataplane.md

## demo: a local control plane with Portico's CRDs and the home-lab pool; as root also speakers,
## kube-proxy and pods in network namespaces, ending with a curl of each EXTERNAL-IP.
DEMO_FLAGS ?=
demo: controlplane
	go run ./cmd/portico-demo $(DEMO_FLAGS)

## clean: remove Portico's binaries (the control plane in bin/k8s is kept).
clean:
	rm -f bin/portico-*

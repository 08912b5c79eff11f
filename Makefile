# Portico's make targets are the interface for humans and CI.
SHELL := /bin/bash
K8S_VERSION := 1.37.2
CONTROLPLANE_DIR := $(CURDIR)/bin/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
CONTROLLER_GEN := go tool controller-gen

.PHONY: all generate controlplane test bench bench-l2 bench-bgp demo build clean

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
BENCH_BGP_RUNS ?= 21
BENCH_BGP_SERVICES ?= 1000
bench: controlplane
	go test -run '^$$' -bench . -benchtime 20000x -count $(BENCH_COUNT) ./controller/allocator/
	PORTICO_BENCH_SERVICES=$(BENCH_SERVICES) go test -run '^$$' -bench '^Benchmark(Burst|Backlog)$$' -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./e2e/
	$(MAKE) bench-l2
	$(MAKE) bench-bgp

## bench-l2 (BENCH_L2_RUNS, default 11): L2 failover, dual answering after a partition, speaker memory and the detection
## trade-off, measured with real speakers in network namespaces (root); the report goes to
## bin/bench-l2.md (its section of BENCHMARKS.md).
bench-l2: controlplane
	@mkdir -p bin
	PORTICO_BENCH_L2_RUNS=$(BENCH_L2_RUNS) PORTICO_BENCH_L2_OUT=$(CURDIR)/bin/bench-l2.md go test -count=1 -run '^$$' -bench '^BenchmarkL2$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-l2.md

## bench-bgp (BENCH_BGP_RUNS, default 21; BENCH_BGP_SERVICES, default 1000): status → route in
## the router's kernel table and delete → withdrawn (medians), convergence with many Services and
## speaker peak memory, with three speakers and bird2 in network namespaces (root); the report
## goes to bin/bench-bgp.md (its section of BENCHMARKS.md).
bench-bgp: controlplane
	@mkdir -p bin
	PORTICO_BENCH_BGP_RUNS=$(BENCH_BGP_RUNS) PORTICO_BENCH_BGP_SERVICES=$(BENCH_BGP_SERVICES) PORTICO_BENCH_BGP_OUT=$(CURDIR)/bin/bench-bgp.md go test -count=1 -run '^$$' -bench '^BenchmarkBGP$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-bgp.md

## demo: a local control plane with Portico's CRDs and the home-lab pool.
DEMO_FLAGS ?=
demo: controlplane
	go run ./cmd/portico-demo $(DEMO_FLAGS)

## clean: remove Portico's binaries (the control plane in bin/k8s is kept).
clean:
	rm -f bin/portico-*

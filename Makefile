# Portico's make targets are the interface for humans and CI.
SHELL := /bin/bash
K8S_VERSION := 1.37.2
CONTROLPLANE_DIR := $(CURDIR)/bin/k8s/$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(CONTROLPLANE_DIR)
# Static, cgo-free builds everywhere, as in the image, but for the race detector's runs
# (make test, make chaos).
export CGO_ENABLED := 0
# The approved toolchain, fetched once through the module proxy (about 76 MB): the machines'
# go1.26.8 lacks twelve standard-library fixes that govulncheck finds called (docs/security.md).
export GOTOOLCHAIN := go1.27.3
CONTROLLER_GEN := go tool controller-gen

.PHONY: all generate manifests image controlplane cluster bench-cluster test lab-packages vulncheck bench bench-curve bench-l2 bench-memory bench-dataplane bench-bgp bench-scale bench-nodes bench-speaker-memory chaos fuzz simulate demo build clean

all: build

## generate: regenerate deepcopy code and CRD manifests from api/ (controller-gen), their copy
## in the Helm chart (and the chart's copy of the alerts and the dashboard of config/monitoring),
## then the rendered install manifests that include the CRDs.
generate:
	$(CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:dir=config/crd/bases
	cp config/crd/bases/*.yaml charts/portico/crds/
	cp config/rbac/speaker_policy.yaml charts/portico/templates/speaker-policy.yaml
	sed 's/^\(    namespace:\) portico-system$$/\1 {{ .Release.Namespace }}/' config/rbac/controller_policy.yaml > charts/portico/templates/controller-policy.yaml
	cp config/monitoring/prometheusrule.yaml config/monitoring/dashboard.json charts/portico/files/
	@$(MAKE) --no-print-directory manifests

## manifests: render config/default into config/manifests/portico.yaml with the real kubectl
## (config/manifests_test.go fails when the file is stale). With IMAGE=registry/name:tag (or
## @sha256:...) the same manifests run that image and go to bin/portico.yaml (MANIFESTS).
DEFAULT_IMAGE := ghcr.io/portico-lb/portico:v0.1.0
IMAGE ?= $(DEFAULT_IMAGE)
ifeq ($(IMAGE),$(DEFAULT_IMAGE))
MANIFESTS ?= config/manifests/portico.yaml
else
MANIFESTS ?= bin/portico.yaml
endif
manifests: controlplane
	@mkdir -p bin
	@bash hack/manifests.sh $(CONTROLPLANE_DIR)/kubectl $(IMAGE) $(MANIFESTS)
	@echo "manifests: $(MANIFESTS) runs $(IMAGE)"

## image (IMAGE, IMAGE_PLATFORMS): Portico's image without Docker (hack/image): static
## binaries for each platform on an empty base with distroless's users, as an OCI layout
## (bin/image/oci) and an OCI archive (bin/image/portico.tar) named IMAGE (docs/install.md).
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
image:
	go -C hack/image run . -src $(CURDIR) -out $(CURDIR)/bin/image -ref $(IMAGE) -platforms $(IMAGE_PLATFORMS)

## controlplane: build kube-apiserver, etcd, kubectl, kube-proxy, kube-controller-manager,
## kube-scheduler and kubelet from source into bin/k8s/<version> (cached).
controlplane:
	@bash hack/controlplane/build.sh $(CONTROLPLANE_DIR)

## cluster (CLUSTER_IMAGE): a real cluster on this machine, as root (docs/cluster.md): the
## control plane, kube-scheduler, kube-controller-manager and three nodes (network namespaces
## running containerd, kubelet and kube-proxy). Portico's image (for this machine's platform),
## a pause and an echo image are built into bin/cluster and imported into every node, and the
## manifests are rendered for that image (bin/cluster/portico.yaml). Prints a kubeconfig;
## Ctrl-C removes everything it made.
CLUSTER_IMAGE ?= portico.local/portico:dev
cluster: controlplane
	go run ./hack/cluster -out bin/cluster -image $(CLUSTER_IMAGE)

## build: build Portico's binaries into bin/ (grpcnotrace: as the image, see docs/install.md).
build:
	go build -tags grpcnotrace -o bin/ ./cmd/...

# What the root-only suites (L2, BGP, data plane, the router examples) need besides root; .ci/run
# installs them (`make -s lab-packages` prints the list). prometheus: promtool and the server the
# monitoring tests start themselves on loopback (docs/monitoring.md).
LAB_PACKAGES := iproute2 arping iputils-ping ndisc6 tcpdump nftables conntrack bird2 frr containerd runc containernetworking-plugins openssl gcc libc6-dev prometheus procps iptables

# The race detector (make test, make chaos) needs cgo, so a C compiler.
NEED_CC = @command -v gcc >/dev/null || { echo "make $@ runs the race detector, which needs a C compiler: apt-get install -y gcc libc6-dev"; exit 1; }

## test: unit and integration tests against a real kube-apiserver and etcd, with the race
## detector (it needs cgo, so gcc: LAB_PACKAGES), in the tests and in the portico binaries the
## end-to-end tests start. The output is plain `go test`'s, then the list of skipped tests and
## why (hack/testsummary reads `go test -json`), then the wall time since make started. The
## image's test builds this machine's platform, and every one of `make image`'s in CI (CI=true).
test: MAKE_STARTED := $(shell date +%s)
# Lab tests mostly wait on timers (BGP retries, hold and detection times), not the CPU: four at
# once took make test from 11.1 to 7.6 minutes on 2 cores (go test's default is GOMAXPROCS).
TEST_PARALLEL ?= 4
test: controlplane
	$(NEED_CC)
	@bad=$$(gofmt -l $$(find . -name '*.go' -not -path './bin/*')); \
	if [ -n "$$bad" ]; then echo "gofmt needed (run gofmt -w):"; echo "$$bad"; exit 1; fi
	go vet ./...
	@go build -o bin/testsummary ./hack/testsummary
	@# The image builder and the Helm chart's test are modules of their own (their dependencies
	@# stay out of go.mod).
	go -C hack/image vet ./... && go -C hack/chart vet ./...
	set -o pipefail; { rc=0; CGO_ENABLED=1 go test -race -json -count=1 -parallel $(TEST_PARALLEL) -timeout 30m ./... 2>&1 || rc=1; \
		go -C hack/image test -json -count=1 -timeout 30m ./... 2>&1 || rc=1; \
		go -C hack/chart test -json -count=1 ./... 2>&1 || rc=1; exit $$rc; } | bin/testsummary \
		-hint "To run them: as root, after: apt-get install -y $(LAB_PACKAGES)"; \
		rc=$$?; took=$$(( $$(date +%s) - $(MAKE_STARTED) )); \
		echo "make test: $$((took / 60)) min $$((took % 60)) s (wall time)"; exit $$rc

lab-packages:
	@echo $(LAB_PACKAGES)

## vulncheck: govulncheck (pinned in hack/vulncheck/go.mod) over the module, against the Go
## vulnerability database at the version pinned in hack/vulncheck/db.go, fetched through the
## module proxy and indexed into bin/vulndb on first use. Fails on a call of a vulnerable
## function that hack/vulncheck/accepted.txt does not accept; its self-test first shows it
## failing on a module that calls one (docs/security.md).
vulncheck:
	cd hack/vulncheck && go test -count=1 . && go run . -cache $(CURDIR)/bin/vulndb $(CURDIR)

## bench: allocator micro-benchmarks, end-to-end controller benchmarks against the real
## apiserver (5000 Services, 3 runs; BENCH_SERVICES=300 BENCH_COUNT=1 for a quick one, as CI
## does), the L2 failover benchmark, the HTTP failover through kube-proxy and a takeover's
## cleaning of a conntrack table (BENCH_CONNTRACK_ENTRIES). Results go in BENCHMARKS.md.
BENCH_SERVICES ?= 5000
BENCH_COUNT ?= 3
BENCH_L2_RUNS ?= 11
BENCH_BGP_RUNS ?= 21
BENCH_BGP_SERVICES ?= 1000
BENCH_DATAPLANE_RUNS ?= 11
BENCH_CONNTRACK_ENTRIES ?= 100000
bench: controlplane
	go test -run '^$$' -bench . -benchtime 20000x -count $(BENCH_COUNT) ./controller/allocator/
	PORTICO_BENCH_SERVICES=$(BENCH_SERVICES) go test -run '^$$' -bench '^Benchmark(Burst|Backlog)$$' -benchtime 1x -count $(BENCH_COUNT) -timeout 60m ./e2e/
	$(MAKE) bench-l2
	$(MAKE) bench-bgp
	$(MAKE) bench-dataplane
	$(MAKE) bench-scale BENCH_SCALE_SERVICES=$(BENCH_SERVICES)
	PORTICO_BENCH_CONNTRACK_ENTRIES=$(BENCH_CONNTRACK_ENTRIES) go test -run '^$$' -bench '^BenchmarkForgetClosed$$' -benchtime 1x ./speaker/handoff/

## bench-curve (BENCH_CURVE, default "1000 5000 20000"): the controller's backlog and restart
## (BenchmarkBacklog) at each size, so the growth of time, writes and memory with the number of
## Services shows; not part of `make bench` (20 000 Services take about ten minutes here).
BENCH_CURVE ?= 1000 5000 20000
bench-curve: controlplane
	@for n in $(BENCH_CURVE); do \
		PORTICO_BENCH_SERVICES=$$n go test -count=1 -run '^$$' -bench '^BenchmarkBacklog$$' -benchtime 1x -timeout 60m ./e2e/ || exit 1; \
	done

## bench-scale (BENCH_SCALE_SERVICES, default 5000; BENCH_SCALE_NODES, default 3,10,30; 100 does
## not hold on two cores, see BENCHMARKS.md): the
## real speaker code as that many nodes in one process against a real apiserver (the network
## side a recorder), in L2 and BGP: the speakers' writes per Service change and the convergence
## time against node count; the report goes to bin/bench-scale.md (its section of BENCHMARKS.md).
BENCH_SCALE_SERVICES ?= 5000
BENCH_SCALE_NODES ?= 3,10,30
bench-scale: controlplane
	@mkdir -p bin
	PORTICO_BENCH_SCALE_SERVICES=$(BENCH_SCALE_SERVICES) PORTICO_BENCH_SCALE_NODES=$(BENCH_SCALE_NODES) PORTICO_BENCH_SCALE_OUT=$(CURDIR)/bin/bench-scale.md go test -count=1 -run '^$$' -bench '^BenchmarkSpeakerScale$$' -benchtime 1x -timeout 120m ./e2e/
	@cat bin/bench-scale.md

## bench-nodes (BENCH_NODES, default 100,500,1000; BENCH_NODES_SERVICES, default 100): hollow
## nodes against a real apiserver, first as kube-proxy (the floor), then as Portico's speakers (a
## few real ones, the rest hollow: the speaker's watches and Lease): the apiserver's CPU and bytes
## sent per idle minute, Service change, EndpointSlice change and node join; the report goes to
## bin/bench-nodes.md (its section of BENCHMARKS.md). BENCH_NODES_LEASE_BEFORE=5s also measures
## speakers renewing their Leases every 5 s (before issue 47), in the same run.
BENCH_NODES ?= 100,500,1000
BENCH_NODES_SERVICES ?= 100
BENCH_NODES_LEASE_BEFORE ?=
bench-nodes: controlplane
	@mkdir -p bin
	PORTICO_BENCH_NODES=$(BENCH_NODES) PORTICO_BENCH_NODES_SERVICES=$(BENCH_NODES_SERVICES) PORTICO_BENCH_NODES_LEASE_BEFORE=$(BENCH_NODES_LEASE_BEFORE) PORTICO_BENCH_NODES_OUT=$(CURDIR)/bin/bench-nodes.md go test -count=1 -run '^$$' -bench '^BenchmarkNodes$$' -benchtime 1x -timeout 180m ./e2e/
	@cat bin/bench-nodes.md

## bench-speaker-memory (BENCH_SPEAKER_SERVICES, default 0,1000,10000): one real speaker's
## memory (VmRSS, Go heap) against the number of Services, grown to each count and after a
## restart at it, in a network namespace against a real apiserver (root); heap profiles go to
## bin/speaker-memory/, the report to bin/bench-speaker-memory.md (docs/scale.md).
BENCH_SPEAKER_SERVICES ?= 0,1000,10000
bench-speaker-memory: controlplane
	@mkdir -p bin/speaker-memory
	PORTICO_BENCH_SPEAKER_SERVICES=$(BENCH_SPEAKER_SERVICES) PORTICO_BENCH_SPEAKER_SERVICES_PROFILES=$(CURDIR)/bin/speaker-memory PORTICO_BENCH_SPEAKER_SERVICES_OUT=$(CURDIR)/bin/bench-speaker-memory.md go test -count=1 -run '^$$' -bench '^BenchmarkSpeakerServices$$' -benchtime 1x -timeout 40m ./e2e/
	@cat bin/bench-speaker-memory.md

## bench-l2 (BENCH_L2_RUNS, default 11): L2 failover, dual answering after a partition, speaker memory and the detection
## trade-off, measured with real speakers in network namespaces (root); the report goes to
## bin/bench-l2.md (its section of BENCHMARKS.md).
bench-l2: controlplane
	@mkdir -p bin
	PORTICO_BENCH_L2_RUNS=$(BENCH_L2_RUNS) PORTICO_BENCH_L2_OUT=$(CURDIR)/bin/bench-l2.md go test -count=1 -run '^$$' -bench '^BenchmarkL2$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-l2.md

## bench-memory (BENCH_IDLE_NODES, default "3 10 20"): what a speaker's resident memory is made
## of (VmRSS, anonymous and file-backed, the Go heap and stacks) idle, with 1000 addresses and with
## a BGP session, three speakers in network namespaces (root); then what idle speakers cost (CPU,
## wakeups and packets per second, BenchmarkSpeakerIdle) at each node count. Heap profiles go to
## bin/memory/, the report to bin/bench-memory.md.
BENCH_IDLE_NODES ?= 3 10 20
bench-memory: controlplane
	@mkdir -p bin/memory
	PORTICO_BENCH_MEMORY_PROFILES=$(CURDIR)/bin/memory PORTICO_BENCH_MEMORY_OUT=$(CURDIR)/bin/bench-memory.md go test -count=1 -run '^$$' -bench '^BenchmarkSpeakerMemory$$' -benchtime 1x -timeout 30m ./e2e/
	for n in $(BENCH_IDLE_NODES); do PORTICO_BENCH_IDLE_NODES=$$n PORTICO_BENCH_IDLE_OUT=$(CURDIR)/bin/bench-memory.md go test -count=1 -run '^$$' -bench '^BenchmarkSpeakerIdle$$' -benchtime 1x -timeout 20m ./e2e/ || exit 1; done
	@cat bin/bench-memory.md

## bench-bgp (BENCH_BGP_RUNS, default 21; BENCH_BGP_SERVICES, default 1000): status → route in
## the router's kernel table and delete → withdrawn (medians), convergence with many Services and
## speaker peak memory, the CPU time of every program per phase, with three speakers and bird2 in
## network namespaces (root); the report goes to bin/bench-bgp.md (its section of BENCHMARKS.md).
## PORTICO_BENCH_BGP_PROFILES=dir also saves node-b's CPU profiles of the burst's phases there.
bench-bgp: controlplane
	@mkdir -p bin
	PORTICO_BENCH_BGP_RUNS=$(BENCH_BGP_RUNS) PORTICO_BENCH_BGP_SERVICES=$(BENCH_BGP_SERVICES) PORTICO_BENCH_BGP_OUT=$(CURDIR)/bin/bench-bgp.md go test -count=1 -run '^$$' -bench '^BenchmarkBGP$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-bgp.md

## chaos (CHAOS_SERVICES, default 3000; CI runs 300): the chaos tests (build tag chaos, so
## `make test` does not run them): Services churned while controller replicas are SIGKILLed
## or frozen past their lease and the apiserver and etcd restart; pools reshaped under
## Services; then every fuzz target for FUZZTIME. With the race detector, as `make test`: the
## controllers and speakers the chaos kills are built with it, and a race one reports fails its
## test (CI's size: 162 s with it here, 153 s without in CI, before the pause test, which adds
## about 65 s at 10 pauses). The report goes to bin/chaos.md (docs/reliability.md quotes a real run).
CHAOS_SERVICES ?= 3000
# CHAOS_LEADER_KILLS (default 30; CI runs 10): how often TestChaosLeaderKills SIGKILLs the leader mid-burst.
CHAOS_LEADER_KILLS ?= 30
# CHAOS_LEADER_PAUSES (default 20; CI runs 10): how often TestChaosLeaderPauses freezes the leader past its lease.
CHAOS_LEADER_PAUSES ?= 20
chaos: controlplane
	$(NEED_CC)
	@mkdir -p bin && rm -f bin/chaos.md
	go vet -tags chaos ./e2e/
	@echo "chaos: the whole output goes to bin/chaos.log; a failing test's part is printed in full"
	PORTICO_CHAOS_SERVICES=$(CHAOS_SERVICES) PORTICO_CHAOS_LEADER_KILLS=$(CHAOS_LEADER_KILLS) PORTICO_CHAOS_LEADER_PAUSES=$(CHAOS_LEADER_PAUSES) PORTICO_CHAOS_OUT=$(CURDIR)/bin/chaos.md CGO_ENABLED=1 go test -race -tags chaos -count=1 -run '^TestChaos' -v -timeout 40m ./e2e/ > bin/chaos.log 2>&1; rc=$$?; \
		grep -E '^(=== RUN|--- |PASS|FAIL|ok|panic)|chaos.*_test.go' bin/chaos.log | grep -v 'would exceed context deadline'; \
		if [ $$rc -ne 0 ]; then awk '/^=== RUN/ {n = 0} {part[n++ % 400] = $$0} /^--- FAIL/ {print "chaos: the output of the failed test:"; for (i = (n > 400 ? n - 400 : 0); i < n; i++) print part[i % 400]}' bin/chaos.log; fi; \
		exit $$rc
	$(MAKE) fuzz
	@cat bin/chaos.md

## simulate (SIM_TIME, default 2m, or SIM_SEEDS): the controller's deterministic simulation
## (controller/sim, docs/reliability.md#simulation-make-simulate): seeds in parallel from SIM_FIRST (default:
## from the clock, printed) until the time or count is up or a seed breaks an invariant, whose
## transcript it prints. SIM_SEED=n replays one seed with its whole transcript. SIM_OLD=both runs
## the controller before the fixes (rule: the old conflict rule; lease: no lease check), and
## SIM_FIND (a regular expression) counts only the violations it matches; SIM_SHARING_EDITS=1 lets
## users edit sharing keys (off in CI: 16 000 seeds clean after the fixes of 2026-12-03, not yet more;
## docs/reliability.md#simulation-make-simulate);
## SIM_HOLDS=1 gives pool home an addressHold; SIM_DUAL_POOLS=1 adds an IPv6 pool and dual-stack
## Services that take each family from another pool. SIM_BUG (outside-pools, repack, no-retry) seeds a bug
## each invariant must catch (TestSeededBugs).
SIM_TIME ?= 2m
SIM_ARGS = $(if $(SIM_SEED),-sim.seed=$(SIM_SEED),$(if $(SIM_SEEDS),-sim.seeds=$(SIM_SEEDS),-sim.time=$(SIM_TIME))) \
	$(if $(SIM_FIRST),-sim.first=$(SIM_FIRST)) $(if $(SIM_OLD),-sim.old=$(SIM_OLD)) $(if $(SIM_FIND),-sim.find='$(SIM_FIND)') \
	$(if $(SIM_SHARING_EDITS),-sim.sharing-edits) $(if $(SIM_HOLDS),-sim.holds) $(if $(SIM_DUAL_POOLS),-sim.dual-pools) $(if $(SIM_BUG),-sim.bug=$(SIM_BUG))
simulate:
	go test -count=1 -v -run '^TestSimulate$$' -timeout 60m ./controller/sim/ -args $(SIM_ARGS)

## fuzz (FUZZTIME, default 10s each): every Fuzz* function in the module, one after another.
FUZZTIME ?= 10s
fuzz:
	@mkdir -p bin; set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./bin/' | sort); do \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: $$name in $$(dirname $$f) for $(FUZZTIME)"; \
			if ! go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$(dirname $$f) > bin/fuzz.log 2>&1; then \
				cat bin/fuzz.log; \
				echo "fuzz: $$name failed (above); once more: an input it found is saved in testdata/fuzz and fails again"; \
				go test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$(dirname $$f); \
			else \
				tail -2 bin/fuzz.log; \
			fi; \
		done; \
	done

## bench-dataplane (BENCH_DATAPLANE_RUNS, default 11): failover seen by an HTTP client that GETs the
## EXTERNAL-IP every 10 ms through real kube-proxies (root); the report goes to
## bin/bench-dataplane.md (its section of BENCHMARKS.md).
bench-dataplane: controlplane
	@mkdir -p bin
	PORTICO_BENCH_DATAPLANE_RUNS=$(BENCH_DATAPLANE_RUNS) PORTICO_BENCH_DATAPLANE_OUT=$(CURDIR)/bin/bench-dataplane.md go test -count=1 -run '^$$' -bench '^BenchmarkDataplane$$' -benchtime 1x -timeout 30m ./e2e/
	@cat bin/bench-dataplane.md

## bench-cluster (BENCH_CLUSTER_RUNS, default 3): on `make cluster`'s cluster with Portico
## installed from its manifests (root), the client's view of the operations users do (delete the
## owning speaker's pod, kill it with SIGKILL, stop the owner's kubelet and containerd, cut its link, drain it, delete the
## controller leader's pod, rolling upgrades over L2, and the upgrades and the drain again over BGP): failed requests and the longest gap,
## a GET every 10 ms on a new connection; failed requests and reset connections of 50 keep-alive connections
## (BENCH_CLUSTER_CONNS) each sending a GET every 10 ms; how often each address moved (L2: who answers
## ARP; BGP: the router's next hops); no EXTERNAL-IP may change. BENCH_CLUSTER_OPS picks operations
## by key. The table goes to bin/bench-cluster.md (BENCHMARKS.md).
BENCH_CLUSTER_RUNS ?= 3
BENCH_CLUSTER_CONNS ?= $(or $(PORTICO_BENCH_CLUSTER_CONNS),50)
BENCH_CLUSTER_OPS ?= $(PORTICO_BENCH_CLUSTER_OPS)
bench-cluster: controlplane
	PORTICO_BENCH_CLUSTER_RUNS=$(BENCH_CLUSTER_RUNS) PORTICO_BENCH_CLUSTER_CONNS=$(BENCH_CLUSTER_CONNS) PORTICO_BENCH_CLUSTER_OPS=$(BENCH_CLUSTER_OPS) PORTICO_BENCH_CLUSTER_OUT=$(CURDIR)/bin/bench-cluster.md go test -count=1 -run '^$$' -bench '^BenchmarkOperations$$' -benchtime 1x -v -timeout 90m ./internal/cluster/
	@cat bin/bench-cluster.md

## demo: a local control plane with Portico's CRDs and the home-lab pool; as root also speakers,
## kube-proxy and pods in network namespaces, ending with a curl of each EXTERNAL-IP.
DEMO_FLAGS ?=
demo: controlplane
	go run ./cmd/portico-demo $(DEMO_FLAGS)

## clean: remove Portico's binaries (the control plane in bin/k8s is kept).
clean:
	rm -f bin/portico-*

# Baton's build. `make demo` and `make test` work on a fresh machine: each
# installs what it needs (Debian packages, npm and pip packages, Kafka jars
# from Maven Central, Go tools pinned in go.mod).

GO        ?= go
GOFLAGS   ?=
PKGS      ?= ./...
TESTFLAGS ?= -race -count=1 -timeout 40m
BIN       := bin/baton

.PHONY: manifests image all build test test-deps lint vet staticcheck demo bench bench-compare chaos proto generate fuzz fuzz-short clean

all: build

build:
	$(GO) build $(GOFLAGS) -o $(BIN) ./cmd/baton

## test: everything CI runs. Installs the client matrix and the Kafka jars,
## then lint, then a short run of every fuzz target, then the cutover core's
## simulator and the agent's cutover simulation at their full counts (the
## race detector slows them six to eightfold; under -race each runs a
## tenth), then every Go test with
## -race (embedded kfake and real Apache Kafka clusters are started by the
## tests themselves), then CHAOS_RUNS fault-injection runs (default 2, from
## a seed the clock draws and the output prints) on their own, so that no
## other test's load is counted in their stalls.
CHAOS_RUNS ?= 2
# The slowest test packages first: go test starts runs in the order given, so
# on two cores the long ones overlap the many short ones instead of trailing
# them. The list is an order, not a selection: ./... adds every package.
TESTPKGS ?= ./test/e2e ./replicator ./cmd/baton ./test/clients ./controlplane ./agent ./test/chaos ./test/kafka $(PKGS)
test: test-deps lint fuzz-short
	$(GO) test $(GOFLAGS) -count=1 -run '^TestSimulator$$' ./controlplane/cutover
	$(GO) test $(GOFLAGS) -count=1 -run '^TestSimulateCutoverProtocol$$' ./agent
	$(GO) test $(GOFLAGS) $(TESTFLAGS) $(TESTPKGS)
	bash test/chaos/run.sh "$(CHAOS_RUNS)"

test-deps:
	bash test/clients/install.sh
	bash test/chaos/install.sh
	bash test/kafka/fetch.sh >/dev/null

lint: vet staticcheck

vet:
	$(GO) vet $(PKGS)

staticcheck:
	$(GO) tool staticcheck $(PKGS)

## manifests: rewrite deploy/manifests/baton.yaml from the Helm chart.
manifests:
	$(GO) test ./deploy -run '^TestManifestsAreTheChart$$' -count=1 -update

## image: the container image the chart runs (needs docker).
image:
	docker build -t baton-kafka/baton:0.1.0 .

## demo: two embedded clusters, a live producer, a migration, narrated.
demo:
	$(GO) run ./cmd/baton demo

## bench: side-by-side benchmarks (through the agent vs direct, ...).
bench: test-deps
	$(GO) test $(GOFLAGS) -run '^$$' -bench . -benchtime 1x -timeout 60m $(PKGS)

## bench-compare: the agent-vs-direct benchmark with the agent of git
## revision REV measured in the same run: before and after a change.
REV ?= HEAD~1
bench-compare: test-deps
	bash test/bench/compare.sh "$(REV)"

## chaos: RUNS fault-injection runs (default 5) from SEED (default: the
## clock), DURATION of producing each (default 40s); ends with one summary
## line and fails on any loss, reorder, idempotent duplicate or fatal error.
RUNS     ?= 5
SEED     ?=
DURATION ?=
chaos: test-deps
	bash test/chaos/run.sh "$(RUNS)" "$(SEED)" "$(DURATION)"

## fuzz: run each fuzz target for FUZZTIME (default 1m). `go test -fuzz`
## takes one target per invocation, hence the loop.
FUZZTIME ?= 1m
fuzz:
	@for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -n1 dirname | sort -u); do \
	  for t in $$(grep -h '^func Fuzz' $$f/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "== $$f $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$f || exit 1; \
	  done; \
	done

## fuzz-short: every fuzz target for 20000 inputs (seconds each), as part of
## `make test`. A count, not a duration: Go 1.26's fuzzing coordinator can
## report a duration's end as "context deadline exceeded", a failure with no
## failing input, on a loaded machine (golang/go#75804, fixed in Go 1.27).
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=20000x

## proto: regenerate api/baton/v1 with protoc and plugins pinned in go.mod.
proto:
	@command -v protoc >/dev/null || (apt-get update -qq && apt-get install -y -qq protobuf-compiler)
	@protos=$$(find api -name '*.proto'); \
	if [ -z "$$protos" ]; then echo "proto: no .proto files under api/ yet"; exit 0; fi; \
	protoc -I api \
	  --plugin=protoc-gen-go="$$($(GO) tool -n protoc-gen-go)" --go_out=paths=source_relative:api \
	  --plugin=protoc-gen-go-grpc="$$($(GO) tool -n protoc-gen-go-grpc)" --go-grpc_out=paths=source_relative:api \
	  $$protos

## generate: go generate (bpf2go output is committed; this refreshes it,
## with clang and libbpf's headers, installed if missing).
generate:
	@command -v clang >/dev/null && test -f /usr/include/bpf/bpf_helpers.h || \
	  (apt-get update -qq && apt-get install -y -qq clang llvm libbpf-dev)
	$(GO) generate $(PKGS)

clean:
	rm -rf bin
	$(GO) clean -testcache

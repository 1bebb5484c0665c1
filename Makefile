# Better Compute control plane. On a fresh machine with only Go and Node/npm:
#   make run    the whole control plane locally (dynalite + local-kms + gateway)
#   make test   everything CI runs (.ci/run)
# `make help` lists every target.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

GO  ?= go
NPM ?= npm

# Pinned tools. npm packages are pinned by package-lock.json (dynalite 4.0.0,
# aws-cdk, aws-cdk-local); local-kms is built from the Go module proxy.
LOCAL_KMS_MODULE  := github.com/nsmithuk/local-kms
LOCAL_KMS_VERSION := v0.0.0-20260228092603-2a5e92d09ab6
TOOLS_DIR         := .tools
LOCAL_KMS         := $(TOOLS_DIR)/bin/local-kms
# local-kms listens on every interface (its server binds ":"+PORT, and no
# setting names a host): it is built from a copy of the pinned module with that
# one line bound to 127.0.0.1, like every other local server.
LOCAL_KMS_REAL    := $(TOOLS_DIR)/local-kms@$(LOCAL_KMS_VERSION)-loopback/local-kms
# The official AWS Lambda Runtime Interface Emulator (make lambda-test).
RIE_MODULE        := github.com/aws/aws-lambda-runtime-interface-emulator
RIE_VERSION       := v0.0.0-20261030222936-bef5c4ba774d
RIE               := $(TOOLS_DIR)/aws-lambda-rie@$(RIE_VERSION)/aws-lambda-rie
NODE_STAMP        := node_modules/.package-lock.json

TEST_TIMEOUT ?= 15m
# Lambda architecture: arm64 in AWS; amd64 for LocalStack on an amd64 host.
LAMBDA_GOARCH ?= arm64
# Where make build puts <function>/bootstrap (make lambda-build: build/lambda-test).
LAMBDA_OUT    ?= build
# The race detector needs cgo and a C compiler; without them the race
# tests run without it. make test runs the tests that race goroutines on
# purpose (top-level names matching RACE_TESTS, in the packages that have
# them) under it, and the rest of the suite without it: -race costs the
# suite three times its CPU, most of it in the real-time simulations whose
# concurrency is the agents' and dynalite's, not shared Go memory. Each
# test runs once. make race runs everything under it.
RACE          = $(shell [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo -race)
GOTESTFLAGS  ?=
RACE_TESTS   := Race|Racing|Concurrent|Overlapping|Parallel
RACE_PKGS    := $(sort $(patsubst %/,./%,$(dir $(shell grep -rlE '^func (Test|Fuzz)[A-Za-z0-9_]*($(RACE_TESTS))' --include=*_test.go cmd shared test))))
GO_DIRS      := $(wildcard cmd functions shared test infra)
FUNCTIONS    := $(notdir $(patsubst %/,%,$(wildcard functions/*/)))

# infra/infra.mk (included at the end) appends the infrastructure checks that
# `make test` runs beside the Go tests, in niced lanes of their own
# (`--niced` between two lanes), e.g. INFRA_TEST_TARGETS += infra-test --niced synth.
INFRA_TEST_TARGETS :=

.PHONY: help tools run test gotest race race-tests fmt fmt-check vet build docs bench fuzz fleetproto fleetproto-reverts sims e2e clean distclean lambda-build lambda-test browser

help: ## list the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

tools: $(NODE_STAMP) $(LOCAL_KMS) ## install the pinned local servers (idempotent)

# npm ci only when node_modules is missing or the lock file changed.
$(NODE_STAMP): package.json package-lock.json
	@command -v $(NPM) >/dev/null || { echo "npm not found: install Node.js 20 or later" >&2; exit 1; }
	$(NPM) ci --no-audit --no-fund
	@touch $@

# Built once per pinned version; .tools/bin/local-kms links to it. The copy's
# patch is checked: a version whose line differs stops here, not at run time.
LOCAL_KMS_SRC := $(TOOLS_DIR)/src/local-kms@$(LOCAL_KMS_VERSION)
$(LOCAL_KMS_REAL):
	@dir=$$(cd / && GOWORK=off GOFLAGS=-mod=mod $(GO) mod download -json $(LOCAL_KMS_MODULE)@$(LOCAL_KMS_VERSION) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p'); \
	  rm -rf $(LOCAL_KMS_SRC) && mkdir -p $(dir $(LOCAL_KMS_SRC)) && cp -R "$$dir" $(LOCAL_KMS_SRC) && chmod -R u+w $(LOCAL_KMS_SRC); \
	  sed -i.orig -e 's/addr := ":"+port/addr := "127.0.0.1:"+port/' -e 's/started on 0\.0\.0\.0:/started on 127.0.0.1:/' $(LOCAL_KMS_SRC)/src/server.go; \
	  grep -q 'addr := "127.0.0.1:"+port' $(LOCAL_KMS_SRC)/src/server.go || { echo "local-kms $(LOCAL_KMS_VERSION): its listen line changed; update the Makefile's patch" >&2; exit 1; }
	cd $(LOCAL_KMS_SRC) && GOWORK=off $(GO) build -trimpath -o $(CURDIR)/$@ .

$(LOCAL_KMS): $(LOCAL_KMS_REAL)
	@mkdir -p $(@D)
	ln -sfn ../local-kms@$(LOCAL_KMS_VERSION)-loopback/local-kms $@

# Built, then run in the foreground (not `go run`, which turns Ctrl-C into exit 1).
run: tools ## run the control plane locally on BC_LISTEN (default 127.0.0.1:8080)
	@$(GO) build -o build/bc-local ./cmd/bc-local
	@exec build/bc-local

# make test runs the Go tests (gotest, output streamed) and beside them, in
# lanes of their own, gofmt and vet, the race tests and the infra checks
# (output printed once the Go tests end): the Go tests spend much of their
# time waiting on real-time agents, the lanes are CPU-bound and run niced
# (but the race tests', whose creates keep real deadlines).
# Neither stops the other; the run ends with one summary of what failed
# (test/checks/checks.sh; logs in build/test/). The tools first, npm's and
# local-kms's builds side by side (on a fresh clone, 15 s one after the
# other). Go's collector runs less often in the run (GOGC=400 for the test
# binaries, the compiler and the linker, whose heaps are small): a tenth of
# the test binaries' CPU was marking. docs/performance.md (Build and CI)
# has where the time goes.
TEST_GOGC ?= 400
test: ## everything CI runs: format, vet, unit and integration tests, infra checks
	@$(MAKE) -j2 tools
	@GOGC=$(TEST_GOGC) MAKE='$(MAKE)' test/checks/checks.sh build/test gotest --niced fmt-check vet -- race-tests --niced $(INFRA_TEST_TARGETS)

# The longest packages first (go test starts packages in the order given,
# TEST_P at a time): the last to start is a short one (test/bootstrap's
# 31 arm64 builds, test/interop's TypeScript compile and test/bench's
# rounds took 25-45 s each at the end of the run when left to go test's
# own order). Three at a time on
# two cores: the longest three (the browser, the real-time fleet, the
# README walks) spend much of their time waiting on real time — agents'
# heartbeats, reconciler ticks, a page's refresh — which a third package's
# CPU fills.
TEST_P    ?= 3
SLOW_PKGS := ./test/browser ./test/fleetsim ./cmd/bcctl ./shared/rollout ./shared/capacity ./test/fleetproto ./shared/fleet ./test/e2e ./test/bootstrap ./test/interop ./test/bench

# The console's browser tests (test/browser) drive Debian's chromium; the
# project installs it itself when it is missing (apt-get, as root or with
# sudo), so make test on a fresh machine needs nothing else.
CHROMIUM := /usr/bin/chromium

browser: ## install Debian's chromium for the console's browser tests when /usr/bin/chromium is missing
	@[ -x $(CHROMIUM) ] || { \
	  command -v apt-get >/dev/null || { echo "$(CHROMIUM) is missing and there is no apt-get: install Chromium (the console's browser tests drive it)" >&2; exit 1; }; \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	  [ -x $(CHROMIUM) ] || { echo "apt-get installed no $(CHROMIUM)" >&2; exit 1; }; }

# -vet=off: go vet ./... runs in its own lane; the subset of it go test
# runs before each package's tests would repeat it on every package.
gotest: tools browser
	$(GO) test -vet=off -p $(TEST_P) -timeout $(TEST_TIMEOUT) -skip '$(RACE_TESTS)' $(GOTESTFLAGS) $(SLOW_PKGS) $$($(GO) list ./... | grep -vxFf <($(GO) list $(SLOW_PKGS)))

race-tests: tools
	@[ -n "$(RACE)" ] || echo "note: no C compiler (or CGO_ENABLED=0): the race tests run without -race"
	$(GO) test -vet=off -count=1 $(RACE) -run '$(RACE_TESTS)' $(RACE_PKGS)

race: tools ## every test under the race detector (slow: about three times make test's CPU)
	$(GO) test -timeout 30m $(RACE) $(SLOW_PKGS) $$($(GO) list ./... | grep -vxFf <($(GO) list $(SLOW_PKGS)))

fmt: ## gofmt every Go file
	gofmt -w $(GO_DIRS)

fmt-check:
	@out=$$(gofmt -l $(GO_DIRS)); if [ -n "$$out" ]; then echo "gofmt needed (run make fmt):"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

build: ## build every Lambda for linux/arm64 (LAMBDA_GOARCH=amd64 for LocalStack on amd64) into build/<function>/bootstrap
	@rm -rf $(LAMBDA_OUT)/.bin && mkdir -p $(LAMBDA_OUT)/.bin
	GOOS=linux GOARCH=$(LAMBDA_GOARCH) CGO_ENABLED=0 $(GO) build -tags lambda.norpc -trimpath -ldflags "-s -w" \
	  -o $(LAMBDA_OUT)/.bin/ $(FUNCTIONS:%=./functions/%)
	@for f in $(FUNCTIONS); do \
	  mkdir -p $(LAMBDA_OUT)/$$f && mv $(LAMBDA_OUT)/.bin/$$f $(LAMBDA_OUT)/$$f/bootstrap; \
	  printf '  %s/%-32s %6.2f MiB\n' "$(LAMBDA_OUT)" "$$f/bootstrap" "$$(wc -c < $(LAMBDA_OUT)/$$f/bootstrap | awk '{print $$1/1048576}')"; \
	done
	@rmdir $(LAMBDA_OUT)/.bin

# make lambda-test: the bootstraps for this machine's architecture, each run
# under the emulator with the environment the synthesized template gives it
# (test/lambdastack); test/lambda checks each function, and the black-box
# suite's every request is compared with the local gateway's answer. One
# package at a time (-p 1): the init times are measured without the other
# package's emulators competing for the 2 cores.
LAMBDA_TEST_DIR := build/lambda-test
LAMBDA_TEMPLATE ?= cdk.out/BetterCompute.template.json

$(RIE):
	GOBIN=$(CURDIR)/$(@D) $(GO) install $(RIE_MODULE)/cmd/aws-lambda-rie@$(RIE_VERSION)

# make build into a clean $(LAMBDA_TEST_DIR), for this machine's architecture.
lambda-build:
	@rm -rf $(LAMBDA_TEST_DIR)
	@$(MAKE) build LAMBDA_OUT=$(LAMBDA_TEST_DIR) LAMBDA_GOARCH=$$($(GO) env GOARCH)

lambda-test: tools $(RIE) synth lambda-build ## every Lambda under the official runtime emulator, checked against the local gateway (both IAM modes)
	$(GO) vet -tags lambdatest ./test/lambda
	BC_LAMBDA_RIE=$(CURDIR)/$(RIE) BC_LAMBDA_BOOTSTRAPS=$(CURDIR)/$(LAMBDA_TEST_DIR) BC_LAMBDA_TEMPLATE=$(CURDIR)/$(LAMBDA_TEMPLATE) \
	  BC_LAMBDA_REPORT=$(CURDIR)/$(LAMBDA_TEST_DIR)/init-report.txt \
	  $(GO) test -vet=off -count=1 -p 1 -timeout $(TEST_TIMEOUT) -tags lambdatest ./test/lambda ./test/blackbox
	@cat $(LAMBDA_TEST_DIR)/init-report.txt

e2e: tools ## black-box suite: against BC_API_URL with BC_TOKEN, else an in-process local stack (see test/blackbox)
	BC_E2E_URL="$(BC_API_URL)" BC_E2E_TOKEN="$(BC_TOKEN)" $(GO) test -count=1 -v ./test/blackbox

docs: ## regenerate from the method catalog: docs/reference, docs/openapi.json, shared/client/methods.go (and the oapi-codegen client of the interop test)
	$(GO) run ./cmd/docgen
	$(GO) tool oapi-codegen -config test/interop/oapigo/oapi-codegen.yaml -o test/interop/oapigo/client.gen.go docs/openapi.json

# Native Go fuzz targets (package:function). `make test` runs their seed
# corpora (the seeds in code and testdata/fuzz); `make fuzz` fuzzes each for
# FUZZTIME, and what it finds lands in the package's testdata/fuzz to commit.
FUZZTIME     ?= 30s
FUZZ_TARGETS := shared/api:FuzzDecodeInput shared/release:FuzzVerify shared/cursor:FuzzDecode shared/iam:FuzzParsePolicy \
                shared/capacity:FuzzCapacitySimulation shared/release:FuzzOpen

fuzz: ## fuzz every target for FUZZTIME each (e.g. make fuzz FUZZTIME=5m); findings go to testdata/fuzz
	@for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; fn=$${t##*:}; \
	  echo "== $$fn in $$pkg for $(FUZZTIME)"; \
	  $(GO) test ./$$pkg -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 1s -parallel 2 || exit 1; \
	done

# make fleetproto: the fleet protocol simulation (docs/fleet.md) for seeds
# 1..SEEDS, one after another (`make test` runs seeds 3, 5, 6 and 7:
# those that catch the reverted fixes of docs/fleet.md's table); a failing
# seed prints the line that replays it (BC_FLEETPROTO_SEED=k).
SEEDS ?= 48
fleetproto: ## run the fleet protocol simulation for seeds 1..SEEDS (e.g. make fleetproto SEEDS=100)
	BC_FLEETPROTO_SEEDS=$(SEEDS) $(GO) test ./test/fleetproto -run TestFleetProtocolSimulation -count=1 -timeout 0 -v 2>&1 | \
	  grep -E '^(---|FAIL|ok)|seed [0-9]+: ([0-9]+ steps|checks failed|check )|replay:'; exit $${PIPESTATUS[0]}

# make fleetproto-reverts: the fleet protocol simulation's revert table —
# each fix reverted alone (test/fleetproto/reverts/*.patch) in a scratch
# worktree of HEAD, REVERT_SEEDS run, the failing checks printed
# (docs/fleet.md). About 2 minutes a patch for 8 seeds.
REVERT_SEEDS ?= 1,2,3,4,5,6,7,8
fleetproto-reverts: tools ## each fleet fix reverted alone: which of REVERT_SEEDS fail (docs/fleet.md's revert table)
	test/fleetproto/reverts/run.sh $(REVERT_SEEDS)

# make sims: every seeded simulation with more seeds than make test runs
# (which keeps a few of each to stay under 5 minutes): the capacity
# simulation's 32 (make test: 1 and 3), the rollout protocol's 16 (2), the
# rollout crash matrix at each fault point's first and third visit (first),
# the release log's 64 (6), the registration simulation's 64 (6) and the
# fleet protocol's SEEDS (3, 5, 6 and 7); and the real-time rollout simulation
# of 100 reference agents and the 50-agent fleet simulation (make test: 30
# agents) (build tag sims: not in make test). Without
# -race; a failing seed prints its replay.
sims: ## run the seeded simulations with many seeds (capacity 32, rollout 16 and the crash matrix's third visits, fleet protocol SEEDS) and the real-time 100-agent rollout and 50-agent fleet simulations
	BC_SIM_SEEDS=32 $(GO) test ./shared/capacity -run FuzzCapacitySimulation -count=1 -timeout 0
	BC_ROLLOUT_SEEDS=16 BC_CRASH_VISITS=1,3 $(GO) test ./shared/rollout -run 'TestRolloutProtocolSimulation|TestRolloutCrashMatrix' -count=1 -timeout 0
	BC_LOGSIM_SEEDS=64 $(GO) test ./test/fleetproto -run TestReleaseLogSimulation -count=1 -timeout 0
	BC_REGSIM_SEEDS=64 $(GO) test ./test/fleetproto -run TestRegisterSimulation -count=1 -timeout 0
	$(GO) test -tags sims ./test/fleetsim -run TestRolloutSimulation -count=1 -timeout 0 -v 2>&1 | grep -E '^(---|FAIL|ok)|rolloutsim'; exit $${PIPESTATUS[0]}
	$(MAKE) fleetproto SEEDS=$(SEEDS)

# make bench: every benchmark, one package at a time (-p 1: none competes
# with another for the 2 cores); cmd/benchdoc writes the raw output behind a
# header to BENCH_RESULTS and makes docs/performance.md's tables anew from
# it. BENCH=regexp runs a subset into build/bench/results.txt instead and
# leaves the docs alone — unless BENCH_OUT names a file in docs/bench/: a
# subset whose tables performance.md generates from that file
# (`<!-- bench @FILE: … -->`), e.g. make bench BENCH=Availability
# BENCH_OUT=docs/bench/availability-results.txt.
BENCH         ?= .
BENCH_RESULTS := docs/bench/results.txt
BENCH_OUT      = $(if $(filter .,$(BENCH)),$(BENCH_RESULTS),build/bench/results.txt)

bench: tools ## run every benchmark, record docs/bench/results.txt and regenerate docs/performance.md's tables (BENCH=regexp: a subset, docs untouched unless BENCH_OUT=docs/bench/FILE)
	$(GO) run ./cmd/benchdoc run -out $(BENCH_OUT) -- \
	  $(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchmem -timeout 60m ./...
	$(if $(filter .,$(BENCH))$(filter docs/bench/%,$(BENCH_OUT)),$(GO) run ./cmd/benchdoc doc -results $(BENCH_RESULTS) -doc docs/performance.md)

# Deploy outputs describe a deployed stack, not a build: clean keeps them.
DEPLOY_OUTPUTS := build/outputs.json build/.localstack/outputs.json

clean: ## remove build output (not make deploy's build/outputs.json) and the local stack's state (.local/)
	@[ ! -d build ] || find build -mindepth 1 -depth $(foreach f,$(DEPLOY_OUTPUTS),! -path $(f) ! -path $(patsubst %/,%,$(dir $(f)))) -exec rm -rf {} +
	rm -rf .local

distclean: clean ## also remove the installed tools
	rm -rf node_modules $(TOOLS_DIR)

-include infra/infra.mk
# After synth: it reads the template synth writes.
INFRA_TEST_TARGETS += lambda-test

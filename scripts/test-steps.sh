#!/usr/bin/env bash
# Runs the steps of `make test` (the Makefile's TEST_STEPS) in order and prints the time of each,
# as it ends and all together at the end, also when a step fails:
#
#   ==> step test-rust passed in 512s
#   ...
#   ==> step times: lint-static 15s, test-rust 512s, test-infra 301s (beside test-localstack), ...
#
# A word `a+b` runs the steps a and b at the same time (for steps that mostly wait on an emulator
# or on the clock), each with its output in target/steps/<step>.log, printed whole when it ends
# (a step's time then counts from the start of its group).
# The first step that fails stops the run once the steps running beside it have ended; the
# exit status is 1 then.
#
# Usage (from the Makefile): MAKE=make scripts/test-steps.sh lint-static test-build+setup-localstack test-rust test-infra+test-beside-infra
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
make_cmd=${MAKE:-make}
logs=${CARGO_TARGET_DIR:-target}/steps
mkdir -p "$logs"

# Steps side by side run as jobs with process groups of their own, stopped with this script.
set -m
pids=()
stop_group() {
	local pid
	for pid in "${pids[@]+"${pids[@]}"}"; do
		kill -TERM -- "-$pid" 2>/dev/null || true
	done
}
trap stop_group EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

times=()
summary() {
	local IFS=,
	echo "==> step times:${times[*]/#/ }"
}

started=$(date +%s)
for word in "$@"; do
	IFS=+ read -r -a group <<<"$word"
	if [ "${#group[@]}" -eq 1 ]; then
		step=${group[0]}
		t0=$(date +%s)
		if $make_cmd --no-print-directory "$step"; then
			seconds=$(($(date +%s) - t0))
			echo "==> step $step passed in ${seconds}s"
			times+=("$step ${seconds}s")
		else
			seconds=$(($(date +%s) - t0))
			echo "==> step $step FAILED after ${seconds}s"
			times+=("$step ${seconds}s (failed)")
			summary
			exit 1
		fi
		continue
	fi
	# Steps side by side, each with its own log; their times overlap.
	echo "==> steps ${group[*]} at the same time (logs in $logs/)"
	pids=()
	begun=$(date +%s)
	for step in "${group[@]}"; do
		$make_cmd --no-print-directory "$step" >"$logs/$step.log" 2>&1 &
		pids+=("$!")
	done
	failed=""
	reported=()
	while [ "${#reported[@]}" -lt "${#group[@]}" ]; do
		sleep 2
		# Each step is reported as soon as it ends, whichever ends first.
		for i in "${!group[@]}"; do
			step=${group[$i]}
			case " ${reported[*]-} " in *" $step "*) continue ;; esac
			if kill -0 "${pids[$i]}" 2>/dev/null; then continue; fi
			status=0
			wait "${pids[$i]}" || status=$?
			seconds=$(($(date +%s) - begun))
			reported+=("$step")
			others=""
			for other in "${group[@]}"; do [ "$other" = "$step" ] || others="$others $other"; done
			echo "---- $step: its output ($logs/$step.log) ----"
			cat "$logs/$step.log"
			if [ "$status" -eq 0 ]; then
				echo "==> step $step passed in ${seconds}s (beside${others})"
				times+=("$step ${seconds}s (beside${others})")
			else
				echo "==> step $step FAILED after ${seconds}s (beside${others})"
				times+=("$step ${seconds}s (failed)")
				failed="$failed $step"
			fi
		done
	done
	pids=()
	if [ -n "$failed" ]; then
		summary
		exit 1
	fi
done
summary
echo "==> $* passed in $(($(date +%s) - started))s"

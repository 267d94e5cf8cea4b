#!/usr/bin/env bash
# `make demo`: the whole system end to end on this machine (demo/src/main.rs): moto, the
# production template, both Lambdas under cargo lambda watch, an incident, a reconciled report.
# Exits 0 only when every order was delivered exactly once or parked with a reason, none lost.
# Needs the Rust toolchain and `make setup` (moto, cargo-lambda in .venv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ ! -x .venv/bin/python ] || [ ! -x .venv/bin/cargo-lambda ]; then
    echo "demo: .venv is missing moto or cargo-lambda: run 'make setup' first" >&2
    exit 2
fi
export PATH="$PWD/.venv/bin:$PATH"

# One build for the demo and both Lambdas, with the arguments that the harness's Lambda build
# uses (tests/src/lambda_watch.rs, BUILD_ARGS): the whole workspace and its examples, so cargo
# resolves features as `cargo test --workspace` in make test does. The dependency
# graph is then compiled once, on a fresh clone, whether `make demo` or `make test` runs first;
# `cargo run -p redrive-tests` would build a second variant of it (2 min 48 s).
demo_bin=$(
    cargo build --workspace --examples --bin demo --bin redriver --bin consumer --bin redrive-workflow \
        --message-format json-render-diagnostics |
        .venv/bin/python -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "demo" and m.get("executable"):
        print(m["executable"])
'
)
if [ -z "$demo_bin" ]; then
    echo "demo: cargo build reported no demo executable" >&2
    exit 1
fi

# moto's CloudFormation warns for every alarm it skips; the demo creates them through the API
# and says so. Everything else on stderr (errors) goes through.
status=0
"$demo_bin" "$@" 2> >(
    grep --line-buffered -v -E \
        '^No Moto CloudFormation support for AWS::CloudWatch::Alarm$|UserWarning: Tried to parse AWS::CloudWatch::Alarm|^ +parse_resource\(resource_json, resources_map\)$' >&2
) || status=$?
# Let the filter print what it still holds before the shell exits ($! is the filter's pid
# from bash 5.1 on; older shells skip this).
wait "${!:-}" 2>/dev/null || true
exit "$status"

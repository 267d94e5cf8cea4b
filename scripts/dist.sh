#!/usr/bin/env bash
# make dist: versioned release artifacts in DIST_DIR/redrive-VERSION/, to deploy without a Rust
# toolchain (README, "Deploy from the release artifacts"):
#   redrive-VERSION-FUNCTION-ARCH.zip   each function deploy uploads, `bootstrap` inside
#   redrive-cli-VERSION-linux-ARCH.tar.gz   the operator CLI, `redrive` inside
#   SHA256SUMS                          `sha256sum -c SHA256SUMS` checks them all
#   manifest.json                       what each was built from: commit, toolchain, profile, Cargo.lock
#   redrive-attach.template.json        attach mode as one CloudFormation stack, functions included
#                                       (infra/standalone_template.py; infra/README.md, "One template")
# For each architecture of DIST_ARCHS (default: x86_64 arm64) it runs deploy's own build step
# (infra/lib.sh, build_lambdas, which builds the CLI with the functions), with BUILD_PROFILE (default release). An
# architecture whose Rust target cannot be installed here is skipped and said, in the output and
# in the manifest. The packing is deterministic (entries sorted, every timestamp the commit's
# time, fixed modes and owners), so the same binaries always give the same bytes and sums.
set -euo pipefail

# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../infra/lib.sh"

DIST_ARCHS=${DIST_ARCHS:-x86_64 arm64}
BUILD_PROFILE=${BUILD_PROFILE:-release}
DIST_DIR=${DIST_DIR:-$REPO_DIR/dist}
need_match BUILD_PROFILE '^[A-Za-z][A-Za-z0-9_-]*$' "a cargo profile of the workspace's Cargo.toml: release (the default) or quick"
for arch in $DIST_ARCHS; do
    [[ $arch =~ ^(x86_64|arm64)$ ]] || die "DIST_ARCHS='$DIST_ARCHS' is invalid: each must be x86_64 or arm64" \
        "Set it on the command line, e.g. make dist DIST_ARCHS=x86_64."
done
[ -n "${DIST_ARCHS// /}" ] || die "DIST_ARCHS is empty: name x86_64, arm64 or both."
# The project venv (make setup-tools) holds cargo-lambda and zig.
if [ -d "$REPO_DIR/.venv/bin" ]; then PATH="$REPO_DIR/.venv/bin:$PATH"; fi
export PATH
find_cargo_lambda
PYTHON=${PYTHON:-$REPO_DIR/.venv/bin/python}

cd "$REPO_DIR"
VERSION=$(cargo metadata --no-deps --format-version 1 | "$PYTHON" -c \
    'import json, sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "redrive-cli"))')
COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
DIRTY=false
if [ "$COMMIT" != unknown ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then DIRTY=true; fi
# The packing's timestamps (dist_pack.py): given to the packer alone, not exported to the build,
# whose environment must be deploy's. Some build scripts (aws-lc-sys) rerun when
# SOURCE_DATE_EPOCH changes: exported, it made make dist after make deploy, and each deploy
# after make dist, compile aws-lc and everything above it again.
PACK_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315532800)}
OUT=$DIST_DIR/redrive-$VERSION
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
rm -rf "$OUT"
mkdir -p "$OUT"

triple() { if [ "$1" = x86_64 ]; then echo x86_64-unknown-linux-gnu; else echo aarch64-unknown-linux-gnu; fi; }

built=()
skipped=()
for arch in $DIST_ARCHS; do
    target=$(triple "$arch")
    if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$target"; then
        say "adding the Rust target $target (rustup target add)"
        if ! rustup target add "$target" >&2; then
            say "SKIPPED $arch: the Rust target $target cannot be installed here (rustup target add $target failed)"
            skipped+=("$arch=rustup target add $target failed")
            continue
        fi
    fi
    # Deploy's own build step: the functions are the binaries make deploy uploads, the CLI
    # built with them.
    export LAMBDA_ARCH=$arch
    build_lambdas "$WORK/$arch"
    built+=("$arch")
done
[ ${#built[@]} -gt 0 ] || die "no architecture could be built (${skipped[*]})."
built_args=()
for arch in "${built[@]}"; do built_args+=(--built "$arch=$WORK/$arch"); done

# The standalone template, its parameter Version defaulting to this release's.
"$PYTHON" "$REPO_DIR/infra/standalone_template.py" "$OUT/redrive-attach.template.json" --version "$VERSION"
SOURCE_DATE_EPOCH=$PACK_EPOCH "$PYTHON" "$REPO_DIR/scripts/dist_pack.py" --out "$OUT" --version "$VERSION" --commit "$COMMIT" \
    --dirty "$DIRTY" --profile "$BUILD_PROFILE" --rustc "$(rustc -V)" \
    --cargo-lambda "$("$CARGO_LAMBDA" lambda --version 2>/dev/null || "$CARGO_LAMBDA" --version)" \
    --skipped "$(IFS=';' && echo "${skipped[*]-}")" "${built_args[@]}"
say "release artifacts of redrive $VERSION ($COMMIT$([ "$DIRTY" = true ] && echo ', uncommitted changes')) in $OUT:"
(cd "$OUT" && ls -l >&2 && sha256sum -c --quiet SHA256SUMS >&2)
if [ ${#skipped[@]} -gt 0 ]; then say "not built: ${skipped[*]}"; fi

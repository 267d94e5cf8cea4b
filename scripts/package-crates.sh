#!/usr/bin/env bash
# `cargo package` of the published crates, verified: each .crate is unpacked and built on its own,
# redrive-consumer against the packaged redrive-shared (see `make test-crates`).
#
# Cargo serves the just-packaged redrive-shared to that build from a local registry, unpacks it
# into CARGO_HOME under a name made from the clone's path, and treats what it unpacked and built
# from a registry as immutable for a version number. The version does not change between commits,
# so a second run (or a second clone at the same path, as CI makes them) would build
# redrive-consumer against the first run's redrive-shared. Those copies are removed first: only
# redrive's own crates, only from path registries (never crates.io's), and only their build
# outputs whose sources were such a copy.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

home=${CARGO_HOME:-$HOME/.cargo}
rm -rf "$home"/registry/src/-*/redrive-* "$home"/registry/cache/-*/redrive-*

target=${CARGO_TARGET_DIR:-target}
for dep_info in "$target"/debug/deps/redrive_*.d; do
    [[ -e $dep_info ]] || continue
    grep -q "/registry/src/" "$dep_info" || continue
    name=${dep_info##*/}
    name=${name%.d}
    hash=${name##*-}
    crate=${name%-*}
    rm -rf "$target"/debug/deps/*"${crate}-${hash}".* \
        "$target/debug/.fingerprint/${crate//_/-}-${hash}"
done

# The verification compiles each unpacked crate and all its dependencies on their own (a build
# outside the workspace: none of target/debug is reused), under the default dev profile. Debug
# info is all that profile adds that a verify does not need: without it the build is the same
# compile and link, in about half the time (cold, beside the infra tests: 127 s against 278 s).
cargo package -p redrive-shared -p redrive-consumer --allow-dirty --offline --config 'profile.dev.debug=false'

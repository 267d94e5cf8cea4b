#!/usr/bin/env bash
# Counts the tests a `make test` log shows run: the summary line of every cargo test binary and
# doctest run ("test result: ok. 80 passed; 0 failed; 2 ignored; ...") and of the infra tests
# ("infra: 155 passed, 0 failed, 0 skipped"). Prints one line, e.g.
#
#   ==> tests run: cargo 1203 passed (2 ignored) in 41 runs; infra 155 passed (0 skipped)
#
# Usage: scripts/count-tests.sh LOG  (.ci/run passes target/ci-run.log)
set -euo pipefail

log=${1:?usage: scripts/count-tests.sh LOG}
awk '
    /^test result: / {
        runs++
        for (i = 1; i < NF; i++) {
            if ($(i + 1) ~ /^passed;/) passed += $i
            if ($(i + 1) ~ /^failed;/) failed += $i
            if ($(i + 1) ~ /^ignored;/) ignored += $i
        }
    }
    /^infra: [0-9]+ passed, / {
        infra_passed += $2
        infra_failed += $4
        infra_skipped += $6
    }
    END {
        printf "==> tests run: cargo %d passed (%d failed, %d ignored) in %d runs; infra %d passed (%d failed, %d skipped)\n",
            passed, failed, ignored, runs, infra_passed, infra_failed, infra_skipped
    }
' "$log"

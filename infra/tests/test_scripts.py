"""The shell scripts themselves: shellcheck, and the one bash 3.2 pitfall shellcheck misses.

macOS ships bash 3.2, where expanding an empty array as "${arr[@]}" (or "$@" with no
arguments) under `set -u` stops the script with "unbound variable"; bash 4.4 and later accept
it, so a Linux run never shows it. The scripts use the form that works in every bash,
${arr[@]+"${arr[@]}"}, and this test rejects the other one. The empty guard list, the case that
broke on macOS, is deployed in test_deploy_script.py.
"""

from __future__ import annotations

import re
import unittest

import support

SCRIPTS = sorted(support.INFRA.glob("*.sh"))
# "${name[@]}" or "$@" not preceded by the `+` of ${name[@]+...} / ${@+...}
UNSAFE_EXPANSION = re.compile(r'(?<!\+)"\$(\{[A-Za-z_][A-Za-z0-9_]*\[@\]\}|@|\{@\})"')


def unsafe_expansions(text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        found.extend(f"{number}: {line.strip()}" for _ in UNSAFE_EXPANSION.finditer(line))
    return found


class Scripts(unittest.TestCase):
    def test_issue12_the_rule_rejects_what_bash_3_2_cannot_run(self):
        self.assertTrue(unsafe_expansions('for name in "${guard_names[@]}"; do'))
        self.assertTrue(unsafe_expansions('    for line in "$@"; do'))
        self.assertFalse(unsafe_expansions('for name in ${guard_names[@]+"${guard_names[@]}"}; do'))
        self.assertFalse(unsafe_expansions('for line in ${@+"$@"}; do'))

    def test_issue12_no_script_expands_a_possibly_empty_array_unsafely_for_bash_3_2(self):
        self.assertTrue(SCRIPTS)
        for script in SCRIPTS:
            with self.subTest(script=script.name):
                self.assertEqual(unsafe_expansions(script.read_text(encoding="utf-8")), [])

    def test_issue12_scripts_are_shellcheck_clean(self):
        result = support.run([support.tool("shellcheck"), "-x", *map(str, SCRIPTS)], env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_issue12_make_rollback_runs_the_rollback_script(self):
        makefile = (support.INFRA / "Makefile.inc").read_text(encoding="utf-8")
        self.assertIn("rollback: setup\n\tinfra/rollback.sh", makefile)
        self.assertIn("shellcheck -x infra/deploy.sh infra/destroy.sh infra/rollback.sh infra/lib.sh", makefile)


if __name__ == "__main__":
    unittest.main()

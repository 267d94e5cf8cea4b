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
    def test_the_rule_rejects_what_bash_3_2_cannot_run(self):
        self.assertTrue(unsafe_expansions('for name in "${guard_names[@]}"; do'))
        self.assertTrue(unsafe_expansions('    for line in "$@"; do'))
        self.assertFalse(unsafe_expansions('for name in ${guard_names[@]+"${guard_names[@]}"}; do'))
        self.assertFalse(unsafe_expansions('for line in ${@+"$@"}; do'))

    def test_no_script_expands_a_possibly_empty_array_unsafely_for_bash_3_2(self):
        self.assertTrue(SCRIPTS)
        for script in SCRIPTS:
            with self.subTest(script=script.name):
                self.assertEqual(unsafe_expansions(script.read_text(encoding="utf-8")), [])

    def test_scripts_are_shellcheck_clean(self):
        result = support.run([support.tool("shellcheck"), "-x", *map(str, SCRIPTS)], env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_make_rollback_runs_the_rollback_script(self):
        makefile = (support.INFRA / "Makefile.inc").read_text(encoding="utf-8")
        self.assertIn("rollback: setup-tools\n\tinfra/rollback.sh", makefile)
        self.assertIn("shellcheck -x infra/deploy.sh infra/destroy.sh infra/rollback.sh infra/lib.sh", makefile)


if __name__ == "__main__":
    unittest.main()


# ---------------------------------------------------------------- invocations by hand
# Every documented `aws lambda invoke` of a deployed function: where it appears, and the
# redrive.env setting that holds that function's timeout.
INVOKE_DOCS = [support.REPO / "README.md", *sorted((support.REPO / "docs").glob("*.md")), support.INFRA / "README.md",
               *SCRIPTS]
FUNCTION_TIMEOUTS = {"redriver": "REDRIVER_TIMEOUT_SECONDS", "archiver": "ARCHIVER_TIMEOUT_SECONDS",
                     "workflow-tasks": "WORKFLOW_TIMEOUT_SECONDS", "consumer": "CONSUMER_TIMEOUT_SECONDS"}


def documented_invocations() -> list[tuple[str, str]]:
    """(file, command) for each `aws lambda invoke`, its continuation lines joined."""
    found = []
    for path in INVOKE_DOCS:
        text = path.read_text(encoding="utf-8").replace("\\\n", " ")
        for match in re.finditer(r"aws lambda invoke[^\n`]*", text):
            found.append((path.name, match.group(0)))
    return found


def settings() -> dict:
    return dict(line.split("=", 1) for line in (support.INFRA / "redrive.env").read_text(encoding="utf-8").splitlines()
                if line and not line.startswith("#"))


class InvocationsByHand(unittest.TestCase):
    def test_documented_invocations_run_live_and_outwait_the_function(self):
        invocations = documented_invocations()
        self.assertGreaterEqual(len(invocations), 3, "the re-driver's ad-hoc drain (docs/redriver.md) and the archiver's")
        config = settings()
        for where, command in invocations:
            with self.subTest(where=where, command=command):
                name = re.search(r"--function-name\s+(\S+)", command).group(1)
                # The version make deploy published and make rollback chose, never $LATEST.
                self.assertTrue(name.endswith(":live") or re.search(r"--qualifier\s+live\b", command), command)
                self.assertNotIn("$LATEST", command)
                # The CLI's 60 s default read timeout sends a longer run a second time.
                function = next(f for f in FUNCTION_TIMEOUTS if name.split(":")[0].endswith(f"-{f}"))
                read = re.search(r"--cli-read-timeout\s+(\d+)", command)
                self.assertIsNotNone(read, command)
                self.assertGreater(int(read.group(1)), int(config[FUNCTION_TIMEOUTS[function]]), command)
                self.assertRegex(command, r"--cli-connect-timeout\s+\d+")

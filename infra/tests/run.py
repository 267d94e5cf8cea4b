"""Runs every infra test (python infra/tests/run.py [-k PATTERN]) and ends with one summary line,
'infra: N passed, N failed, N skipped'. Exit status 1 on any failure or error."""

from __future__ import annotations

import sys
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the work tree


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(HERE))
    loader = unittest.TestLoader()
    if "-k" in argv:
        loader.testNamePatterns = [f"*{argv[argv.index('-k') + 1]}*"]
    suite = loader.discover(str(HERE), pattern="test_*.py", top_level_dir=str(HERE))
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    passed = result.testsRun - failed - skipped
    print(f"infra: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and result.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

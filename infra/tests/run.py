"""Runs every infra test (python infra/tests/run.py [-k PATTERN] [-j JOBS]) and ends with one
summary line, 'infra: N passed, N failed, N skipped'. Exit status 1 on any failure or error.

The test classes run in JOBS processes at a time (default 2, or INFRA_TEST_JOBS): most of their
time is spent waiting on moto, on deploy.sh's AWS CLI calls or on cfn-lint, and each class
starts its own moto on a free port, so none shares state with another. Each class's output is
printed whole when it ends, with its time; `-j 1` runs them one after the other, in this process.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # no __pycache__ in the work tree

# The classes that take longest start first, so that the last one to end is not a long one
# started late: the deploy tests (every test a real `make deploy`, 30 to 90 s of AWS CLI calls
# and uploads each), longest first, then the rest in discovery order. Each class's output is
# printed when it ends, whichever ends first.
SLOW_FIRST = (
    "test_deploy_script.DeployScript",
    "test_attach_deploy.AttachDeploy",
    "test_workflow_infra.DeployStepFunctions",
    "test_change_sets.ChangeSetDeploy",
    "test_dist.DeployFromArtifacts",
    "test_dist.Dist",
    "test_workflow_infra",
    "test_stack_in_moto.StackInMoto",
    "test_guard",
)


# Classes whose tests are independent of each other (each deploys stacks of its own) and whose
# setUpClass is cheap (a moto of its own), split into that many parts that run as classes do:
# parts of some 3 to 5 minutes, so that the two processes end about together.
SPLIT = {"test_deploy_script.DeployScript": 3, "test_attach_deploy.AttachDeploy": 2}


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def load(argv: list[str], names: list[str] | None = None) -> unittest.TestSuite:
    sys.path.insert(0, str(HERE))
    loader = unittest.TestLoader()
    pattern = option(argv, "-k")
    if pattern is not None:
        loader.testNamePatterns = [f"*{pattern}*"]
    if names:
        return loader.loadTestsFromNames(names)
    return loader.discover(str(HERE), pattern="test_*.py", top_level_dir=str(HERE))


def classes(suite: unittest.TestSuite) -> tuple[list[str], unittest.TestSuite]:
    """What each process runs: 'module.Class' of every class with at least one selected test
    (or, for a class of SPLIT, each part's 'module.Class.test,...'), slow ones first; and the
    loader's own failures (a module that does not import), which run in this process."""
    found: dict[str, list[str]] = {}
    broken = unittest.TestSuite()

    def walk(item) -> None:
        if isinstance(item, unittest.TestSuite):
            for child in item:
                walk(child)
        elif type(item).__module__.startswith("unittest"):
            broken.addTest(item)
        elif isinstance(item, unittest.TestCase):
            name = f"{type(item).__module__}.{type(item).__qualname__}"
            found.setdefault(name, []).append(f"{name}.{item._testMethodName}")

    walk(suite)

    def rank(name: str) -> int:
        for i, prefix in enumerate(SLOW_FIRST):
            if name == prefix or name.startswith(prefix + "."):
                return i
        return len(SLOW_FIRST)

    units: list[str] = []
    for name in sorted(found, key=rank):  # stable: discovery order within a rank
        parts = min(SPLIT.get(name, 1), len(found[name]))
        if parts <= 1:
            units.append(name)
        else:
            units += [",".join(found[name][i::parts]) for i in range(parts)]
    return units, broken


class TimedResult(unittest.TextTestResult):
    """A text result that also keeps each test's time, so that a slow test is seen the day it
    lands (printed, slowest first, after the class's summary)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.times: list[tuple[float, str]] = []
        self._started = 0.0

    def startTest(self, test) -> None:
        self._started = time.monotonic()
        super().startTest(test)

    def stopTest(self, test) -> None:
        self.times.append((time.monotonic() - self._started, test.id()))
        super().stopTest(test)


def run_here(suite: unittest.TestSuite) -> tuple[int, int, int]:
    """(passed, failed, skipped) of the suite run in this process."""
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout, resultclass=TimedResult).run(suite)
    for seconds, test in sorted(result.times, reverse=True):
        if seconds >= 1:
            print(f"infra-time: {seconds:6.1f}s {test}")
    sys.stdout.flush()
    failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
    skipped = len(result.skipped)
    return result.testsRun - failed - skipped, failed, skipped


def run_class(name: str, argv: list[str]) -> tuple[str, float, str, tuple[int, int, int] | None]:
    """Runs one class in a child process: (name, seconds, its output, its counts or None)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--class", name]
    if option(argv, "-k") is not None:
        command += ["-k", option(argv, "-k")]
    started = time.monotonic()
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as out:
        status = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
        out.seek(0)
        text = out.read()
    counts = None
    for line in reversed(text.splitlines()):
        if line.startswith("infra-class: "):
            counts = tuple(int(n) for n in line.split()[1:4])
            break
    if counts is None or (status != 0 and counts[1] == 0):
        counts = None  # the child died or failed outside a test (an import, setUpClass)
    return name, time.monotonic() - started, text, counts


def main(argv: list[str]) -> int:
    name = option(argv, "--class")
    if name is not None:  # a child: one class, or a part of one
        passed, failed, skipped = run_here(load(argv, name.split(",")))
        print(f"infra-class: {passed} {failed} {skipped}")
        return 0 if failed == 0 else 1

    jobs = int(option(argv, "-j") or os.environ.get("INFRA_TEST_JOBS") or 2)
    suite = load(argv)
    if jobs <= 1:
        passed, failed, skipped = run_here(suite)
    else:
        passed = failed = skipped = 0
        started = time.monotonic()
        names, broken = classes(suite)
        if broken.countTestCases():
            passed, failed, skipped = run_here(broken)
        # What the classes build once per run (the functions, a release: support.made_once),
        # shared by their processes.
        shared = tempfile.mkdtemp(prefix="redrive-infra-tests-")
        os.environ["REDRIVE_TEST_SHARED"] = shared
        try:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                running = [pool.submit(run_class, n, argv) for n in names]
                for done in as_completed(running):
                    name, seconds, text, counts = done.result()
                    if "," in name:
                        name = f"{name.split(',')[0].rsplit('.', 1)[0]} (a part: {name.count(',') + 1} tests)"
                    print(f"---- {name} ({seconds:.0f}s)", flush=True)
                    sys.stdout.write(text)
                    if counts is None:
                        print(f"{name}: the class's process failed outside its tests (see above)")
                        failed += 1
                    else:
                        passed, failed, skipped = passed + counts[0], failed + counts[1], skipped + counts[2]
        finally:
            shutil.rmtree(shared, ignore_errors=True)
        print(f"{len(names)} classes and parts in {jobs} processes: {time.monotonic() - started:.0f}s")
    print(f"infra: {passed} passed, {failed} failed, {skipped} skipped")
    return 0 if failed == 0 and passed + skipped > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

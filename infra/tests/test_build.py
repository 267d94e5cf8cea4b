"""make deploy's build step as a user's defaults run it (release, arm64), checked against the
workspace without building: every binary it names is a binary target of the workspace whose
required features the command turns on, and every function deploy uploads is one it builds.
The real build itself runs in every deploy test (support.build_functions, x86_64, quick)."""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import subprocess
import unittest
from pathlib import Path

import support


def build_command(**settings: str) -> list[str]:
    """The cargo-lambda command line `make build` runs, from a stand-in that prints it."""
    work = support.scratch_dir("redrive-build-cmd-")
    stub = work / "cargo-lambda"
    stub.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$CAPTURE"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k not in support.config_keys()}
    env.update(CARGO_LAMBDA=str(stub), CAPTURE=str(work / "args"), LAMBDA_DIR=str(work / "lambda"), **settings)
    result = subprocess.run(["make", "--no-print-directory", "build"], cwd=support.REPO, env=env,
                            capture_output=True, text=True, check=False)
    if result.returncode != 0 and not (work / "args").exists():
        raise AssertionError(result.stderr)
    return (work / "args").read_text().split("\n")[:-1]


class BuildStep(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps"], cwd=support.REPO,
                             capture_output=True, text=True, check=True)
        cls.metadata = json.loads(out.stdout)
        cls.bins = {t["name"]: (p["name"], t.get("required-features", []))
                    for p in cls.metadata["packages"] for t in p["targets"] if "bin" in t["kind"]}
        cls.features = {p["name"]: set(p["features"]) for p in cls.metadata["packages"]}

    def test_the_defaults_build_release_for_arm64(self):
        args = build_command()
        self.assertEqual(args[:5], ["lambda", "build", "--profile", "release", "--arm64"])

    def test_every_binary_exists_with_its_required_features_turned_on(self):
        args = build_command()
        named = [args[i + 1] for i, a in enumerate(args) if a == "--bin"]
        features = {f for i, a in enumerate(args) if a == "--features" for f in args[i + 1].split(",")}
        # The functions, and the operator CLI that make dist packs beside them.
        self.assertEqual(sorted(named), sorted(["redriver", "archiver", "consumer", "redrive-workflow",
                                                "triage-widget", "triage-action", "redrive"]))
        for binary in named:
            self.assertIn(binary, self.bins, f"no binary target {binary} in the workspace")
            package, required = self.bins[binary]
            for feature in required:
                # A default feature is on; any other must be named.
                self.assertTrue(feature in self.default_features(package) or f"{package}/{feature}" in features,
                                f"{binary} needs {package}/{feature}: {args}")
        for feature in features:
            package, _, name = feature.partition("/")
            self.assertIn(name, self.features.get(package, set()), f"no feature {feature}")

    def default_features(self, package: str) -> set[str]:
        declared = next(p for p in self.metadata["packages"] if p["name"] == package)["features"]
        return set(declared.get("default", []))

    def test_the_settings_choose_the_profile_and_the_architecture(self):
        args = build_command(BUILD_PROFILE="quick", LAMBDA_ARCH="x86_64")
        self.assertEqual(args[2:5], ["--profile", "quick", "--x86-64"])
        self.assertIn("quick", self.metadata_profiles())

    def metadata_profiles(self) -> set[str]:
        text = (support.REPO / "Cargo.toml").read_text(encoding="utf-8")
        return set(re.findall(r"^\[profile\.([A-Za-z0-9_-]+)\]", text, re.M))

    def test_every_function_deploy_uploads_is_one_the_build_makes(self):
        deploy = (support.INFRA / "deploy.sh").read_text(encoding="utf-8")
        uploaded = set(re.findall(r"deploy_function ([a-z-]+) ", deploy))
        self.assertEqual(uploaded, {"redriver", "consumer", "archiver", "redrive-workflow",
                                    "triage-widget", "triage-action"})
        args = build_command()
        built = {args[i + 1] for i, a in enumerate(args) if a == "--bin"}
        self.assertEqual(built, uploaded | {"redrive"})

    def test_an_unknown_architecture_or_profile_is_named(self):
        env = {k: v for k, v in os.environ.items() if k not in support.config_keys()}
        for key, value, phrase in (("LAMBDA_ARCH", "sparc", "LAMBDA_ARCH='sparc' is invalid"),
                                   ("BUILD_PROFILE", "fast build", "BUILD_PROFILE='fast build' is invalid")):
            result = subprocess.run(["make", "--no-print-directory", "build"], cwd=support.REPO,
                                    env={**env, key: value, "CARGO_LAMBDA": "/bin/false"},
                                    capture_output=True, text=True, check=False)
            self.assertNotEqual(result.returncode, 0)
            self.assertIn(phrase, result.stderr, shlex.join([key, value]))


if __name__ == "__main__":
    unittest.main()

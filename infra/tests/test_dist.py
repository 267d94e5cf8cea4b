"""`make dist` as a user runs it, with the tests' build settings (x86_64, quick; the default is
release for x86_64 and arm64): the real build, the real packing, checked as a user checks a
release (`sha256sum -c`, unzip, run the CLI), twice to show the packing gives the same bytes."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import unittest
import zipfile
from pathlib import Path

import support

FUNCTIONS = ("redriver", "archiver", "consumer", "redrive-workflow", "triage-widget", "triage-action")


def make_dist(out: Path, **settings: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in support.config_keys()}
    env.update(DIST_ARCHS="x86_64", BUILD_PROFILE=support.BUILD_SETTINGS["BUILD_PROFILE"], DIST_DIR=str(out))
    env.update(settings)
    return subprocess.run(["make", "--no-print-directory", "dist"], cwd=support.REPO, env=env,
                          capture_output=True, text=True, timeout=support.BUILD_TIMEOUT_SECONDS, check=False)


def version() -> str:
    out = subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=support.REPO,
                         capture_output=True, text=True, check=True).stdout
    return next(p["version"] for p in json.loads(out)["packages"] if p["name"] == "redrive-cli")


def release(name: str = "first") -> Path:
    """The release directory of one `make dist` run (each name runs once per test run: the
    classes here read the same "first" release)."""

    def make(out: Path) -> None:
        result = make_dist(out)
        if result.returncode != 0:
            raise AssertionError(f"make dist failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")

    return support.made_once(f"dist-{name}", make) / f"redrive-{version()}"


def without_rust(path: str) -> str:
    """PATH without any directory holding cargo, rustc or rustup."""
    return os.pathsep.join(d for d in path.split(os.pathsep)
                           if d and not any((Path(d) / tool).exists() for tool in ("cargo", "rustc", "rustup")))


class Dist(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.version = version()
        cls.dir = release()
        cls.again = release("second")

    def test_make_dist_and_the_deploy_build_compile_nothing_after_each_other(self):
        # make dist runs deploy's build step in deploy's environment: after make build (as make
        # deploy runs it) it compiles nothing, nor does make build after it.
        env = dict(os.environ)
        env.update(support.BUILD_SETTINGS, LAMBDA_DIR=str(support.scratch_dir("redrive-lambda-")))

        def make_build() -> str:
            result = subprocess.run(["make", "--no-print-directory", "build"], cwd=support.REPO, env=env,
                                    capture_output=True, text=True, timeout=support.BUILD_TIMEOUT_SECONDS,
                                    check=False)
            self.assertEqual(result.returncode, 0, result.stderr[-3000:])
            return result.stdout + result.stderr

        make_build()
        dist = make_dist(support.scratch_dir("redrive-dist-"))
        self.assertEqual(dist.returncode, 0, dist.stderr[-3000:])
        self.assertNotIn("Compiling", dist.stdout + dist.stderr)
        self.assertNotIn("Compiling", make_build())

    def test_every_function_and_the_cli_with_sums_that_check(self):
        names = sorted(p.name for p in self.dir.iterdir())
        expected = sorted([f"redrive-{self.version}-{f}-x86_64.zip" for f in FUNCTIONS]
                          + [f"redrive-cli-{self.version}-linux-x86_64.tar.gz", "SHA256SUMS", "manifest.json",
                             "redrive-attach.template.json"])
        self.assertEqual(names, expected)
        check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=self.dir, capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertEqual(check.stdout.count(": OK"), len(expected) - 1, check.stdout)

    def test_each_zip_is_a_lambda_package_for_its_architecture(self):
        work = support.scratch_dir("redrive-unzip-")
        for function in FUNCTIONS:
            with zipfile.ZipFile(self.dir / f"redrive-{self.version}-{function}-x86_64.zip") as z:
                self.assertEqual(z.namelist(), ["bootstrap"], function)
                info = z.getinfo("bootstrap")
                self.assertEqual((info.external_attr >> 16) & 0o777, 0o755, function)
                z.extract("bootstrap", work / function)
            bootstrap = work / function / "bootstrap"
            self.assertEqual(support.elf_machine(bootstrap), "x86_64", function)
            self.assertGreater(bootstrap.stat().st_size, 5_000_000, function)

    def test_the_cli_archive_holds_a_redrive_that_runs(self):
        work = support.scratch_dir("redrive-cli-")
        with tarfile.open(self.dir / f"redrive-cli-{self.version}-linux-x86_64.tar.gz") as t:
            self.assertEqual(t.getnames(), ["redrive"])
            member = t.getmember("redrive")
            self.assertEqual((member.mode, member.uid, member.gid, member.uname), (0o755, 0, 0, ""))
            t.extractall(work, filter="data")
        run = subprocess.run([str(work / "redrive"), "--version"], capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(run.stdout.strip(), f"redrive {self.version}")

    def test_the_manifest_says_what_each_was_built_from(self):
        manifest = json.loads((self.dir / "manifest.json").read_text())
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=support.REPO, capture_output=True, text=True)
        self.assertEqual(manifest["commit"], head.stdout.strip())
        self.assertEqual(manifest["version"], self.version)
        self.assertEqual(manifest["profile"], "quick")
        self.assertTrue(manifest["rustc"].startswith("rustc "), manifest["rustc"])
        self.assertEqual(manifest["cargoLockSha256"],
                         hashlib.sha256((support.REPO / "Cargo.lock").read_bytes()).hexdigest())
        self.assertEqual(manifest["skipped"], [])
        # Each function, the CLI, and the standalone template.
        self.assertEqual(len(manifest["artifacts"]), len(FUNCTIONS) + 2)
        for artifact in manifest["artifacts"]:
            data = (self.dir / artifact["file"]).read_bytes()
            self.assertEqual(artifact["sha256"], hashlib.sha256(data).hexdigest(), artifact["file"])
            if artifact["kind"] == "cloudformation-template":
                self.assertEqual(artifact["file"], "redrive-attach.template.json")
            else:
                self.assertEqual(artifact["arch"], "x86_64")

    def test_a_second_dist_of_the_same_commit_gives_the_same_bytes(self):
        again = self.again
        self.assertNotEqual(again, self.dir)
        self.assertEqual((again / "SHA256SUMS").read_text(), (self.dir / "SHA256SUMS").read_text())
        for path in self.dir.iterdir():
            self.assertEqual((again / path.name).read_bytes(), path.read_bytes(), path.name)

    def test_an_unknown_architecture_is_named_and_nothing_is_built(self):
        out = support.scratch_dir("redrive-dist-")
        result = make_dist(out, DIST_ARCHS="x86_64 sparc")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("DIST_ARCHS='x86_64 sparc' is invalid: each must be x86_64 or arm64", result.stderr)
        self.assertEqual(list(out.iterdir()), [])


class DeployFromArtifacts(support.DeployTestCase):
    """`make deploy ARTIFACTS=DIR`: attach mode from a release, with no Rust toolchain on PATH."""

    def settings(self, stack: str, **extra: str) -> dict:
        env = support.script_env(self.moto, STACK_NAME=stack, LAMBDA_ARCH="x86_64",
                                 LAMBDA_DIR=str(self.lambda_dir), QUEUE_NAME_REUSE_WAIT_SECONDS="0", **extra)
        env["PATH"] = without_rust(env["PATH"])
        return env

    def user_dlq(self, stack: str) -> str:
        sqs = self.moto.client("sqs")
        dlq = sqs.create_queue(QueueName=f"{stack}-orders-dlq")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        sqs.create_queue(QueueName=f"{stack}-orders", Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 3})})
        return f"{stack}-orders-dlq"

    def test_attach_mode_deploys_the_release_with_no_rust_toolchain(self):
        stack = support.unique("rdr")
        env = self.settings(stack, PROTECT_DLQS=self.user_dlq(stack), ARTIFACTS=str(release()))
        self.assertIsNone(shutil.which("cargo", path=env["PATH"]))
        result = support.run(support.MAKE_DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(support.run, ["bash", str(support.INFRA / "destroy.sh")], env)
        self.assertIn("every file matches its SHA256SUMS; deploying its x86_64 functions, nothing is built",
                      result.stderr)
        self.assertNotIn("building the functions", result.stderr)
        support.assert_real_functions(self, self.moto, self.lambda_dir,
                                      {f"{stack}-redriver": "redriver", f"{stack}-archiver": "archiver",
                                       f"{stack}-triage-widget": "triage-widget",
                                       f"{stack}-triage-action": "triage-action"})
        # Configured as cargo lambda deploy configures a function, and published behind `live`.
        lam = self.moto.client("lambda")
        config = lam.get_function_configuration(FunctionName=f"{stack}-redriver")
        self.assertEqual((config["Runtime"], config["Handler"]), ("provided.al2023", "bootstrap"))
        outputs = {o["OutputKey"]: o["OutputValue"] for o in
                   self.moto.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]}
        # The fleet's list is read at init from the circuit table, where deploy wrote it.
        variables = config["Environment"]["Variables"]
        self.assertNotIn("DLQ_URLS", variables)
        self.assertEqual(variables["DLQ_LIST_TABLE"], outputs["CircuitTableName"])
        self.assertEqual(config["Role"], outputs["RedriverRoleArn"])
        self.assertRegex(lam.get_alias(FunctionName=f"{stack}-redriver", Name="live")["FunctionVersion"], r"^[0-9]+$")
        self.assertEqual(lam.list_tags(Resource=config["FunctionArn"])["Tags"]["redrive:stack"], stack)
        # A second deploy of the same release updates the functions in place.
        again = support.run(support.MAKE_DEPLOY, env)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertEqual(lam.get_function_configuration(FunctionName=f"{stack}-redriver")["Runtime"], "provided.al2023")
        # What was uploaded is the release's binary, byte for byte.
        manifest = json.loads((release() / "manifest.json").read_text())
        for function in ("redriver", "archiver"):
            want = next(a["binarySha256"] for a in manifest["artifacts"]
                        if a["binary"] == function and a["arch"] == "x86_64")
            got = hashlib.sha256((self.lambda_dir / function / "bootstrap").read_bytes()).hexdigest()
            self.assertEqual(got, want, function)

    def test_an_altered_release_is_refused_before_any_change(self):
        stack = support.unique("rdx")
        altered = support.scratch_dir("redrive-altered-") / "release"
        shutil.copytree(release(), altered)
        zip_path = next(altered.glob("redrive-*-redriver-x86_64.zip"))
        data = bytearray(zip_path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        zip_path.write_bytes(bytes(data))
        env = self.settings(stack, PROTECT_DLQS=self.user_dlq(stack), ARTIFACTS=str(altered))
        result = support.run(support.MAKE_DEPLOY, env)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn(f"{zip_path} does not match its SHA-256 in SHA256SUMS", result.stderr)
        self.assertIn("Nothing in AWS was changed.", result.stderr)
        stacks = self.moto.client("cloudformation").list_stacks()["StackSummaries"]
        self.assertEqual([s for s in stacks if s["StackName"].startswith(stack)], [])


if __name__ == "__main__":
    unittest.main()

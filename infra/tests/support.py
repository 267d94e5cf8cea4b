"""Shared by the infra tests: paths, a moto server on loopback, CloudFormation YAML, AWS env."""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest
import uuid
from pathlib import Path

import boto3

REPO = Path(__file__).resolve().parents[2]
INFRA = REPO / "infra"
TEMPLATES = INFRA / "templates"
RESOURCES_TEMPLATE = TEMPLATES / "resources.yaml"
WIRING_TEMPLATE = TEMPLATES / "wiring.yaml"
GUARD_RULES = INFRA / "policy" / "redrive.guard"
GUARD_TESTS = INFRA / "policy" / "redrive_tests.yaml"
REGION = "eu-west-1"

sys.path.insert(0, str(INFRA))
import cfn_yaml  # noqa: E402 - infra/cfn_yaml.py, shared with scripts/demo_stack.py


def venv_bin() -> Path:
    """The directory of the interpreter running the tests: the project venv's bin."""
    return Path(sys.executable).parent


def tool(name: str) -> str:
    """A command from the venv, else from PATH."""
    candidate = venv_bin() / name
    if candidate.exists():
        return str(candidate)
    found = shutil.which(name)
    if not found:
        raise AssertionError(f"{name} not found: run `make setup` (it installs the venv)")
    return found


def cfn_guard() -> str:
    """cfn-guard as `make test-infra` passes it (CFN_GUARD: where `make cfn-guard` installed it,
    once per machine), or an older clone's target/tools/bin, or PATH."""
    for candidate in (os.environ.get("CFN_GUARD"), str(REPO / "target/tools/bin/cfn-guard")):
        if candidate and Path(candidate).exists():
            return candidate
    found = shutil.which("cfn-guard")
    if not found:
        raise AssertionError(
            "cfn-guard not found: run `make cfn-guard` (cargo install cfn-guard, once per machine), or set CFN_GUARD"
        )
    return found


# ---------------------------------------------------------------- CloudFormation YAML
def load_template(path: Path) -> dict:
    """A template in the long JSON form (short-form tags such as !Ref expanded)."""
    return cfn_yaml.load(path)


def write_json(data: dict, directory: Path, name: str) -> Path:
    path = directory / name
    path.write_text(json.dumps(data, indent=1), encoding="utf-8")
    return path


# ---------------------------------------------------------------- moto
def _teach_moto_termination_protection() -> None:
    """moto 5.2.5 stores EnableTerminationProtection from CreateStack but has no
    UpdateTerminationProtection and deletes a protected stack anyway. Both added here, as AWS
    documents them, so that the scripts' protection on and off is exercised."""
    from moto.cloudformation.exceptions import ValidationError
    from moto.cloudformation.responses import CloudFormationResponse
    from moto.core.responses import ActionResult

    if getattr(CloudFormationResponse, "_redrive_termination_protection", False):
        return

    def update_termination_protection(self):
        stack = self.cloudformation_backend.get_stack(self._get_param("StackName"))
        stack.enable_termination_protection = str(self._get_param("EnableTerminationProtection")).lower() == "true"
        return ActionResult({"StackId": stack.stack_id})

    original_delete = CloudFormationResponse.delete_stack

    def delete_stack(self):
        name = self._get_param("StackName")
        try:
            stack = self.cloudformation_backend.get_stack(name)
        except Exception:  # noqa: BLE001 - moto's own answer for an unknown stack
            return original_delete(self)
        if stack.enable_termination_protection and stack.status != "DELETE_COMPLETE":
            raise ValidationError(message=f"Stack [{name}] cannot be deleted while TerminationProtection is enabled")
        return original_delete(self)

    CloudFormationResponse.update_termination_protection = update_termination_protection
    CloudFormationResponse.delete_stack = delete_stack
    CloudFormationResponse._redrive_termination_protection = True


def _teach_moto_change_sets() -> None:
    """moto 5.2.5 creates, describes, executes and deletes change sets, but two parts differ from
    AWS in ways the deploy path meets. Both made to behave as AWS documents them:
    - Executing a change set only updates the stack's resources: a CREATE change set's stack keeps
      the empty template it was made with (no outputs), and neither keeps the change set's
      parameters. Here a CREATE executes as CreateStack and an UPDATE as UpdateStack would.
    - A change of a parameter alone lists no change: AWS lists a Modify for each resource whose
      properties use it. Here a resource that refers to a changed parameter (Ref) is a Modify.
    moto never says whether a Modify replaces the resource (AWS's Replacement True, False or
    Conditional); the tests that need it answer with AWS's shape themselves."""
    from moto.cloudformation.models import Change, ChangeSet, CloudFormationBackend

    if getattr(CloudFormationBackend, "_redrive_change_sets", False):
        return

    def execute_change_set(self, change_set_name, stack_name=None):
        change_set = self.describe_change_set(change_set_name)
        stack = self.stacks[change_set.stack_id]
        if change_set.change_set_type == "CREATE":
            stack.template = change_set.template
            stack._parse_template()
            stack.parameters = change_set.parameters
            stack.cross_stack_resources = self.exports
            stack.resource_map = stack._create_resource_map()
            stack.output_map = stack._create_output_map()
            stack._add_stack_event("CREATE_IN_PROGRESS", resource_status_reason="User Initiated")
            stack.create_resources()
            self._validate_export_uniqueness(stack)
            for export in stack.exports:
                self.exports[export.name] = export
            stack.status = "CREATE_COMPLETE"
        else:
            stack.update(change_set.template, role_arn=change_set.role_arn,
                         parameters=change_set.parameters, tags=change_set.tags or None)
        change_set.execution_status = "EXECUTE_COMPLETE"

    def references(node) -> set[str]:
        """The names a resource refers to (Ref, and ${Name} in Fn::Sub)."""
        found = set()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "Ref" and isinstance(value, str):
                    found.add(value)
                elif key == "Fn::Sub":
                    text = value[0] if isinstance(value, list) else value
                    if isinstance(text, str):
                        found.update(re.findall(r"\$\{([^}!.]+)\}", text))
                    found |= references(value[1:] if isinstance(value, list) else [])
                else:
                    found |= references(value)
        elif isinstance(node, list):
            for item in node:
                found |= references(item)
        return found

    def diff(self):
        resource_map = self.stack.resource_map
        old = resource_map._resource_json_map
        new = self.template_dict.get("Resources", {})

        def same(a, b):  # moto stores a resource without Properties with empty ones
            return {"Properties": {}, **a} == {"Properties": {}, **b}

        parameters = self.parameters or {}
        changed = {p for p in parameters if resource_map.input_parameters.get(p) != parameters[p]}
        by_action = {
            "Add": [n for n in new if n not in old],
            "Modify": [n for n in new if n in old and (not same(new[n], old[n]) or references(new[n]) & changed)],
            "Remove": [n for n in old if n not in new],
        }
        changes = []
        for action, names in by_action.items():
            for name in names:
                source = old if action == "Remove" else new
                changes.append(Change(action=action, logical_resource_id=name, resource_type=source[name]["Type"]))
        return changes

    CloudFormationBackend.execute_change_set = execute_change_set
    ChangeSet.diff = diff
    CloudFormationBackend._redrive_change_sets = True


def _teach_moto_logging_config() -> None:
    """moto 5.2.5 drops a function's LoggingConfig: CreateFunction and UpdateFunctionConfiguration
    accept it, GetFunctionConfiguration never returns it, so deploy saw no log format and set
    JSON again at every deploy. Kept here as Lambda keeps it (LogFormat Text and the log group
    /aws/lambda/NAME unless set; an update changes the fields it names), so that deploy reads back
    the format it set and, as on AWS, sets it only where it is not JSON yet."""
    from moto.awslambda.models import LambdaFunction

    if getattr(LambdaFunction, "_redrive_logging_config", False):
        return

    original_init = LambdaFunction.__init__
    original_get = LambdaFunction.get_configuration
    original_update = LambdaFunction.update_configuration

    def __init__(self, account_id, spec, *args, **kwargs):
        original_init(self, account_id, spec, *args, **kwargs)
        self.logging_config = {"LogFormat": "Text", "LogGroup": f"/aws/lambda/{self.function_name}",
                               **(spec.get("LoggingConfig") or {})}

    def get_configuration(self, *args, **kwargs):
        config = original_get(self, *args, **kwargs)
        config["LoggingConfig"] = dict(self.logging_config)
        return config

    def update_configuration(self, config_updates):
        if config_updates.get("LoggingConfig"):
            self.logging_config = {**self.logging_config, **config_updates["LoggingConfig"]}
        return original_update(self, config_updates)

    LambdaFunction.__init__ = __init__
    LambdaFunction.get_configuration = get_configuration
    LambdaFunction.update_configuration = update_configuration
    LambdaFunction._redrive_logging_config = True


def _teach_moto_policy_text() -> None:
    """CloudFormation takes a managed policy's PolicyDocument as JSON text too (the standalone
    template writes the documents that grant by tag as Fn::Sub text: an IAM condition key holds
    no intrinsic function); moto 5.2.5 encodes that text as a JSON string again, which IAM's
    validation then refuses. Parsed here first, as CloudFormation passes the text to IAM."""
    from moto.iam.models import ManagedPolicy

    if getattr(ManagedPolicy, "_redrive_policy_text", False):
        return
    original = ManagedPolicy.create_from_cloudformation_json.__func__

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, *args, **kwargs):
        properties = cloudformation_json.get("Properties", {})
        if isinstance(properties.get("PolicyDocument"), str):
            properties = {**properties, "PolicyDocument": json.loads(properties["PolicyDocument"])}
            cloudformation_json = {**cloudformation_json, "Properties": properties}
        return original(cls, resource_name, cloudformation_json, *args, **kwargs)

    ManagedPolicy.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
    ManagedPolicy._redrive_policy_text = True


def _teach_moto_function_properties() -> None:
    """moto 5.2.5's CloudFormation creates an AWS::Lambda::Function with a few of its properties:
    Architectures, LoggingConfig and TracingConfig are dropped (x86_64, Text and PassThrough
    whatever the template says), and an environment variable from a Number parameter stays a
    number (Lambda holds strings only; the AWS SDKs, cargo-lambda's among them, refuse the
    number in GetFunction's answer), and ReservedConcurrentExecutions from a String parameter a
    string (CloudFormation passes the integer the property is). Kept here as Lambda keeps them, so that a template's
    functions read back as it declares them (after _teach_moto_logging_config, whose
    LoggingConfig this sets)."""
    from moto.awslambda.models import LambdaFunction

    if getattr(LambdaFunction, "_redrive_function_properties", False):
        return
    original = LambdaFunction.create_from_cloudformation_json.__func__

    def create_from_cloudformation_json(cls, resource_name, cloudformation_json, *args, **kwargs):
        function = original(cls, resource_name, cloudformation_json, *args, **kwargs)
        properties = cloudformation_json.get("Properties", {})
        function.environment_vars = {k: v if isinstance(v, str) else json.dumps(v)
                                     for k, v in (function.environment_vars or {}).items()}
        if function.reserved_concurrency is not None:
            function.reserved_concurrency = int(function.reserved_concurrency)
        if "Architectures" in properties:
            function.architectures = list(properties["Architectures"])
        if "TracingConfig" in properties:
            function.tracing_config = dict(properties["TracingConfig"])
        if "LoggingConfig" in properties:
            function.logging_config = {**getattr(function, "logging_config", {}), **properties["LoggingConfig"]}
        return function

    LambdaFunction.create_from_cloudformation_json = classmethod(create_from_cloudformation_json)
    LambdaFunction._redrive_function_properties = True


class Moto:
    """A moto server on 127.0.0.1 and a free port, in this process (its backends are ours)."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        _teach_moto_termination_protection()
        _teach_moto_change_sets()
        _teach_moto_logging_config()
        _teach_moto_policy_text()
        _teach_moto_function_properties()

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        # "No Moto CloudFormation support for AWS::CloudWatch::Alarm": known, see test_stack_in_moto.
        logging.getLogger("moto").setLevel(logging.ERROR)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"

    def stop(self) -> None:
        self._server.stop()

    def client(self, service: str):
        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def account_id(self) -> str:
        return self.client("sts").get_caller_identity()["Account"]

    def set_stack_status(self, stack_name: str, status: str) -> None:
        """Puts a stack into a state moto never reaches by itself (it does not roll back)."""
        from moto.cloudformation.models import cloudformation_backends

        backend = cloudformation_backends[self.account_id()][REGION]
        stacks = [s for s in backend.stacks.values() if s.name == stack_name]
        assert stacks, f"no stack {stack_name} in moto"
        for stack in stacks:
            stack.status = status


def unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


# Settings of infra/redrive.env: a developer's exported STACK_NAME or DRY_RUN must not leak
# into a test run.
def config_keys() -> list[str]:
    keys = []
    for line in (INFRA / "redrive.env").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#") and "=" in line:
            keys.append(line.split("=", 1)[0])
    return keys


def script_env(moto: Moto | None, **settings: str) -> dict:
    """Environment for infra/deploy.sh and destroy.sh: the emulator, test credentials, no
    instance metadata lookups (nothing leaves loopback), and only the given settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AWS_") and k not in config_keys() and k != "REDRIVE_CONFIG"
    }
    env["PATH"] = f"{venv_bin()}{os.pathsep}{env.get('PATH', '')}"
    env.update(
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        AWS_DEFAULT_REGION=REGION,
        AWS_MAX_ATTEMPTS="2",
    )
    if moto is not None:
        env.update(
            AWS_ENDPOINT_URL=moto.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
        )
    env.update(settings)
    return env


# A deploy takes 30 to 90 s alone; the first of a test class, started beside the other
# classes' builds and the rest of make test on 2 cores, took up to 250 s in CI. The ceiling
# catches a hang, not a slow machine.
RUN_TIMEOUT_SECONDS = 600


def run(cmd: list[str], env: dict, timeout: int = RUN_TIMEOUT_SECONDS) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False
    )


# What a test of the deploy path runs is what a user runs: `make deploy`, whose build step is
# the real `cargo lambda build` of the four functions, uploading those binaries. The settings a
# test may change are the documented build settings alone: x86_64 (this machine's own; arm64
# needs the aarch64 standard library) and the `quick` profile (a fat-LTO release build takes
# about 25 minutes on 2 cores).
BUILD_SETTINGS = {"LAMBDA_ARCH": "x86_64", "BUILD_PROFILE": "quick"}
MAKE_DEPLOY = ["make", "--no-print-directory", "deploy"]
MAKE_DESTROY = ["make", "--no-print-directory", "destroy"]
LAMBDA_BINARIES = ("redriver", "archiver", "consumer", "redrive-workflow")
# The first build of a fresh clone compiles every dependency for the Lambda target.
BUILD_TIMEOUT_SECONDS = 2400


def scratch_dir(prefix: str) -> Path:
    """A new directory under the system's temp folder, removed when this test process ends (the
    functions built, a release: some 250 MB each)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# run.py's directory shared by the processes of one test run (removed by run.py at its end).
SHARED_ENV = "REDRIVE_TEST_SHARED"
_once: dict[str, Path] = {}


def made_once(name: str, make) -> Path:
    """A directory that `make(directory)` fills once per test run: under run.py's SHARED_ENV
    directory, the first of its processes to ask makes it (under a lock; the others wait and read
    the same one); without it (a test module run by hand), once per process in a scratch dir.
    `make` raises on failure, and the next process to ask tries again."""
    if name in _once:
        return _once[name]
    shared = os.environ.get(SHARED_ENV)
    if not shared:
        path = scratch_dir(f"redrive-{name}-")
        make(path)
    else:
        import fcntl

        path, done = Path(shared) / name, Path(shared) / f"{name}.done"
        with open(Path(shared) / f"{name}.lock", "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir()
                make(path)
                done.touch()
    _once[name] = path
    return path


def _make_build(into: Path) -> None:
    env = dict(os.environ)
    env.update(BUILD_SETTINGS)
    env["LAMBDA_DIR"] = str(into)
    result = subprocess.run(
        ["make", "--no-print-directory", "build"], env=env, cwd=REPO, capture_output=True,
        text=True, timeout=BUILD_TIMEOUT_SECONDS, check=False,
    )
    if result.returncode != 0:
        raise AssertionError(f"make build failed:\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}")


def build_functions() -> Path:
    """`make build` with the tests' build settings, once per test run ([`made_once`]), into a
    LAMBDA_DIR of its own (returned): the dependencies compile here, so that every deploy after it
    runs the same build step in seconds (nothing left to compile)."""
    return made_once("build", _make_build)


def lambda_dir() -> Path:
    """An empty LAMBDA_DIR for one test class: make deploy's build step fills it."""
    return Path(tempfile.mkdtemp(prefix="redrive-lambda-"))


class TemplatesTestCase(unittest.TestCase):
    """A test class that reads the two templates as parsed YAML: `template` (resources.yaml),
    its `resources`, and `wiring` (wiring.yaml)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.template = load_template(RESOURCES_TEMPLATE)
        cls.resources = cls.template["Resources"]
        cls.wiring = load_template(WIRING_TEMPLATE)


class DeployTestCase(unittest.TestCase):
    """A test class that runs the real `make deploy`: the functions built once per test run
    ([`build_functions`]), a moto of its own, an empty LAMBDA_DIR of its own (both removed at
    the end)."""

    @classmethod
    def setUpClass(cls) -> None:
        build_functions()
        cls.moto = Moto()
        cls.lambda_dir = lambda_dir()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.moto.stop()
        shutil.rmtree(cls.lambda_dir, ignore_errors=True)

    def shim(self, name: str, body: str) -> tuple[str, Path]:
        """An executable stand-in `name` running the bash `body` (with STATE set to its own
        directory, removed at the test's end, where it may keep what it counts or logs); returns
        its path and that directory."""
        directory = Path(tempfile.mkdtemp(prefix="redrive-shim-"))
        self.addCleanup(shutil.rmtree, directory, True)
        path = directory / name
        path.write_text("#!/usr/bin/env bash\nset -u\nSTATE=" + str(directory) + "\n" + body, encoding="utf-8")
        path.chmod(0o755)
        return str(path), directory


def standalone_template(expanded: bool = False) -> dict:
    """infra/standalone_template.py's template as `make dist` writes it; `expanded`: its policy
    documents written as Fn::Sub text parsed back into documents, as cfn-guard reads them."""
    import standalone_template as standalone  # infra/standalone_template.py

    template = standalone.build(standalone.workspace_version())
    return standalone.expanded(template) if expanded else template


def elf_machine(path: Path) -> str | None:
    """'x86_64' or 'arm64' for a Linux executable, None for anything else."""
    head = path.read_bytes()[:20]
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    return {62: "x86_64", 183: "arm64"}.get(struct.unpack_from("<H", head, 18)[0])


def assert_real_functions(test, moto: "Moto", lambda_dir: Path, functions: dict[str, str]) -> None:
    """Each function {name: binary} runs the binary the build put in lambda_dir: an executable
    for the tests' architecture, megabytes large (a stand-in is a few bytes), uploaded whole."""
    lam = moto.client("lambda")
    for name, binary in functions.items():
        bootstrap = lambda_dir / binary / "bootstrap"
        test.assertEqual(elf_machine(bootstrap), BUILD_SETTINGS["LAMBDA_ARCH"], bootstrap)
        size = bootstrap.stat().st_size
        test.assertGreater(size, 5_000_000, f"{bootstrap} is {size} bytes: not a built function")
        config = lam.get_function_configuration(FunctionName=name)
        test.assertEqual(config["Architectures"], [BUILD_SETTINGS["LAMBDA_ARCH"]], name)
        # The zip of a multi-megabyte executable compresses to no less than a fifth of it.
        test.assertGreater(config["CodeSize"], size // 5, f"{name}: {config['CodeSize']} bytes uploaded")


def policy_document(raw) -> dict:
    """IAM policy documents as moto returns them: a dict, JSON text, or a Python repr."""
    if isinstance(raw, dict):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        import ast

        return ast.literal_eval(raw)


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


if __name__ == "__main__":
    # `python infra/tests/support.py build` (make test-infra-build): the deploy tests' build, ahead
    # of them, so that test-infra finds the dependencies for the Lambda target compiled. Cargo's
    # cache under target/ is what carries over; the LAMBDA_DIR it fills is removed.
    if sys.argv[1:] != ["build"]:
        sys.exit("usage: python infra/tests/support.py build")
    shutil.rmtree(build_functions())


class IamMotoTestCase(unittest.TestCase):
    """A moto of tests/moto_launcher.py, which authorizes every call as the IAM-enforced Lambda
    tests' does: users holding a role's policies as tests/iam_policy.py renders them."""

    @classmethod
    def setUpClass(cls) -> None:
        import boto3

        cls.launcher = subprocess.Popen([sys.executable, str(REPO / "tests" / "moto_launcher.py")],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        port = cls.launcher.stdout.readline().strip()
        cls.endpoint = f"http://127.0.0.1:{port}"
        cls.boto3 = boto3

    @classmethod
    def tearDownClass(cls) -> None:
        cls.launcher.stdin.close()
        cls.launcher.wait(timeout=30)

    def client(self, service: str, key: tuple[str, str] = ("testing", "testing")):
        return self.boto3.client(service, endpoint_url=self.endpoint, region_name="us-east-1",
                                 aws_access_key_id=key[0], aws_secret_access_key=key[1])

    def user(self, name: str, policies: dict) -> tuple[str, str]:
        iam = self.client("iam")
        iam.create_user(UserName=name)
        for policy_name, document in policies.items():
            iam.put_user_policy(UserName=name, PolicyName=policy_name, PolicyDocument=json.dumps(document))
        key = iam.create_access_key(UserName=name)["AccessKey"]
        return key["AccessKeyId"], key["SecretAccessKey"]

    def denied(self, call) -> bool:
        from botocore.exceptions import ClientError

        try:
            call()
        except ClientError as error:
            return "AccessDenied" in error.response["Error"]["Code"]
        return False

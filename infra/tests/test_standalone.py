"""The standalone template (infra/standalone_template.py; `make dist` writes it into the release as
redrive-attach.template.json): attach mode as one CloudFormation stack, functions included, for
the console, StackSets, Terraform and CDK.

- it validates (cfn-lint), stays within the quotas (infra/quotas.py) and under the 51,200 bytes
  the console takes as a file, and names no account id, region or partition;
- its functions get the environment make deploy gives them in attach mode (infra/lib.sh), the
  fleet by tag; its roles grant on the protected queues exactly as attach mode's do;
- deployed from the release with the AWS CLI and no Rust toolchain on PATH, on moto: the
  functions run the release's zips; `cargo lambda deploy` (and the AWS CLI) update a function's
  code afterwards, as infra/README.md documents.
(The Guard rules: test_guard.py, which checks this template beside make deploy's.)
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import shutil
import subprocess
import sys
import unittest
import zipfile
from pathlib import Path

import support
from test_dist import release, version, without_rust

import attach_template  # noqa: E402 - infra/, on the path through support
import quotas  # noqa: E402
import standalone_template  # noqa: E402

BINARIES = {"RedriverFunction": "redriver", "ArchiverFunction": "archiver",
            "TriageWidgetFunction": "triage-widget", "TriageActionFunction": "triage-action"}
TEMPLATE_FILE = "redrive-attach.template.json"


def protected_statements(document: dict, stack: str) -> list[dict]:
    """The statements of a role's policy document (as IAM holds it) that grant by this install's tag."""
    return [s for s in document["Statement"]
            if f"aws:ResourceTag/{attach_template.tag_key(stack)}" in json.dumps(s.get("Condition", {}))]


class Template(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.template = support.standalone_template()
        cls.body = support.cfn_yaml.compact(cls.template).encode("utf-8")
        cls.dir = support.scratch_dir("redrive-standalone-")
        cls.path = cls.dir / TEMPLATE_FILE
        cls.path.write_bytes(cls.body)

    def test_cfn_lint_is_clean(self):
        expanded = support.write_json(support.standalone_template(expanded=True), self.dir, "expanded.json")
        result = support.run([support.tool("cfn-lint"), str(self.path), str(expanded)], env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_within_every_quota_and_small_enough_for_the_console(self):
        figures = quotas.check_stacks(self.template, len(self.body))
        self.assertEqual(quotas.over(figures), [])
        # Each function's environment is measured (at its longest values).
        measured = [what for what, _, _ in figures if what.startswith("environment of function")]
        self.assertEqual(len(measured), len(BINARIES), measured)
        # The console's Create stack takes a file up to CloudFormation's TemplateBody limit.
        self.assertLess(len(self.body), quotas.TEMPLATE_BODY_BYTES)

    def test_no_account_region_or_partition_literal(self):
        text = self.body.decode("utf-8")
        self.assertEqual(re.findall(r"(?<![0-9])[0-9]{12}(?![0-9])", text), [])
        self.assertEqual(re.findall(r"\b(?:us|eu|ap|sa|ca|me|af|il|mx|cn)(?:-gov|-iso[a-z]?)?-[a-z]+-[0-9]\b", text), [])
        self.assertEqual(re.findall(r"arn:aws(?:-[a-z-]+)?:", text), [])
        # Nor anything a StackSet could not deploy everywhere: no nested stack, no transform.
        self.assertNotIn("Transform", self.template)
        types = {r["Type"] for r in self.template["Resources"].values()}
        self.assertNotIn("AWS::CloudFormation::Stack", types)
        self.assertNotIn("AWS::Lambda::Alias", types)

    def test_every_parameter_but_the_code_bucket_has_a_default(self):
        without = [name for name, p in self.template["Parameters"].items() if "Default" not in p]
        self.assertEqual(without, ["CodeBucket"])
        params = self.template["Parameters"]
        self.assertEqual(params["Version"]["Default"], version())
        self.assertEqual(params["Architecture"]["AllowedValues"], ["arm64", "x86_64"])
        self.assertEqual(params["ScheduleExpression"]["Default"], "rate(1 minute)")

    def test_the_functions_get_make_deploys_attach_mode_environment_the_fleet_by_tag(self):
        # infra/lib.sh writes each function's environment as make deploy does in attach mode.
        work = support.scratch_dir("redrive-env-")
        script = ("set -eu; . infra/lib.sh; load_config; attach_mode() { return 0; }; "
                  "STACK_NAME=rdx OUT_CircuitTableName=@ OUT_PoisonQueueUrl=@ OUT_MetricNamespace=@ "
                  "OUT_ArchiveBucketName=@ OUT_ArchivePrefix=@ OUT_AlertsTopicArn=@ OUT_TriageActionFunctionName=@ "
                  "PARTITION=aws AWS_REGION=r ACCOUNT_ID=1; "
                  f"write_redriver_env {work}/redriver.env; write_archiver_env {work}/archiver.env; "
                  f"write_triage_console_env {work}/console.env")
        result = support.run(["bash", "-c", script], env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stderr)
        deploy = {"RedriverFunction": "redriver", "ArchiverFunction": "archiver",
                  "TriageWidgetFunction": "console", "TriageActionFunction": "console"}
        params = self.template["Parameters"]
        for logical, env_file in deploy.items():
            theirs = quotas.read_env_file(work / f"{env_file}.env")
            ours = self.template["Resources"][logical]["Properties"]["Environment"]["Variables"]
            # The fleet by tag instead of the list deploy writes; no per-DLQ trigger alarm to re-arm.
            expected = set(theirs) - {"DLQ_LIST_TABLE", "TRIGGER_ALARM_NAME", "REARM_ALARM"} | {"DLQ_TAG_KEY"}
            self.assertEqual(set(ours), expected, logical)
            self.assertEqual(ours["DLQ_TAG_KEY"], {"Fn::Sub": "redrive-install:${InstallName}"})
            # A setting's default is redrive.env's (what deploy writes with the shipped settings;
            # @: the value of a stack output).
            for key, value in ours.items():
                if isinstance(value, dict) and list(value) == ["Ref"] and value["Ref"] in params and theirs[key] != "@":
                    self.assertEqual(str(params[value["Ref"]]["Default"]), theirs[key], f"{logical} {key}")

    def test_the_roles_grant_by_tag_exactly_as_attach_mode_does(self):
        # attach mode's template for one DLQ with a source, under the stack name `rdx`.
        dlq = {"name": "q-dlq", "arn": "arn:aws:sqs:eu-west-1:123456789012:q-dlq",
               "sources": ["arn:aws:sqs:eu-west-1:123456789012:q"], "key": "", "source_keys": []}
        attach = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), [dlq], stack="rdx")
        ours = standalone_template.expanded(self.template)
        for role in standalone_template.FLEET_READERS + ("OperatorPolicy", "TriageReadPolicy"):
            def tagged(template, stack):
                props = template["Resources"][role]["Properties"]
                documents = [p["PolicyDocument"] for p in props.get("Policies", [])] or [props["PolicyDocument"]]
                statements = [s for d in documents for s in protected_statements(d, stack)]
                return json.loads(json.dumps(statements).replace("${InstallName}", "rdx"))

            theirs = tagged(attach, "rdx")
            self.assertTrue(theirs, role)
            self.assertEqual(tagged(ours, "${InstallName}"), theirs, role)
        # The functions that read the fleet list the queues and read any queue's tags.
        for role in standalone_template.FLEET_READERS:
            statements = ours["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
            by_action = {s["Action"]: s for s in statements if s.get("Sid") in ("FindFleet", "ReadQueueTags")}
            self.assertEqual(by_action["sqs:ListQueues"]["Resource"], "*", role)
            self.assertEqual(by_action["sqs:ListQueueTags"]["Resource"], attach_template.ANY_QUEUE, role)
            self.assertNotIn("Condition", by_action["sqs:ListQueueTags"], role)


class FleetByTagUnderIam(support.IamMotoTestCase):
    """The template's roles as AWS enforces them (tests/iam_policy.py's rendering, moto
    authorizing every call, as for attach mode's roles in test_attach_deploy): what a function
    does at init to find its fleet by tag, then what it does to the queues it found."""

    INSTALL = "rdt"

    def test_a_function_lists_the_queues_reads_every_tag_and_reaches_only_its_installs(self):
        sys.path.insert(0, str(support.REPO / "tests"))
        import iam_policy

        sqs = self.client("sqs")
        url = {name: sqs.create_queue(QueueName=name)["QueueUrl"]
               for name in ("orders-dlq", "orders", "ledger-dlq", "stranger", "other-dlq", "rds-poison")}
        arn = {name: f"arn:aws:sqs:us-east-1:123456789012:{name}" for name in url}
        # As the user tags them for the template (infra/README.md, "One template").
        key = f"redrive-install:{self.INSTALL}"
        for name, value in (("orders-dlq", "dlq"), ("ledger-dlq", "dlq+source"), ("orders", "source")):
            sqs.tag_queue(QueueUrl=url[name], Tags={key: value})
        sqs.tag_queue(QueueUrl=url["other-dlq"], Tags={"redrive-install:other": "dlq"})
        tagged = {arn[n]: sqs.list_queue_tags(QueueUrl=u).get("Tags", {}) for n, u in url.items()}
        # The policies as CloudFormation gives them to IAM: the Fn::Sub text with the install's
        # name in it (in the condition keys too, which `expanded` leaves as text), then parsed.
        text = json.dumps(standalone_template.expanded(support.standalone_template()))
        template = json.loads(text.replace("${InstallName}", self.INSTALL))
        values = {"AWS::StackName": "rds", "PoisonQueue": "rds-poison"}
        for role in standalone_template.FLEET_READERS:
            client = self.client("sqs", self.user(f"standalone-{role}", iam_policy.render_template_policies(
                template, role, values, tagged)))
            # Init: every queue of the region listed, every queue's tags read (DLQ_TAG_KEY).
            listed = client.list_queues()["QueueUrls"]
            self.assertLessEqual(set(url.values()), set(listed), role)
            found = sorted(u for u in listed
                           if client.list_queue_tags(QueueUrl=u).get("Tags", {}).get(key) in ("dlq", "dlq+source"))
            self.assertEqual(found, sorted([url["orders-dlq"], url["ledger-dlq"]]), role)
            # Then the fleet's depth is read; no queue of another install or of nobody is.
            for name in ("orders-dlq", "ledger-dlq"):
                client.get_queue_attributes(QueueUrl=url[name], AttributeNames=["ApproximateNumberOfMessages"])
            for name in ("stranger", "other-dlq"):
                self.assertTrue(self.denied(lambda: client.get_queue_attributes(
                    QueueUrl=url[name], AttributeNames=["ApproximateNumberOfMessages"])), (role, name))
        # The re-driver drains the tagged DLQs and sends to their sources, nothing else.
        redriver = self.client("sqs", self.user("standalone-redriver-2", iam_policy.render_template_policies(
            template, "RedriverRole", values, tagged)))
        for name in ("orders-dlq", "ledger-dlq"):
            redriver.receive_message(QueueUrl=url[name], WaitTimeSeconds=0)
        redriver.send_message(QueueUrl=url["orders"], MessageBody="copy")
        redriver.send_message(QueueUrl=url["ledger-dlq"], MessageBody="copy")
        for name in ("stranger", "other-dlq"):
            self.assertTrue(self.denied(lambda: redriver.receive_message(QueueUrl=url[name])), name)
            self.assertTrue(self.denied(lambda: redriver.send_message(QueueUrl=url[name], MessageBody="x")), name)


class DeployFromTheRelease(unittest.TestCase):
    """The release's template and zips, deployed with the AWS CLI on moto, with no Rust toolchain
    on PATH; then a function's code updated as infra/README.md documents."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.release = release()
        cls.version = version()
        cls.moto = support.Moto()
        cls.bucket = support.unique("code")
        s3 = cls.moto.client("s3")
        s3.create_bucket(Bucket=cls.bucket, CreateBucketConfiguration={"LocationConstraint": support.REGION})
        for function in BINARIES.values():
            name = f"redrive-{cls.version}-{function}-x86_64.zip"
            s3.upload_file(str(cls.release / name), cls.bucket, f"releases/{cls.version}/{name}")
        cls.stack = support.unique("rds")
        cls.env = support.script_env(cls.moto)
        cls.env["PATH"] = without_rust(cls.env["PATH"])
        cls.created = support.run([
            support.tool("aws"), "cloudformation", "create-stack", "--stack-name", cls.stack,
            "--template-body", f"file://{cls.release / TEMPLATE_FILE}", "--capabilities", "CAPABILITY_IAM",
            "--parameters", f"ParameterKey=CodeBucket,ParameterValue={cls.bucket}",
            f"ParameterKey=CodeKeyPrefix,ParameterValue=releases/{cls.version}/",
            "ParameterKey=Architecture,ParameterValue=x86_64"], cls.env)

    @classmethod
    def tearDownClass(cls) -> None:
        cls.moto.stop()

    def zip_sha(self, function: str) -> str:
        data = (self.release / f"redrive-{self.version}-{function}-x86_64.zip").read_bytes()
        return base64.b64encode(hashlib.sha256(data).digest()).decode()

    def test_the_release_holds_the_template_make_dist_generates(self):
        self.assertEqual((self.release / TEMPLATE_FILE).read_bytes(),
                         support.cfn_yaml.compact(support.standalone_template()).encode("utf-8"))
        sums = (self.release / "SHA256SUMS").read_text()
        digest = hashlib.sha256((self.release / TEMPLATE_FILE).read_bytes()).hexdigest()
        self.assertIn(f"{digest}  {TEMPLATE_FILE}\n", sums)

    def test_attach_mode_deploys_from_the_template_and_the_zips_with_no_rust_toolchain(self):
        self.assertIsNone(shutil.which("cargo", path=self.env["PATH"]))
        self.assertEqual(self.created.returncode, 0, self.created.stderr)
        cfn = self.moto.client("cloudformation")
        stack = cfn.describe_stacks(StackName=self.stack)["Stacks"][0]
        self.assertEqual(stack["StackStatus"], "CREATE_COMPLETE", stack.get("StackStatusReason"))
        lam, iam = self.moto.client("lambda"), self.moto.client("iam")
        outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
        for logical, function in BINARIES.items():
            config = lam.get_function_configuration(FunctionName=f"{self.stack}-{function}")
            # The release's zip, as uploaded.
            self.assertEqual(config["CodeSha256"], self.zip_sha(function), function)
            self.assertEqual((config["Runtime"], config["Handler"], config["Architectures"]),
                             ("provided.al2023", "bootstrap", ["x86_64"]), function)
            self.assertEqual(config["LoggingConfig"]["LogFormat"], "JSON", function)
            variables = config["Environment"]["Variables"]
            # The install's name by default, the same in every account (a StackSet's stacks are
            # each named differently).
            self.assertEqual(variables["DLQ_TAG_KEY"], "redrive-install:redrive", function)
            self.assertNotIn("DLQ_LIST_TABLE", variables)
            self.assertNotIn("DLQ_URLS", variables)
            # Its role grants on the protected queues by this stack's tag, and finds them.
            role = config["Role"].rsplit("/", 1)[1]
            documents = [support.policy_document(iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"])
                         for name in iam.list_role_policies(RoleName=role)["PolicyNames"]]
            tagged = [s for d in documents for s in protected_statements(d, "redrive")]
            self.assertTrue(tagged, function)
            for statement in tagged:
                self.assertEqual(statement["Resource"], f"arn:aws:sqs:{support.REGION}:{self.moto.account_id()}:*")
            actions = {a for d in documents for s in d["Statement"] for a in support.as_list(s["Action"])}
            self.assertLessEqual({"sqs:ListQueues", "sqs:ListQueueTags"}, actions, function)
        self.assertEqual(outputs["RedriverRoleArn"],
                         lam.get_function_configuration(FunctionName=f"{self.stack}-redriver")["Role"])
        # The schedule invokes the re-driver itself (no alias).
        events = self.moto.client("events")
        rules = [r["Name"] for r in events.list_rules()["Rules"]]
        targets = [t["Arn"] for r in rules for t in events.list_targets_by_rule(Rule=r)["Targets"]]
        redriver_arn = lam.get_function_configuration(FunctionName=f"{self.stack}-redriver")["FunctionArn"]
        self.assertIn(redriver_arn, targets)

    def deployed_bootstrap(self, function: str) -> bytes:
        """The `bootstrap` of the code Lambda (moto, in this process) holds for a function."""
        from moto.awslambda.models import lambda_backends

        fn = lambda_backends[self.moto.account_id()][support.REGION].get_function(f"{self.stack}-{function}")
        with zipfile.ZipFile(io.BytesIO(fn.code_bytes)) as z:
            return z.read("bootstrap")

    def test_cargo_lambda_deploy_then_the_aws_cli_update_a_functions_code(self):
        self.assertEqual(self.created.returncode, 0, self.created.stderr)
        lam = self.moto.client("lambda")
        name = f"{self.stack}-redriver"
        before = lam.get_function_configuration(FunctionName=name)
        # A new build of the re-driver, as `cargo lambda build` leaves it (here: the release's,
        # one byte longer, so that its code differs).
        work = support.scratch_dir("redrive-new-code-")
        with zipfile.ZipFile(self.release / f"redrive-{self.version}-redriver-x86_64.zip") as z:
            binary = z.read("bootstrap") + b"\0"
        (work / "bootstrap").write_bytes(binary)
        # infra/README.md's command: cargo-lambda reads the workspace (cargo metadata) and builds
        # nothing with --binary-path.
        env = support.script_env(self.moto)
        result = support.run([support.tool("cargo-lambda"), "lambda", "deploy", "--binary-path",
                              str(work / "bootstrap"), name], env)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        after = lam.get_function_configuration(FunctionName=name)
        self.assertNotEqual(after["CodeSha256"], before["CodeSha256"])
        self.assertEqual(self.deployed_bootstrap("redriver"), binary)
        # The configuration the stack gave it stays.
        for key in ("Environment", "Role", "MemorySize", "Timeout", "Runtime", "Handler", "Architectures"):
            self.assertEqual(after[key], before[key], key)
        # Without a Rust toolchain: the AWS CLI, from a zip in S3 (the release's again).
        key = f"releases/{self.version}/redrive-{self.version}-redriver-x86_64.zip"
        result = support.run([support.tool("aws"), "lambda", "update-function-code", "--function-name", name,
                              "--s3-bucket", self.bucket, "--s3-key", key], self.env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(lam.get_function_configuration(FunctionName=name)["CodeSha256"], self.zip_sha("redriver"))


if __name__ == "__main__":
    unittest.main()

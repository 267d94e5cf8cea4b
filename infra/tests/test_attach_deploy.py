"""`make deploy` / `make destroy` in attach mode (PROTECT_DLQS, PROTECT_TAG) against a moto server.

Three setups of queues a user already has, made before the deploy the way their own Terraform
would: a DLQ fed by two sources, a FIFO DLQ with its FIFO source, and a DLQ selected by a tag.
The deploy must create none of them (only our poison queue appears), name exactly them and
their sources in the roles, give the re-driver DLQ_URLS and no SOURCE_QUEUE_URL; destroy must
leave them and their messages. As in test_deploy_script.py, `make deploy` runs as a user runs it,
its real build step included.
"""

from __future__ import annotations

import json
import sys
import tempfile
import unittest
from pathlib import Path

import support

sys.path.insert(0, str(support.INFRA))
import attach_template  # noqa: E402

DEPLOY = support.MAKE_DEPLOY
DESTROY = str(support.INFRA / "destroy.sh")


class AttachDeploy(support.DeployTestCase):
    # ---------------------------------------------------------------- helpers
    def settings(self, stack: str, **extra: str) -> dict:
        base = {"STACK_NAME": stack, **support.BUILD_SETTINGS, "LAMBDA_DIR": str(self.lambda_dir),
                "QUEUE_NAME_REUSE_WAIT_SECONDS": "0"}
        base.update(extra)
        return support.script_env(self.moto, **base)

    def run_script(self, script: str | list[str], env: dict):
        return support.run(script if isinstance(script, list) else ["bash", script], env)

    def stack_status(self, name: str) -> str | None:
        for summary in self.moto.client("cloudformation").list_stacks()["StackSummaries"]:
            if summary["StackName"] == name and summary["StackStatus"] != "DELETE_COMPLETE":
                return summary["StackStatus"]
        return None

    def queue_urls(self) -> set[str]:
        return set(self.moto.client("sqs").list_queues().get("QueueUrls", []))

    def arn(self, url: str) -> str:
        return self.moto.client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    def depth(self, url: str) -> int:
        attrs = self.moto.client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"])

    def user_queue(self, name: str, dlq_url: str | None = None, tags: dict | None = None) -> str:
        sqs = self.moto.client("sqs")
        attributes = {}
        if name.endswith(".fifo"):
            attributes["FifoQueue"] = "true"
        if dlq_url:
            attributes["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": self.arn(dlq_url), "maxReceiveCount": 3})
        url = sqs.create_queue(QueueName=name, Attributes=attributes, tags=tags or {})["QueueUrl"]
        return url

    def three_setups(self, prefix: str, tag_key: str) -> dict:
        """The user's queues: name -> URL."""
        q = {}
        q["orders-dlq"] = self.user_queue(f"{prefix}-orders-dlq")
        q["orders-a"] = self.user_queue(f"{prefix}-orders-a", q["orders-dlq"])
        q["orders-b"] = self.user_queue(f"{prefix}-orders-b", q["orders-dlq"])
        q["pay-dlq.fifo"] = self.user_queue(f"{prefix}-pay-dlq.fifo")
        q["pay.fifo"] = self.user_queue(f"{prefix}-pay.fifo", q["pay-dlq.fifo"])
        q["tagged-dlq"] = self.user_queue(f"{prefix}-tagged-dlq", tags={tag_key: "true", "redrive:max-attempts": "3"})
        q["tagged"] = self.user_queue(f"{prefix}-tagged", q["tagged-dlq"])
        return q

    def role_statements(self, role_arn: str) -> list[dict]:
        iam = self.moto.client("iam")
        role = role_arn.rsplit("/", 1)[1]
        statements = []
        for name in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            doc = support.policy_document(iam.get_role_policy(RoleName=role, PolicyName=name)["PolicyDocument"])
            statements.extend(doc["Statement"])
        return statements

    @staticmethod
    def sqs_arns(statements: list[dict]) -> set[str]:
        return {r for s in statements for r in support.as_list(s.get("Resource", []))
                if isinstance(r, str) and r.startswith("arn:aws:sqs:")}

    def statement(self, statements: list[dict], sid: str) -> dict:
        found = [s for s in statements if s.get("Sid") == sid]
        self.assertEqual(len(found), 1, (sid, statements))
        return found[0]

    # ---------------------------------------------------------------- the happy path
    def test_attach_protects_three_existing_setups_creates_none_and_destroy_leaves_them(self):
        stack = support.unique("rda")
        prefix = support.unique("u")
        tag_key = f"redrive:protect-{prefix}"
        q = self.three_setups(prefix, tag_key)
        dlqs = {q["orders-dlq"], q["pay-dlq.fifo"], q["tagged-dlq"]}
        sources = {q["orders-a"], q["orders-b"], q["pay.fifo"], q["tagged"]}
        before = self.queue_urls()
        env = self.settings(
            stack,
            # A name and an ARN; the third DLQ by its tag.
            PROTECT_DLQS=f"{prefix}-orders-dlq,{self.arn(q['pay-dlq.fifo'])}",
            PROTECT_TAG=f"{tag_key}=true",
        )

        # Deploying needs no LocalStack (the tests' second emulator) and no Python 3.13: make
        # deploy runs here with LocalStack's venv missing and no interpreter allowed to make one.
        no_localstack = ["LOCALSTACK_VENV=/nonexistent/.venv-localstack", "LOCALSTACK_PYTHON_CANDIDATES=false"]
        result = self.run_script(DEPLOY + no_localstack, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        self.assertNotIn("LocalStack", result.stdout + result.stderr)
        # SQS's default retention, 4 days, is not above the archive threshold (10 days) nor the
        # last-call alarm (7 days): named at deploy, for each DLQ.
        for dlq in (f"{prefix}-orders-dlq", f"{prefix}-tagged-dlq"):
            self.assertIn(f"WARNING: {dlq} keeps messages 345600 s (MessageRetentionPeriod), not above the archive "
                          "threshold of 864000 s (ARCHIVE_AFTER_DAYS=10)", result.stderr)
            self.assertIn(f"WARNING: {dlq} keeps messages 345600 s (MessageRetentionPeriod), not above "
                          "DLQ_FINAL_AGE_ALARM_SECONDS=604800", result.stderr)
        self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
        self.assertEqual(self.stack_status(f"{stack}-wiring"), "CREATE_COMPLETE")

        # None of the user's queues created or replaced; ours: the poison queue only.
        after = self.queue_urls()
        self.assertTrue(before <= after)
        added = {url.rsplit("/", 1)[1] for url in after - before}
        self.assertEqual(added, {f"{stack}-poison"})
        for url in dlqs | sources:
            self.assertNotIn(stack, url)

        described = self.moto.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        out = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
        poison_arn = self.arn(out["PoisonQueueUrl"])
        resources = self.moto.client("cloudformation").list_stack_resources(StackName=stack)["StackResourceSummaries"]
        self.assertEqual([r["LogicalResourceId"] for r in resources if r["ResourceType"] == "AWS::SQS::Queue"],
                         ["PoisonQueue"])

        # The re-driver: every protected DLQ, no source of its own.
        lam = self.moto.client("lambda")
        variables = lam.get_function_configuration(FunctionName=f"{stack}-redriver")["Environment"]["Variables"]
        self.assertEqual(set(variables["DLQ_URLS"].split(",")), dlqs)
        self.assertEqual(len(variables["DLQ_URLS"].split(",")), 3)
        for absent in ("SOURCE_QUEUE_URL", "DLQ_URL"):
            self.assertNotIn(absent, variables)
        # Each DLQ's trigger alarm, re-armed by scheduled drains: {queue} is each DLQ's name.
        self.assertEqual(variables["TRIGGER_ALARM_NAME"], f"{stack}-dlq-not-empty-{{queue}}")
        self.assertEqual(variables["POISON_QUEUE_URL"], out["PoisonQueueUrl"])
        # CONSUMER=none (attach mode's default): no consumer, no event source mapping.
        functions = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
        self.assertEqual({f for f in functions if f.startswith(stack)}, {f"{stack}-redriver", f"{stack}-archiver"})
        support.assert_real_functions(self, self.moto, self.lambda_dir, {
            f"{stack}-redriver": "redriver", f"{stack}-archiver": "archiver"})
        self.assertEqual([m for m in lam.list_event_source_mappings()["EventSourceMappings"]
                          if stack in m["FunctionArn"]], [])

        # The roles name exactly the protected DLQs and their sources (and our poison queue).
        dlq_arns = {self.arn(u) for u in dlqs}
        source_arns = {self.arn(u) for u in sources}
        redriver = self.role_statements(out["RedriverRoleArn"])
        drain = self.statement(redriver, "DrainDlq")
        self.assertEqual(set(support.as_list(drain["Resource"])), dlq_arns)
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ListDeadLetterSourceQueues", "sqs:ListQueueTags"):
            self.assertIn(action, support.as_list(drain["Action"]))
        send = self.statement(redriver, "SendToSourceAndPoison")
        self.assertEqual(set(support.as_list(send["Resource"])), source_arns | {poison_arn})
        self.assertEqual(self.sqs_arns(redriver), dlq_arns | source_arns | {poison_arn})
        archiver = self.role_statements(out["ArchiverRoleArn"])
        self.assertEqual(self.sqs_arns(archiver), dlq_arns | {poison_arn})
        tags = self.statement(archiver, "ReadProtectedDlqTags")
        self.assertEqual((tags["Action"], set(support.as_list(tags["Resource"]))), ("sqs:ListQueueTags", dlq_arns))
        # SetAlarmState: this stack's per-DLQ trigger alarms, one pattern whatever their number.
        rearm = self.statement(redriver, "RearmTriggerAlarm")
        account = self.moto.account_id()
        self.assertEqual(support.as_list(rearm["Resource"]),
                         [f"arn:aws:cloudwatch:{support.REGION}:{account}:alarm:{stack}-dlq-not-empty-*"])
        # No queue of these is under a customer managed key: no KMS grant.
        self.assertNotIn("kms:", json.dumps(redriver))

        # Messages on the user's queues; destroy removes ours and leaves theirs.
        sqs = self.moto.client("sqs")
        for name, url in q.items():
            fifo = {"MessageGroupId": "g", "MessageDeduplicationId": name} if url.endswith(".fifo") else {}
            sqs.send_message(QueueUrl=url, MessageBody=f"kept {name}", **fifo)
        destroyed = self.run_script(DESTROY, env)
        self.assertEqual(destroyed.returncode, 0, destroyed.stderr)
        self.assertIsNone(self.stack_status(stack))
        self.assertIsNone(self.stack_status(f"{stack}-wiring"))
        self.assertEqual(self.queue_urls(), before)
        for name, url in q.items():
            self.assertEqual(self.depth(url), 1, name)
        functions = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
        self.assertFalse({f for f in functions if f.startswith(stack)})

    # ---------------------------------------------------------------- refusals
    def test_a_queue_that_does_not_exist_is_refused_before_any_change(self):
        stack = support.unique("rdm")
        prefix = support.unique("u")
        dlq = self.user_queue(f"{prefix}-dlq")
        self.user_queue(f"{prefix}-src", dlq)
        before = self.queue_urls()
        env = self.settings(stack, PROTECT_DLQS=f"{prefix}-dlq,{prefix}-missing-dlq")
        result = self.run_script(DEPLOY, env)
        self.assertNotEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"queue {prefix}-missing-dlq does not exist in {support.REGION}", result.stderr)
        self.assertIn("Nothing was changed", result.stderr)
        self.assertIsNone(self.stack_status(stack))
        self.assertEqual(self.queue_urls(), before)
        functions = {f["FunctionName"] for f in self.moto.client("lambda").list_functions()["Functions"]}
        self.assertFalse({f for f in functions if f.startswith(stack)})

    def test_a_tag_that_selects_nothing_and_unsupported_settings_are_refused_before_any_change(self):
        stack = support.unique("rdn")
        prefix = support.unique("u")
        self.user_queue(f"{prefix}-dlq")
        account = self.moto.account_id()
        cases = {
            f"PROTECT_TAG=redrive:protect-{prefix}=true selects no queue": {"PROTECT_TAG": f"redrive:protect-{prefix}=true"},
            "CONSUMER=http is not supported with PROTECT_DLQS": {"PROTECT_DLQS": f"{prefix}-dlq", "CONSUMER": "http"},
            "ORCHESTRATOR=stepfunctions is not supported with PROTECT_DLQS": {
                "PROTECT_DLQS": f"{prefix}-dlq", "ORCHESTRATOR": "stepfunctions"},
            "is neither a queue name nor a queue ARN": {"PROTECT_DLQS": f"{prefix}-dlq,https://sqs/x"},
            "One install protects the queues of its own account and region": {
                "PROTECT_DLQS": f"arn:aws:sqs:us-east-1:{account}:{prefix}-dlq"},
            "CONSUMER=none is for protecting DLQs you already have": {"CONSUMER": "none", "DOWNSTREAM_URL": "https://x.example"},
        }
        for phrase, extra in cases.items():
            with self.subTest(phrase):
                result = self.run_script(DEPLOY, self.settings(stack, **extra))
                self.assertNotEqual(result.returncode, 0, result.stderr)
                self.assertIn(phrase, result.stderr)
        self.assertIsNone(self.stack_status(stack))


    def test_queues_under_customer_managed_keys_get_exactly_those_keys(self):
        """Deploy reads each protected DLQ's and source's KmsMasterKeyId, resolves an alias to its
        key, and grants exactly those keys: Decrypt to receive, GenerateDataKey to send. The AWS
        managed key of SQS needs no grant; a key the deploy cannot read stops it, naming both."""
        stack = support.unique("rdk")
        prefix = support.unique("u")
        kms = self.moto.client("kms")
        dlq_key = kms.create_key(Description="dlq key")["KeyMetadata"]["Arn"]
        source_key = kms.create_key(Description="source key")["KeyMetadata"]
        kms.create_alias(AliasName=f"alias/{prefix}-orders", TargetKeyId=source_key["KeyId"])
        sqs = self.moto.client("sqs")
        dlq = self.user_queue(f"{prefix}-dlq")
        sqs.set_queue_attributes(QueueUrl=dlq, Attributes={"KmsMasterKeyId": dlq_key})
        src = self.user_queue(f"{prefix}-src", dlq)
        sqs.set_queue_attributes(QueueUrl=src, Attributes={"KmsMasterKeyId": f"alias/{prefix}-orders"})
        managed = self.user_queue(f"{prefix}-managed-dlq")
        sqs.set_queue_attributes(QueueUrl=managed, Attributes={"KmsMasterKeyId": "alias/aws/sqs"})
        env = self.settings(stack, PROTECT_DLQS=f"{prefix}-dlq,{prefix}-managed-dlq")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        described = self.moto.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        out = {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}
        redriver = self.role_statements(out["RedriverRoleArn"])
        send = self.statement(redriver, "EncryptProtectedQueues")
        self.assertEqual(sorted(support.as_list(send["Action"])), ["kms:Decrypt", "kms:GenerateDataKey"])
        self.assertEqual(set(support.as_list(send["Resource"])), {dlq_key, source_key["Arn"]})
        archiver = self.role_statements(out["ArchiverRoleArn"])
        decrypt = self.statement(archiver, "DecryptProtectedDlqs")
        self.assertEqual((decrypt["Action"], support.as_list(decrypt["Resource"])), ("kms:Decrypt", [dlq_key]))
        self.assertNotIn("kms:GenerateDataKey", json.dumps(archiver))

        # A key this deploy cannot describe: refused before any change, queue and key named.
        other = support.unique("rdk")
        missing = f"arn:aws:kms:{support.REGION}:{self.moto.account_id()}:key/00000000-0000-0000-0000-000000000000"
        lost = self.user_queue(f"{prefix}-lost-dlq")
        sqs.set_queue_attributes(QueueUrl=lost, Attributes={"KmsMasterKeyId": missing})
        refused = self.run_script(DEPLOY, self.settings(other, PROTECT_DLQS=f"{prefix}-lost-dlq"))
        self.assertNotEqual(refused.returncode, 0)
        self.assertIn(f"queue {prefix}-lost-dlq is encrypted with the KMS key {missing}", refused.stderr)
        self.assertIn("Nothing was changed", refused.stderr)
        self.assertIsNone(self.stack_status(other))

    def test_more_dlqs_than_the_quotas_allow_are_refused_before_any_change_naming_the_quota(self):
        """At the ceiling's worst case (80-character names, three sources each), one DLQ more than
        infra/quotas.py's ceiling is refused before anything is created, the quota named."""
        import quotas

        account = self.moto.account_id()
        ceiling, _ = quotas.ceiling(support.RESOURCES_TEMPLATE, 80, 3, Path(tempfile.mkdtemp()),
                                    arn_prefix=f"arn:aws:sqs:{support.REGION}:{account}:",
                                    url_prefix=f"{self.moto.endpoint}/{account}/")
        stack = support.unique("rdq")
        prefix = support.unique("u")
        names = []
        for i in range(ceiling + 1):
            stem = f"{prefix}-{i:03d}-"
            dlq = self.user_queue(stem + "d" * (80 - len(stem)))
            for j in range(3):
                self.user_queue(f"{stem}{j}" + "s" * (80 - len(stem) - 1), dlq)
            names.append(dlq.rsplit("/", 1)[1])
        before = self.queue_urls()
        result = self.run_script(DEPLOY, self.settings(stack, PROTECT_DLQS=",".join(names)))
        self.assertNotEqual(result.returncode, 0, result.stderr)
        self.assertIn("quota exceeded:", result.stderr)
        self.assertIn("this deploy would exceed an AWS quota", result.stderr)
        self.assertIn("Nothing was changed", result.stderr)
        self.assertIsNone(self.stack_status(stack))
        self.assertEqual(self.queue_urls(), before)


class AttachTemplate(unittest.TestCase):
    """infra/attach_template.py without AWS: what the attach template holds, and its ceiling."""

    def dlqs(self, n: int) -> list[dict]:
        return [{"name": f"q{i}-dlq", "arn": f"arn:aws:sqs:eu-west-1:123456789012:q{i}-dlq",
                 "sources": [f"arn:aws:sqs:eu-west-1:123456789012:q{i}"]} for i in range(n)]

    def test_no_queue_but_the_poison_queue_and_per_dlq_alarms_on_the_trigger_topic(self):
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(2))
        resources = template["Resources"]
        self.assertEqual([k for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue"], ["PoisonQueue"])
        self.assertNotIn("ConsumerRole", resources)
        triggers = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"
                    and r["Properties"].get("AlarmActions") == [{"Ref": "TriggerTopic"}]]
        self.assertEqual(sorted(p["Dimensions"][0]["Value"] for p in triggers), ["q0-dlq", "q1-dlq"])
        for p in triggers:
            self.assertEqual((p["Namespace"], p["MetricName"]), ("AWS/SQS", "ApproximateNumberOfMessagesVisible"))

    def test_the_resource_ceiling_is_named(self):
        ceiling = attach_template.max_dlqs(support.load_template(support.RESOURCES_TEMPLATE))
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(ceiling))
        self.assertLessEqual(len(template["Resources"]), 500)
        with self.assertRaises(SystemExit) as refused:
            attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(ceiling + 1))
        self.assertIn(f"at most {ceiling} DLQs", str(refused.exception))


if __name__ == "__main__":
    unittest.main()

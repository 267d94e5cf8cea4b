"""`make deploy` / `make destroy` in attach mode (PROTECT_DLQS, PROTECT_TAG) against a moto server.

Three setups of queues a user already has, made before the deploy the way their own Terraform
would: a DLQ fed by two sources, a FIFO DLQ with its FIFO source, and a DLQ selected by a tag.
The deploy must create none of them (only our poison queue appears), tag exactly them and
their sources with the install's tag the roles grant on (and untag them at destroy), write the DLQs' list where both functions read it at init (DLQ_LIST_TABLE, no DLQ_URLS) and
give the re-driver no SOURCE_QUEUE_URL; destroy must
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

    def tags(self, url: str) -> dict:
        return self.moto.client("sqs").list_queue_tags(QueueUrl=url).get("Tags", {})

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
        archiver_variables = lam.get_function_configuration(
            FunctionName=f"{stack}-archiver")["Environment"]["Variables"]
        # The list is out of the environment: the circuit table's item both functions read at init.
        for names in (variables, archiver_variables):
            self.assertNotIn("DLQ_URLS", names)
            self.assertEqual(names["DLQ_LIST_TABLE"], out["CircuitTableName"])
        item = self.moto.client("dynamodb").get_item(
            TableName=out["CircuitTableName"], Key={"queue": {"S": "redrive:fleet:dlq-urls"}})["Item"]
        self.assertEqual(set(item["dlq_urls"]["S"].split(",")), dlqs)
        self.assertEqual(len(item["dlq_urls"]["S"].split(",")), 3)
        for absent in ("SOURCE_QUEUE_URL", "DLQ_URL"):
            self.assertNotIn(absent, variables)
        # The archiver's daily digest: the alerts topic, the books in the circuit table, at the
        # reminder hour of the DLQ-not-empty reminder.
        self.assertEqual((archiver_variables["ALERTS_TOPIC_ARN"], archiver_variables["TRIAGE_TABLE"],
                          archiver_variables["REMINDER_HOUR_UTC"]),
                         (out["AlertsTopicArn"], out["CircuitTableName"], "9"))
        # No consumer of ours, so no cause records for the archiver's index to read.
        self.assertNotIn("CAUSES_TABLE", archiver_variables)
        # Each DLQ's trigger alarm, re-armed by scheduled drains: {queue} is each DLQ's name.
        self.assertEqual(variables["TRIGGER_ALARM_NAME"], f"{stack}-dlq-not-empty-{{queue}}")
        self.assertEqual(variables["POISON_QUEUE_URL"], out["PoisonQueueUrl"])
        # CONSUMER=none (attach mode's default): no consumer, no event source mapping.
        functions = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
        self.assertEqual({f for f in functions if f.startswith(stack)},
                         {f"{stack}-redriver", f"{stack}-archiver", f"{stack}-triage-widget", f"{stack}-triage-action"})
        support.assert_real_functions(self, self.moto, self.lambda_dir, {
            f"{stack}-redriver": "redriver", f"{stack}-archiver": "archiver",
            f"{stack}-triage-widget": "triage-widget", f"{stack}-triage-action": "triage-action"})
        # The triage console: the protected DLQs from the list item (as the re-driver reads
        # them) and the poison queue; its buttons call the action function's alias live.
        for function in ("triage-widget", "triage-action"):
            console = lam.get_function_configuration(FunctionName=f"{stack}-{function}")
            self.assertEqual(console["Environment"]["Variables"], {
                "TRIAGE_TABLE": out["CircuitTableName"],
                "TRIAGE_QUEUE_URLS": out["PoisonQueueUrl"],
                "DLQ_LIST_TABLE": out["CircuitTableName"],
                "TRIAGE_ACTION_FUNCTION":
                    f"arn:aws:lambda:{support.REGION}:{self.moto.account_id()}:function:{stack}-triage-action:live",
                "TRIAGE_SHOW_BODIES": "false",
                "ARCHIVE_BUCKET": out["ArchiveBucketName"],
                "ARCHIVE_PREFIX": "archive",
                "POISON_QUEUE_URL": out["PoisonQueueUrl"],
                "RUST_LOG": "info",
            }, function)
            self.assertNotEqual(lam.get_alias(FunctionName=f"{stack}-{function}", Name="live")["FunctionVersion"],
                                "$LATEST")
        self.assertEqual([m for m in lam.list_event_source_mappings()["EventSourceMappings"]
                          if stack in m["FunctionArn"]], [])

        # The roles grant on the queues carrying this install's tag (no policy grows with the
        # fleet), and the deploy tagged exactly the protected DLQs and their sources.
        dlq_arns = {self.arn(u) for u in dlqs}
        source_arns = {self.arn(u) for u in sources}
        key = f"redrive-install:{stack}"
        any_queue = f"arn:aws:sqs:{support.REGION}:{self.moto.account_id()}:*"
        dlq_condition = {"StringEquals": {f"aws:ResourceTag/{key}": ["dlq", "dlq+source"]}}
        source_condition = {"StringEquals": {f"aws:ResourceTag/{key}": ["source", "dlq+source"]}}
        for url in dlqs:
            self.assertEqual(self.tags(url).get(key), "dlq", url)
        for url in sources:
            self.assertEqual(self.tags(url).get(key), "source", url)
        self.assertEqual(self.tags(q["tagged-dlq"])[tag_key], "true")  # the user's tags stay
        redriver = self.role_statements(out["RedriverRoleArn"])
        drain = self.statement(redriver, "DrainDlq")
        self.assertEqual((drain["Resource"], drain["Condition"]), (any_queue, dlq_condition))
        for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ListDeadLetterSourceQueues", "sqs:ListQueueTags"):
            self.assertIn(action, support.as_list(drain["Action"]))
        send = self.statement(redriver, "SendToSourceAndPoison")
        self.assertEqual(support.as_list(send["Resource"]), [poison_arn])
        send_sources = self.statement(redriver, "SendToSourceAndPoisonProtectedSources")
        self.assertEqual((send_sources["Resource"], send_sources["Condition"]), (any_queue, source_condition))
        self.assertEqual(self.sqs_arns(redriver), {any_queue, poison_arn})
        self.assertFalse(set(json.dumps(redriver).split('"')) & (dlq_arns | source_arns))
        archiver = self.role_statements(out["ArchiverRoleArn"])
        self.assertEqual(self.sqs_arns(archiver), {any_queue, poison_arn})
        self.assertEqual([s.get("Condition") for s in archiver if any_queue in support.as_list(s.get("Resource", []))],
                         [dlq_condition, dlq_condition])
        tags = self.statement(archiver, "ReadProtectedDlqTags")
        self.assertEqual((tags["Action"], tags["Resource"], tags["Condition"]),
                         ("sqs:ListQueueTags", any_queue, dlq_condition))
        # SetAlarmState: this stack's per-DLQ trigger alarms, one pattern whatever their number.
        rearm = self.statement(redriver, "RearmTriggerAlarm")
        account = self.moto.account_id()
        self.assertEqual(support.as_list(rearm["Resource"]),
                         [f"arn:aws:cloudwatch:{support.REGION}:{account}:alarm:{stack}-dlq-not-empty-*"])
        # No queue of these is under a customer managed key: no KMS grant.
        self.assertNotIn("kms:", json.dumps(redriver))
        # The triage console's roles: the depth of the protected DLQs by tag and of the poison
        # queue; the books of this account and region's queues (the widget reads them, only the
        # action writes them); the protected DLQs' list read, never written.
        widget = self.role_statements(out["TriageWidgetRoleArn"])
        action = self.role_statements(out["TriageActionRoleArn"])
        for statements in (widget, action):
            self.assertEqual(self.sqs_arns(statements), {any_queue, poison_arn})
        self.assertEqual({a for s in widget for a in support.as_list(s["Action"]) if a.startswith("sqs:")},
                         {"sqs:GetQueueAttributes"})
        # The action's replay and discard: the protected DLQs' and the poison queue's messages,
        # a canary to the protected sources.
        self.assertEqual({a for s in action for a in support.as_list(s["Action"]) if a.startswith("sqs:")},
                         {"sqs:GetQueueAttributes", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility",
                          "sqs:DeleteMessage", "sqs:ListDeadLetterSourceQueues", "sqs:SendMessage"})
        for statements in (widget, action):
            depth = self.statement(statements, "QueueDepthProtectedDlqs")
            self.assertEqual((depth["Resource"], depth["Condition"]), (any_queue, dlq_condition))
            listed = self.statement(statements, "ReadProtectedDlqList")
            self.assertEqual((listed["Action"], listed["Condition"]),
                             ("dynamodb:GetItem", {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [
                                 "redrive:fleet:dlq-urls"]}}))
        books = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [
            f"triage#arn:aws:sqs:{support.REGION}:{account}:*", f"triage#https://*/{account}/*"]}}
        read = self.statement(widget, "ReadTriageBooks")
        self.assertEqual((support.as_list(read["Action"]), read["Condition"]), (["dynamodb:GetItem"], books))
        change = self.statement(action, "ChangeTriageBooks")
        self.assertEqual((sorted(support.as_list(change["Action"])), change["Condition"]),
                         (["dynamodb:GetItem", "dynamodb:PutItem"], books))
        self.assertNotIn("dynamodb:PutItem", json.dumps(widget))

        # Messages on the user's queues; destroy removes ours and leaves theirs.
        sqs = self.moto.client("sqs")
        for name, url in q.items():
            fifo = {"MessageGroupId": "g", "MessageDeduplicationId": name} if url.endswith(".fifo") else {}
            sqs.send_message(QueueUrl=url, MessageBody=f"kept {name}", **fifo)
        # A redeploy without one DLQ takes the tag off it and its sources, and only theirs. The
        # queues it protects carry the tag before the roles that grant on it change (an upgrade
        # from roles naming ARNs is never denied in between), and the calls on the user's queues
        # are made in one process: the AWS CLI, recorded, makes none of them.
        calls = Path(tempfile.mkdtemp()) / "calls.log"
        recorder = calls.with_name("aws")
        real_aws = support.REPO / ".venv" / "bin" / "aws"
        recorder.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>"{calls}"\nexec "{real_aws}" "$@"\n')
        recorder.chmod(0o755)
        redeployed = self.run_script(DEPLOY, {**env, "PROTECT_DLQS": f"{prefix}-orders-dlq", "AWS_CLI": str(recorder)})
        self.assertEqual(redeployed.returncode, 0, redeployed.stderr)
        log = redeployed.stderr.splitlines()
        tagged = [i for i, line in enumerate(log) if line.startswith(f"==> tagged 5 queues {key} ")]
        updated = [i for i, line in enumerate(log) if line == f"==> updating stack {stack}"]
        self.assertEqual((len(tagged), len(updated)), (1, 1), redeployed.stderr)
        self.assertLess(tagged[0], updated[0], redeployed.stderr)
        user_queues = [line for line in calls.read_text().splitlines()
                       if " sqs " in f" {line} " and any(q.rsplit("/", 1)[1] in line for q in q.values())]
        self.assertEqual(user_queues, [])
        for url in (q["pay-dlq.fifo"], q["pay.fifo"]):
            self.assertNotIn(key, self.tags(url), url)
        self.assertEqual(self.tags(q["orders-dlq"]).get(key), "dlq")
        self.assertEqual(self.tags(q["tagged"]).get(key), "source")
        destroyed = self.run_script(DESTROY, env)
        self.assertEqual(destroyed.returncode, 0, destroyed.stderr)
        self.assertIsNone(self.stack_status(stack))
        # Destroy takes this install's tag off every queue, and leaves the user's own.
        for url in dlqs | sources:
            self.assertNotIn(key, self.tags(url), url)
        self.assertEqual(self.tags(q["tagged-dlq"])[tag_key], "true")
        self.assertIsNone(self.stack_status(f"{stack}-wiring"))
        self.assertEqual(self.queue_urls(), before)
        for name, url in q.items():
            self.assertEqual(self.depth(url), 1, name)
        functions = {f["FunctionName"] for f in lam.list_functions()["Functions"]}
        self.assertFalse({f for f in functions if f.startswith(stack)})

    # ---------------------------------------------------------------- nested stacks
    def nested_stacks(self, stack: str) -> dict[str, str]:
        """The parent's nested stacks: logical id -> the nested stack's name."""
        resources = self.moto.client("cloudformation").list_stack_resources(StackName=stack)["StackResourceSummaries"]
        return {r["LogicalResourceId"]: r["PhysicalResourceId"] for r in resources
                if r["ResourceType"] == "AWS::CloudFormation::Stack"}

    def stack_body(self, stack: str) -> dict:
        body = self.moto.client("cloudformation").get_template(StackName=stack)["TemplateBody"]
        return json.loads(body) if isinstance(body, str) else body

    # 101 DLQs (no sources) on moto, twice deployed: about a minute.
    def test_each_dlqs_alarms_live_in_a_nested_stack_that_keeps_them_and_destroy_removes_them(self):
        """CloudFormation's 500 resources per stack: the per-DLQ alarms are in nested stacks of
        at most 100 DLQs. 101 DLQs make two; a redeploy without the first DLQ and with a new one
        puts the new one in its place, leaves the second nested stack as it was and every other
        DLQ's alarms as they were; the nested templates are not left in the template bucket;
        destroy removes the nested stacks with the parent. (moto lists a nested stack's
        resources but creates no alarm: the alarms are read from the templates it holds.)"""
        stack = support.unique("rdt")
        prefix = support.unique("u")
        names = [self.user_queue(f"{prefix}-{i:03d}-dlq").rsplit("/", 1)[1] for i in range(102)]
        env = self.settings(stack, PROTECT_DLQS=",".join(names[:101]))
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        cfn = self.moto.client("cloudformation")
        kinds = ("NotEmpty", "Age", "FinalAge", "Daily")

        def alarm_ids(dlqs: list[str]) -> set[str]:
            return {attach_template.logical_id(n, k) for n in dlqs for k in kinds}

        nested = self.nested_stacks(stack)
        self.assertEqual(sorted(nested), ["AlarmStack001", "AlarmStack002"])
        first, second = (self.stack_body(nested[k]) for k in ("AlarmStack001", "AlarmStack002"))
        self.assertEqual(set(first["Resources"]), alarm_ids(names[:100]))
        self.assertEqual(set(second["Resources"]), alarm_ids(names[100:101]))
        for logical, count in (("AlarmStack001", 400), ("AlarmStack002", 4)):
            listed = cfn.list_stack_resources(StackName=nested[logical])["StackResourceSummaries"]
            self.assertEqual(len(listed), count, logical)
            self.assertEqual(self.stack_status(nested[logical]), "CREATE_COMPLETE")
        # The alarms carry the install's name and the parent's topics.
        out = {o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Outputs"]}
        params = {p["ParameterKey"]: p["ParameterValue"]
                  for p in cfn.describe_stacks(StackName=nested["AlarmStack002"])["Stacks"][0]["Parameters"]}
        self.assertEqual((params["InstallName"], params["TriggerTopicArn"], params["AlertsTopicArn"]),
                         (stack, out["TriggerTopicArn"], out["AlertsTopicArn"]))
        # The nested templates were read from the template bucket, and are not left there.
        s3 = self.moto.client("s3")
        bucket = f"redrive-templates-{self.moto.account_id()}-{support.REGION}"
        self.assertEqual(s3.list_objects_v2(Bucket=bucket, Prefix=f"{stack}/").get("KeyCount"), 0)

        # The first DLQ goes, a new one comes: it takes the free place in the first stack.
        changed = names[1:101] + [names[101]]
        redeployed = self.run_script(DEPLOY, {**env, "PROTECT_DLQS": ",".join(changed)})
        self.assertEqual(redeployed.returncode, 0, redeployed.stderr)
        after = self.nested_stacks(stack)
        self.assertEqual(after["AlarmStack002"], nested["AlarmStack002"])  # not updated at all
        self.assertEqual(self.stack_body(after["AlarmStack002"]), second)
        first_after = self.stack_body(after["AlarmStack001"])
        self.assertEqual(set(first_after["Resources"]), alarm_ids(names[1:100] + names[101:102]))
        for logical in alarm_ids(names[1:100]):
            self.assertEqual(first_after["Resources"][logical], first["Resources"][logical])
        self.assertEqual(self.stack_body(stack)["Metadata"]["RedriveAlarmStacks"],
                         {"AlarmStack001": names[1:100] + [names[101]], "AlarmStack002": [names[100]]})

        destroyed = self.run_script(DESTROY, env)
        self.assertEqual(destroyed.returncode, 0, destroyed.stderr)
        self.assertIsNone(self.stack_status(stack))
        for name in list(nested.values()) + list(after.values()):
            self.assertIsNone(self.stack_status(name), name)

    def test_an_install_with_its_alarms_in_the_stack_itself_moves_them_into_nested_stacks(self):
        """An install from before the nested stacks has each DLQ's alarms in the resources stack:
        deploy removes them from it in an update of its own, then adds the nested stack (in one
        update, CloudFormation would create each alarm under its name while the old one exists)."""
        stack = support.unique("rdv")
        prefix = support.unique("u")
        names = [self.user_queue(f"{prefix}-{i}-dlq").rsplit("/", 1)[1] for i in range(2)]
        env = self.settings(stack, PROTECT_DLQS=",".join(names))
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        self.assertNotIn("moving the per-DLQ alarms", result.stderr)
        # The stack as the previous release left it: the alarms in it, no nested stack.
        cfn = self.moto.client("cloudformation")
        old = self.stack_body(stack)
        arns = {n: f"arn:aws:sqs:{support.REGION}:{self.moto.account_id()}:{n}" for n in names}
        for logical in [k for k, r in old["Resources"].items() if r["Type"] == "AWS::CloudFormation::Stack"]:
            del old["Resources"][logical]
        del old["Metadata"]["RedriveAlarmStacks"]
        for name in names:
            old["Resources"].update(attach_template.per_dlq_alarms({"name": name, "arn": arns[name], "sources": []}))
        parameters = [{"ParameterKey": p["ParameterKey"], "UsePreviousValue": True}
                      for p in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Parameters"]]
        cfn.update_stack(StackName=stack, TemplateBody=json.dumps(old), Parameters=parameters,
                         Capabilities=["CAPABILITY_IAM"])
        self.assertEqual(self.nested_stacks(stack), {})
        # moto 5.2.5 deletes a resource an update removes but keeps it in the stack's map, and
        # hands the deleted one back when a later update adds its logical id again (AWS creates
        # it anew): forgotten here, as a stack that never had it.
        from moto.cloudformation.models import cloudformation_backends

        for parent in cloudformation_backends[self.moto.account_id()][support.REGION].stacks.values():
            if parent.name == stack:
                parent.resource_map._parsed_resources.pop("AlarmStack001", None)

        upgraded = self.run_script(DEPLOY, env)
        self.assertEqual(upgraded.returncode, 0, upgraded.stderr)
        log = upgraded.stderr.splitlines()
        moving = [i for i, line in enumerate(log) if line.startswith(f"==> moving the per-DLQ alarms of {stack}")]
        updates = [i for i, line in enumerate(log) if line == f"==> updating stack {stack}"]
        self.assertEqual((len(moving), len(updates)), (1, 2), upgraded.stderr)
        self.assertLess(moving[0], updates[0])
        body = self.stack_body(stack)
        self.assertEqual([k for k, r in body["Resources"].items() if r["Type"] == "AWS::CloudWatch::Alarm"
                          and k.startswith("Dlq")], [])
        nested = self.nested_stacks(stack)
        self.assertEqual(sorted(nested), ["AlarmStack001"])
        self.assertEqual(set(self.stack_body(nested["AlarmStack001"])["Resources"]),
                         {attach_template.logical_id(n, k) for n in names
                          for k in ("NotEmpty", "Age", "FinalAge", "Daily")})
        # Once moved, the next deploy is an ordinary one.
        again = self.run_script(DEPLOY, env)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertNotIn("moving the per-DLQ alarms", again.stderr)

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

    # Some 470 queues on moto, resolved in one process (infra/attach_queues.py): about 20 s.
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
        result = support.run(DEPLOY, self.settings(stack, PROTECT_DLQS=",".join(names)))
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

    def test_the_console_action_gets_the_protected_queues_keys_it_receives_and_sends_with(self):
        """Queues under a customer managed key: the triage console's action receives from the
        DLQs (kms:Decrypt on their keys) and sends a replay's canary to the sources (and
        kms:GenerateDataKey on theirs), and never sends to a DLQ; the widget's gets no key."""
        dlq_key = "arn:aws:kms:eu-west-1:123456789012:key/11111111-1111-1111-1111-111111111111"
        source_key = "arn:aws:kms:eu-west-1:123456789012:key/22222222-2222-2222-2222-222222222222"
        dlqs = self.dlqs(1)
        dlqs[0].update(key=dlq_key, source_keys=[source_key])
        resources = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), dlqs)["Resources"]
        statements = {s.get("Sid"): s for s in
                      resources["TriageActionRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]}
        self.assertEqual((statements["DecryptProtectedDlqs"]["Action"], statements["DecryptProtectedDlqs"]["Resource"]),
                         ("kms:Decrypt", [dlq_key]))
        self.assertEqual((sorted(statements["EncryptProtectedQueues"]["Action"]),
                          statements["EncryptProtectedQueues"]["Resource"]),
                         (["kms:Decrypt", "kms:GenerateDataKey"], [source_key]))
        self.assertNotIn("kms:", json.dumps(resources["TriageWidgetRole"]))

    def test_no_queue_but_the_poison_queue_and_per_dlq_alarms_on_the_trigger_topic(self):
        template, bodies = attach_template.build_stacks(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(2))
        resources = template["Resources"]
        self.assertEqual([k for k, r in resources.items() if r["Type"] == "AWS::SQS::Queue"], ["PoisonQueue"])
        self.assertNotIn("ConsumerRole", resources)
        # The per-DLQ alarms are in the nested stack, which gets the trigger topic from the parent.
        self.assertEqual([k for k, r in resources.items() if r["Type"] == "AWS::CloudFormation::Stack"],
                         ["AlarmStack001"])
        self.assertEqual(resources["AlarmStack001"]["Properties"]["Parameters"]["TriggerTopicArn"],
                         {"Ref": "TriggerTopic"})
        self.assertEqual(resources["AlarmStack001"]["Properties"]["Parameters"]["InstallName"],
                         {"Ref": "AWS::StackName"})
        child = attach_template.children_of(template, bodies)["AlarmStack001"]
        triggers = [r["Properties"] for r in child["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"
                    and r["Properties"].get("AlarmActions") == [{"Ref": "TriggerTopicArn"}]]
        self.assertEqual(sorted(p["Dimensions"][0]["Value"] for p in triggers), ["q0-dlq", "q1-dlq"])
        for p in triggers:
            self.assertEqual((p["Namespace"], p["MetricName"]), ("AWS/SQS", "ApproximateNumberOfMessagesVisible"))
            # Named after the install (the re-driver's grant names STACK-dlq-not-empty-*), not
            # after the nested stack.
            self.assertEqual(p["AlarmName"]["Fn::Sub"][0], "${InstallName}-dlq-not-empty-${Queue}")
        self.assertEqual(len(child["Resources"]), 2 * attach_template.PER_DLQ_RESOURCES)
        self.assertNotIn("AWS::StackName", json.dumps(child))

    def test_each_dlq_keeps_its_nested_stack_when_others_come_and_go(self):
        """250 DLQs: three nested stacks (100, 100, 50). Then one DLQ of the first goes and two
        new ones come: the first stack takes one (its free place), the third the other; the
        second is untouched (same template URL), and every DLQ that stayed keeps its stack and
        its alarms' logical ids."""
        load = lambda: support.load_template(support.RESOURCES_TEMPLATE)  # noqa: E731
        dlqs = self.dlqs(250)
        before, before_bodies = attach_template.build_stacks(load(), dlqs, "rdx")
        assignment = before["Metadata"][attach_template.ASSIGNMENT_KEY]
        self.assertEqual({k: len(v) for k, v in assignment.items()},
                         {"AlarmStack001": 100, "AlarmStack002": 100, "AlarmStack003": 50})
        for logical, child in attach_template.children_of(before, before_bodies).items():
            self.assertLessEqual(len(child["Resources"]), 500, logical)
        with tempfile.TemporaryDirectory() as work:
            previous = Path(work) / "previous.json"
            # As get-template returns it: the body sent as a string.
            previous.write_text(json.dumps(json.dumps(before)))
            kept = attach_template.previous_assignment(previous)
        self.assertEqual(kept, assignment)
        gone = assignment["AlarmStack001"][5]
        new = [{"name": f"new{i}-dlq", "arn": f"arn:aws:sqs:eu-west-1:123456789012:new{i}-dlq", "sources": []}
               for i in range(2)]
        after_dlqs = [d for d in dlqs if d["name"] != gone] + new
        after, after_bodies = attach_template.build_stacks(load(), after_dlqs, "rdx", previous=kept)
        moved = after["Metadata"][attach_template.ASSIGNMENT_KEY]
        self.assertEqual(moved["AlarmStack001"], [n for n in assignment["AlarmStack001"] if n != gone] + ["new0-dlq"])
        self.assertEqual(moved["AlarmStack002"], assignment["AlarmStack002"])
        self.assertEqual(moved["AlarmStack003"], assignment["AlarmStack003"] + ["new1-dlq"])
        url = lambda t, k: t["Resources"][k]["Properties"]["TemplateURL"]  # noqa: E731
        self.assertEqual(url(after, "AlarmStack002"), url(before, "AlarmStack002"))
        self.assertNotEqual(url(after, "AlarmStack001"), url(before, "AlarmStack001"))
        old_children = attach_template.children_of(before, before_bodies)
        new_children = attach_template.children_of(after, after_bodies)
        for logical in old_children:
            stayed = {attach_template.logical_id(n, kind) for n in assignment[logical] if n != gone
                      for kind in ("NotEmpty", "Age", "FinalAge", "Daily")}
            self.assertLessEqual(stayed, set(old_children[logical]["Resources"]), logical)
            for k in stayed:  # the same resources, in the same stack
                self.assertEqual(old_children[logical]["Resources"][k], new_children[logical]["Resources"][k])
        # A stack whose DLQs all went goes with them; a new DLQ then fills the first with room.
        only_third = [d for d in after_dlqs if d["name"] in moved["AlarmStack003"]]
        shrunk = attach_template.build(load(), only_third, "rdx", previous=moved)
        self.assertEqual(list(shrunk["Metadata"][attach_template.ASSIGNMENT_KEY]), ["AlarmStack003"])
        grown = attach_template.assign([d["name"] for d in only_third] + [f"x{i}" for i in range(60)],
                                       shrunk["Metadata"][attach_template.ASSIGNMENT_KEY])
        self.assertEqual({k: len(v) for k, v in grown.items()}, {"AlarmStack001": 11, "AlarmStack003": 100})

    def test_the_fleet_dashboard_has_a_triage_widget_per_dlq_and_the_poison_queue(self):
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(3))
        text, variables = template["Resources"]["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"]
        self.assertEqual(variables, {"Poison": {"Fn::GetAtt": ["PoisonQueue", "QueueName"]}})
        custom = [w for w in json.loads(text)["widgets"] if w["type"] == "custom"]
        # The queue's name, as the widget function reads params.queue (one of its queues).
        self.assertEqual([w["properties"]["params"] for w in custom],
                         [{"queue": "q0-dlq"}, {"queue": "q1-dlq"}, {"queue": "q2-dlq"}, {"queue": "${Poison}"}])
        for w in custom:
            self.assertEqual(w["properties"]["endpoint"], "arn:${AWS::Partition}:lambda:${AWS::Region}:"
                             "${AWS::AccountId}:function:${AWS::StackName}-triage-widget:live")
            self.assertEqual(w["properties"]["updateOn"], {"refresh": True, "resize": True, "timeRange": True})
            self.assertEqual(w["properties"]["title"], "Triage: " + w["properties"]["params"]["queue"])
        # No two widgets overlap.
        cells = [(w["x"], w["y"]) for w in json.loads(text)["widgets"]]
        self.assertEqual(len(cells), len(set(cells)))
        # And it passes the quota checks (custom widgets count; each endpoint a Lambda ARN of the region).
        import quotas

        self.assertEqual(quotas.over(quotas.check_template(template, 0)), [])

    def test_a_stack_with_the_alarms_in_itself_is_told_apart_and_the_interim_template_has_none(self):
        load = lambda: support.load_template(support.RESOURCES_TEMPLATE)  # noqa: E731
        dlqs = self.dlqs(2)
        current = attach_template.build(load(), dlqs)
        interim = attach_template.build(load(), dlqs, alarms=False)
        self.assertEqual([k for k, r in interim["Resources"].items()
                          if r["Type"] in ("AWS::CloudFormation::Stack", "AWS::CloudWatch::Alarm") and k.startswith(
                              ("Dlq", "AlarmStack"))], [])
        self.assertNotIn(attach_template.ASSIGNMENT_KEY, interim["Metadata"])
        self.assertEqual(interim["Metadata"][attach_template.METADATA_KEY], current["Metadata"][attach_template.METADATA_KEY])
        before = json.loads(json.dumps(interim))
        for dlq in dlqs:
            before["Resources"].update(attach_template.per_dlq_alarms(dlq))
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "t.json"
            for template, inline in ((before, True), (current, False), (interim, False), (load(), False)):
                path.write_text(json.dumps(json.dumps(template)))  # as get-template returns it
                self.assertEqual(attach_template.has_inline_alarms(path), inline)
            path.write_text("")  # no stack yet
            self.assertFalse(attach_template.has_inline_alarms(path))

    def test_a_nested_stack_above_the_resource_limit_is_named(self):
        # A previous deploy that put more DLQs in one nested stack than CloudFormation allows
        # resources for (kept: no DLQ moves) is refused, naming the stack; deploy's quota check
        # renders it anyway, so that quotas.py names the quota it exceeds.
        dlqs = self.dlqs(126)
        previous = {"AlarmStack001": [d["name"] for d in dlqs]}
        with self.assertRaises(SystemExit) as refused:
            attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), dlqs, previous=previous)
        self.assertIn("504 resources in nested stack AlarmStack001", str(refused.exception))
        import quotas

        template, bodies = attach_template.build_stacks(support.load_template(support.RESOURCES_TEMPLATE), dlqs,
                                                        resource_limit=False, previous=previous)
        children = {k: (json.loads(b), len(b)) for k, b in bodies.items()}
        self.assertEqual([what for what, _, _ in quotas.over(quotas.check_stacks(template, 0, children))],
                         ["nested stack AlarmStack001: resources"])

    def test_grants_on_the_protected_queues_do_not_grow_with_the_fleet(self):
        """Every policy has the same size at 1 DLQ and at 100: the protected queues are granted
        by this install's tag, not by ARN."""
        def sizes(n: int) -> dict:
            template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(n), "rdx")
            return {k: len(json.dumps(r["Properties"].get("Policies", r["Properties"].get("PolicyDocument"))))
                    for k, r in template["Resources"].items() if r["Type"].startswith("AWS::IAM::")}

        self.assertEqual(sizes(1), sizes(100))

    def test_every_tag_conditioned_statement_is_one_aws_evaluates_the_tag_for(self):
        """IAM evaluates aws:ResourceTag for SQS's queue resource operations only (ListQueues has
        no resource); a statement granted by tag holds those actions and nothing else, and one
        that would hold another is refused at rendering."""
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), self.dlqs(2), "rdx")
        key = "aws:ResourceTag/redrive-install:rdx"
        conditioned = []
        for logical, resource in template["Resources"].items():
            props = resource.get("Properties", {})
            documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
            if "PolicyDocument" in props and resource["Type"].startswith("AWS::IAM::"):
                documents.append(props["PolicyDocument"])
            for document in documents:
                for statement in document["Statement"]:
                    text = json.dumps(statement)
                    if "aws:ResourceTag" in text:
                        conditioned.append((logical, statement))
                    # No statement names a protected queue by ARN any more.
                    self.assertNotIn(":q0-dlq", text)
                    self.assertNotIn(":q0\"", text)
        self.assertGreaterEqual({logical for logical, _ in conditioned},
                                {"RedriverRole", "ArchiverRole", "OperatorPolicy", "TriageReadPolicy"})
        for logical, statement in conditioned:
            actions = support.as_list(statement["Action"])
            self.assertTrue(set(actions) <= attach_template.QUEUE_RESOURCE_ACTIONS, (logical, actions))
            self.assertNotIn("sqs:ListQueues", actions)
            self.assertEqual(list(statement["Condition"]), ["StringEquals"])
            self.assertEqual(list(statement["Condition"]["StringEquals"]), [key])
            self.assertEqual(statement["Resource"],
                             {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:*"})
        with self.assertRaises(SystemExit) as refused:
            attach_template.tagged_statement({"Sid": "X", "Effect": "Allow", "Action": ["sqs:ListQueues"]},
                                             "", "k", ["dlq"])
        self.assertIn("sqs:ListQueues", str(refused.exception))

    def test_a_queue_both_dlq_and_source_gets_both_roles_and_the_template_lists_what_deploy_tags(self):
        dlqs = [{"name": "a-dlq", "arn": "arn:aws:sqs:eu-west-1:123456789012:a-dlq", "sources": [
                    "arn:aws:sqs:eu-west-1:123456789012:b-dlq", "arn:aws:sqs:eu-west-1:123456789012:a"]},
                {"name": "b-dlq", "arn": "arn:aws:sqs:eu-west-1:123456789012:b-dlq",
                 "sources": ["arn:aws:sqs:eu-west-1:123456789012:b"]}]
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), dlqs, "rdx")
        with tempfile.TemporaryDirectory() as work:
            path = Path(work) / "t.json"
            path.write_text(json.dumps(template))
            listed = attach_template.tagged_queues(path)
            # As get-template returns a body sent as a string.
            path.write_text(json.dumps(json.dumps(template)))
            self.assertEqual(attach_template.tagged_queues(path), listed)
            path.write_text(json.dumps(support.load_template(support.RESOURCES_TEMPLATE)))
            self.assertEqual(attach_template.tagged_queues(path), [])
        self.assertEqual(listed, [("redrive-install:rdx", "a", "source"), ("redrive-install:rdx", "a-dlq", "dlq"),
                                  ("redrive-install:rdx", "b", "source"),
                                  ("redrive-install:rdx", "b-dlq", "dlq+source")])


class AttachGrantsUnderIam(support.IamMotoTestCase):
    """The attach roles as AWS enforces them: rendered by tests/iam_policy.py (the renderer the
    IAM-enforced Lambda tests use) into the moto of tests/moto_launcher.py, which authorizes every
    call. moto does not evaluate conditions: the renderer turns each aws:ResourceTag condition
    into the queues that carry the tag, so a queue without this install's tag is denied."""

    STACK = "rdi"

    def test_a_role_reaches_the_queues_tagged_for_its_install_and_no_other(self):
        sys.path.insert(0, str(support.REPO / "tests"))
        import iam_policy

        sqs = self.client("sqs")
        url = {name: sqs.create_queue(QueueName=name)["QueueUrl"]
               for name in ("orders-dlq", "orders", "chain-dlq", "stranger", "other-dlq", f"{self.STACK}-poison")}
        arn = {name: f"arn:aws:sqs:us-east-1:123456789012:{name}" for name in url}
        dlqs = [{"name": "orders-dlq", "arn": arn["orders-dlq"], "sources": [arn["orders"], arn["chain-dlq"]]},
                {"name": "chain-dlq", "arn": arn["chain-dlq"], "sources": []}]
        template = attach_template.build(support.load_template(support.RESOURCES_TEMPLATE), dlqs, self.STACK)
        # What deploy does: this install's tag on the protected queues; another install's on one more.
        for key, name, value in attach_template.tagged_queues(self.write(template)):
            sqs.tag_queue(QueueUrl=url[name], Tags={key: value})
        sqs.tag_queue(QueueUrl=url["other-dlq"], Tags={"redrive-install:other": "dlq"})
        tagged = {arn[n]: sqs.list_queue_tags(QueueUrl=u).get("Tags", {}) for n, u in url.items()}
        values = {"AWS::StackName": self.STACK, "PoisonQueue": f"{self.STACK}-poison"}

        redriver = self.client("sqs", self.user("attach-redriver", iam_policy.render_template_policies(
            template, "RedriverRole", values, tagged)))
        for dlq in ("orders-dlq", "chain-dlq"):
            redriver.receive_message(QueueUrl=url[dlq], WaitTimeSeconds=0)
            redriver.list_queue_tags(QueueUrl=url[dlq])
        redriver.send_message(QueueUrl=url["orders"], MessageBody="copy")
        redriver.send_message(QueueUrl=url["chain-dlq"], MessageBody="copy")  # a DLQ that is a source
        for name in ("stranger", "other-dlq"):
            self.assertTrue(self.denied(lambda: redriver.receive_message(QueueUrl=url[name])), name)
            self.assertTrue(self.denied(lambda: redriver.send_message(QueueUrl=url[name], MessageBody="x")), name)
        # A source is sent to, never drained.
        self.assertTrue(self.denied(lambda: redriver.receive_message(QueueUrl=url["orders"])))

        # The triage console's roles read the depth of the protected DLQs and the poison queue;
        # only the action's moves a group's messages: received from the protected DLQs and the
        # poison queue, sent to the protected sources (a replay's canary), nothing else.
        for role in ("TriageWidgetRole", "TriageActionRole"):
            console = self.client("sqs", self.user(f"attach-{role}", iam_policy.render_template_policies(
                template, role, values, tagged)))
            for name in ("orders-dlq", "chain-dlq", f"{self.STACK}-poison"):
                console.get_queue_attributes(QueueUrl=url[name], AttributeNames=["ApproximateNumberOfMessages"])
            for name in ("stranger", "other-dlq"):
                self.assertTrue(self.denied(lambda: console.get_queue_attributes(
                    QueueUrl=url[name], AttributeNames=["ApproximateNumberOfMessages"])), (role, name))
                self.assertTrue(self.denied(lambda: console.receive_message(QueueUrl=url[name])), (role, name))
                self.assertTrue(self.denied(lambda: console.send_message(QueueUrl=url[name], MessageBody="x")),
                                (role, name))
            if role == "TriageWidgetRole":
                self.assertTrue(self.denied(lambda: console.receive_message(QueueUrl=url["orders-dlq"])), role)
                self.assertTrue(self.denied(lambda: console.send_message(QueueUrl=url["orders"], MessageBody="x")))
                self.assertTrue(self.denied(lambda: console.get_queue_attributes(
                    QueueUrl=url["orders"], AttributeNames=["ApproximateNumberOfMessages"])))
            else:
                for name in ("orders-dlq", f"{self.STACK}-poison"):
                    console.receive_message(QueueUrl=url[name], WaitTimeSeconds=0)
                console.list_dead_letter_source_queues(QueueUrl=url["orders-dlq"])
                # A source is sent to (the canary), never drained.
                console.send_message(QueueUrl=url["orders"], MessageBody="{}")
                self.assertTrue(self.denied(lambda: console.receive_message(QueueUrl=url["orders"])))

        archiver = self.client("sqs", self.user("attach-archiver", iam_policy.render_template_policies(
            template, "ArchiverRole", values, tagged)))
        archiver.receive_message(QueueUrl=url["orders-dlq"], WaitTimeSeconds=0)
        archiver.list_queue_tags(QueueUrl=url["orders-dlq"])
        self.assertTrue(self.denied(lambda: archiver.receive_message(QueueUrl=url["orders"])))
        self.assertTrue(self.denied(lambda: archiver.receive_message(QueueUrl=url["stranger"])))

        operator = self.client("sqs", self.user("attach-operator", iam_policy.render_template_policies(
            template, "OperatorPolicy", values, tagged)))
        operator.get_queue_attributes(QueueUrl=url["orders-dlq"], AttributeNames=["All"])
        operator.send_message(QueueUrl=url["orders"], MessageBody="replay")
        self.assertTrue(self.denied(lambda: operator.get_queue_attributes(QueueUrl=url["stranger"],
                                                                          AttributeNames=["All"])))
        # Without the queues' tags the renderer refuses, rather than grant every queue.
        with self.assertRaises(ValueError):
            iam_policy.render_template_policies(template, "RedriverRole", values)

    def write(self, template: dict) -> Path:
        directory = Path(tempfile.mkdtemp())
        self.addCleanup(__import__("shutil").rmtree, directory, True)
        path = directory / "template.json"
        path.write_text(json.dumps(template), encoding="utf-8")
        return path


if __name__ == "__main__":
    unittest.main()

"""`make deploy` through CloudFormation change sets, and `make plan` (infra/deploy.sh --plan),
against a moto server.

Deploy prints each stack's change set before it executes it, says "no changes" for a stack that
is up to date, and stops before a change set that replaces or removes a queue, a table or a
bucket unless ALLOW_REPLACEMENT=true. Plan runs deploy's checks, prints both stacks' change sets
and the functions deploy would create or update, and leaves nothing behind: no stack (not even
the empty REVIEW_IN_PROGRESS one a CREATE change set makes), no queue, no function, no build.

moto 5.2.5 executes change sets only in part and lists no change for a parameter alone;
support.Moto teaches it both as AWS documents them. It never says whether a Modify replaces the
resource: the test of the replacement guard answers DescribeChangeSet as AWS does (Replacement
True) through a stand-in AWS CLI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import support

DEPLOY = support.MAKE_DEPLOY
PLAN = ["make", "--no-print-directory", "plan"]
DESTROY = str(support.INFRA / "destroy.sh")
CHANGESET = str(support.INFRA / "changeset.py")
DOWNSTREAM = "https://orders.example.com/ingest"


def section(stdout: str, stack: str) -> list[str]:
    """The lines of one stack's change set in the output: from its `stack NAME:` line to the next
    unindented line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"stack {stack}:"))
    body = []
    for line in lines[start + 1:]:
        if not line.startswith(" "):
            break
        body.append(line)
    return body


def changes(stdout: str, stack: str) -> set[tuple[str, str, str]]:
    """(action, logical id, type) of each change of one stack as printed."""
    found = set()
    for line in section(stdout, stack):
        fields = line.split()
        if len(fields) >= 3:
            found.add((fields[0], fields[1], fields[2]))
    return found


class ChangeSetDeploy(support.DeployTestCase):
    def settings(self, stack: str, **extra: str) -> dict:
        base = {"STACK_NAME": stack, **support.BUILD_SETTINGS, "LAMBDA_DIR": str(self.lambda_dir),
                "DOWNSTREAM_URL": DOWNSTREAM}
        base.update(extra)
        return support.script_env(self.moto, **base)

    def logging_aws(self, extra: str = "") -> tuple[str, Path]:
        """The AWS CLI, each call's arguments appended to STATE/calls."""
        return self.shim("aws", f'printf "%s\\n" "$*" >>"$STATE/calls"\n{extra}exec {support.tool("aws")} "$@"\n')

    def stack_status(self, name: str) -> str | None:
        for summary in self.moto.client("cloudformation").list_stacks()["StackSummaries"]:
            if summary["StackName"] == name and summary["StackStatus"] != "DELETE_COMPLETE":
                return summary["StackStatus"]
        return None

    def snapshot(self, stack: str) -> dict:
        """What a plan must leave as it was: both stacks' status, template and parameters, the
        functions' live versions, the source queue's redrive policy."""
        cfn = self.moto.client("cloudformation")
        lam = self.moto.client("lambda")
        state = {}
        for name in (stack, f"{stack}-wiring"):
            described = cfn.describe_stacks(StackName=name)["Stacks"][0]
            state[name] = (described["StackStatus"], cfn.get_template(StackName=name)["TemplateBody"],
                           sorted((p["ParameterKey"], p["ParameterValue"]) for p in described.get("Parameters", [])))
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            state[function] = lam.get_alias(FunctionName=f"{stack}-{function}", Name="live")["FunctionVersion"]
        state["maxReceiveCount"] = self.max_receive_count(stack)
        return state

    def max_receive_count(self, stack: str) -> int:
        sqs = self.moto.client("sqs")
        url = sqs.get_queue_url(QueueName=f"{stack}-source")["QueueUrl"]
        policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
        return int(json.loads(policy)["maxReceiveCount"])

    # ---------------------------------------------------------------- make plan on a fresh account
    def test_plan_on_a_fresh_account_shows_what_deploy_would_add_and_leaves_nothing(self):
        stack = support.unique("pln")
        # Plan builds nothing: a cargo-lambda that records any call, an empty LAMBDA_DIR.
        cargo_lambda, cargo_state = self.shim("cargo-lambda", 'echo "$*" >>"$STATE/called"\nexit 1\n')
        lambda_dir = Path(tempfile.mkdtemp(prefix="redrive-plan-lambda-"))
        self.addCleanup(shutil.rmtree, lambda_dir, True)
        env = self.settings(stack, CARGO_LAMBDA=cargo_lambda, LAMBDA_DIR=str(lambda_dir))

        result = support.run(PLAN, env)

        self.assertEqual(result.returncode, 0, result.stderr)
        added = changes(result.stdout, stack)
        for logical, kind in (("SourceQueue", "AWS::SQS::Queue"), ("DeadLetterQueue", "AWS::SQS::Queue"),
                              ("PoisonQueue", "AWS::SQS::Queue"), ("CircuitTable", "AWS::DynamoDB::Table"),
                              ("ArchiveBucket", "AWS::S3::Bucket"), ("RedriverRole", "AWS::IAM::Role")):
            self.assertIn(("Add", logical, kind), added, result.stdout)
        self.assertEqual({action for action, _, _ in added}, {"Add"})
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            self.assertRegex(result.stdout, rf"(?m)^\s+create\s+{stack}-{function}$")
        # The wiring stack's parameters come from the resources stack: its template's resources.
        self.assertIn(f"stack {stack}-wiring: created after stack {stack}", result.stdout)
        self.assertIn(("Add", "ConsumerEventSource", "AWS::Lambda::EventSourceMapping"),
                      changes(result.stdout, f"{stack}-wiring"))
        # Nothing is left: no stack (the CREATE change set's REVIEW_IN_PROGRESS stack is deleted
        # again), no queue, table, bucket or function, no template in the template bucket, no build.
        self.assertIsNone(self.stack_status(stack))
        self.assertIsNone(self.stack_status(f"{stack}-wiring"))
        self.assertEqual(self.moto.client("sqs").list_queues(QueueNamePrefix=stack).get("QueueUrls", []), [])
        self.assertFalse([t for t in self.moto.client("dynamodb").list_tables()["TableNames"] if t.startswith(stack)])
        s3 = self.moto.client("s3")
        buckets = [b["Name"] for b in s3.list_buckets()["Buckets"]]
        self.assertFalse([b for b in buckets if b.startswith(stack.lower())], buckets)
        for bucket in buckets:
            self.assertEqual(s3.list_objects_v2(Bucket=bucket, Prefix=stack).get("KeyCount"), 0, bucket)
        self.assertFalse([f["FunctionName"] for f in self.moto.client("lambda").list_functions()["Functions"]
                          if f["FunctionName"].startswith(stack)])
        self.assertFalse((cargo_state / "called").exists())
        self.assertEqual(list(lambda_dir.iterdir()), [])

    def test_plan_in_attach_mode_resolves_the_dlqs_and_touches_none_of_them(self):
        # GIVEN a DLQ the user already has, fed by a source queue
        stack = support.unique("pla")
        sqs = self.moto.client("sqs")
        dlq = sqs.create_queue(QueueName=f"{stack}-orders-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        source = sqs.create_queue(QueueName=f"{stack}-orders", Attributes={
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3})})["QueueUrl"]
        env = support.script_env(self.moto, STACK_NAME=stack, **support.BUILD_SETTINGS,
                                 LAMBDA_DIR=str(self.lambda_dir), PROTECT_DLQS=f"{stack}-orders-dlq")

        # WHEN make plan runs in attach mode
        result = support.run(PLAN, env)

        # THEN it shows attach mode's template (our poison queue, none of the user's queues, the
        # alarms' nested stack) and leaves the user's queues untagged, with no stack and no queue
        # of ours
        self.assertEqual(result.returncode, 0, result.stderr)
        added = {logical for _, logical, _ in changes(result.stdout, stack)}
        self.assertIn("PoisonQueue", added)
        self.assertNotIn("SourceQueue", added)
        self.assertNotIn("DeadLetterQueue", added)
        # The DLQ's alarms in a nested stack, whose template plan uploaded for the change set and
        # deleted again.
        self.assertIn(("Add", "AlarmStack001", "AWS::CloudFormation::Stack"), changes(result.stdout, stack))
        s3 = self.moto.client("s3")
        for bucket in (b["Name"] for b in s3.list_buckets()["Buckets"]):
            self.assertEqual(s3.list_objects_v2(Bucket=bucket, Prefix=stack).get("KeyCount"), 0, bucket)
        self.assertNotRegex(result.stdout, rf"(?m)^\s+create\s+{stack}-consumer$")
        for url in (dlq, source):
            self.assertEqual(sqs.list_queue_tags(QueueUrl=url).get("Tags", {}), {}, url)
        self.assertEqual(sorted(sqs.list_queues(QueueNamePrefix=stack)["QueueUrls"]), sorted([dlq, source]))
        self.assertIsNone(self.stack_status(stack))

        # A queue that does not exist stops plan as it stops deploy, naming it.
        missing = support.run(PLAN, {**env, "PROTECT_DLQS": f"{stack}-missing-dlq"})
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn(f"{stack}-missing-dlq", missing.stderr)
        self.assertIsNone(self.stack_status(stack))

    # ---------------------------------------------------------------- deploy, plan a change, redeploy
    def test_deploy_shows_each_change_set_first_plan_shows_a_change_and_changes_nothing(self):
        stack = support.unique("pld")
        aws, state = self.logging_aws()
        env = self.settings(stack, AWS_CLI=aws)

        first = support.run(DEPLOY, env)

        self.assertEqual(first.returncode, 0, first.stderr)
        self.addCleanup(support.run, [DESTROY], env)
        self.assertIn(("Add", "SourceQueue", "AWS::SQS::Queue"), changes(first.stdout, stack))
        self.assertIn(("Add", "ConsumerEventSource", "AWS::Lambda::EventSourceMapping"),
                      changes(first.stdout, f"{stack}-wiring"))
        # Each stack through its change set: created, read (and printed), then executed.
        calls = (state / "calls").read_text(encoding="utf-8").splitlines()
        self.assertFalse([c for c in calls if " create-stack " in f" {c} " or " update-stack " in f" {c} "])
        for name in (stack, f"{stack}-wiring"):
            created = next(i for i, c in enumerate(calls) if "create-change-set" in c and f"--stack-name {name} " in c)
            executed = next(i for i, c in enumerate(calls) if "execute-change-set" in c and i > created)
            self.assertTrue([c for c in calls[created:executed] if "describe-change-set" in c], name)
            self.assertIn("--change-set-type CREATE", calls[created])
        before = self.snapshot(stack)

        # A changed setting of each stack: plan shows it as a Modify of the resource that uses it.
        (state / "calls").unlink()
        plan = support.run(PLAN, self.settings(stack, AWS_CLI=aws, MAX_RECEIVE_COUNT="7", BATCH_SIZE="5"))

        self.assertEqual(plan.returncode, 0, plan.stderr)
        self.assertEqual({(a, logical) for a, logical, _ in changes(plan.stdout, stack)}, {("Modify", "SourceQueue")},
                         plan.stdout)
        self.assertEqual({(a, logical) for a, logical, _ in changes(plan.stdout, f"{stack}-wiring")},
                         {("Modify", "ConsumerEventSource")}, plan.stdout)
        self.assertRegex(plan.stdout, rf"(?m)^\s+update\s+{stack}-redriver\s")
        # ... and leaves both stacks, the functions and the queue as they were, with no change set.
        self.assertEqual(self.snapshot(stack), before)
        plan_calls = (state / "calls").read_text(encoding="utf-8").splitlines()
        self.assertFalse([c for c in plan_calls if "execute-change-set" in c or "lambda update-" in c
                          or "lambda publish-version" in c], plan_calls)
        cfn = self.moto.client("cloudformation")
        for name in (stack, f"{stack}-wiring"):
            left = [s for s in cfn.list_change_sets(StackName=name)["Summaries"]
                    if s["ExecutionStatus"] != "EXECUTE_COMPLETE"]
            self.assertEqual(left, [], name)

        # The same settings again: nothing to change in either stack; deploy says so and succeeds.
        (state / "calls").unlink()
        again = support.run(DEPLOY, env)

        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn(f"stack {stack}: no changes", again.stdout)
        self.assertIn(f"stack {stack}-wiring: no changes", again.stdout)
        again_calls = (state / "calls").read_text(encoding="utf-8").splitlines()
        self.assertFalse([c for c in again_calls if "execute-change-set" in c], again_calls)
        for name in (stack, f"{stack}-wiring"):
            self.assertEqual(cfn.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"], before[name][0])
            self.assertEqual([s for s in cfn.list_change_sets(StackName=name)["Summaries"]
                              if s["ExecutionStatus"] != "EXECUTE_COMPLETE"], [], name)

    # ---------------------------------------------------------------- a queue replaced
    def test_a_change_set_that_replaces_a_queue_stops_the_deploy_unless_allowed(self):
        stack = support.unique("plr")
        first = support.run(DEPLOY, self.settings(stack))
        self.assertEqual(first.returncode, 0, first.stderr)
        self.addCleanup(support.run, [DESTROY], self.settings(stack))
        self.assertEqual(self.max_receive_count(stack), 5)
        # AWS answers whether a Modify replaces the resource; moto does not. The stand-in AWS CLI
        # answers as AWS would for a change that replaces a queue (Replacement True).
        aws, _ = self.logging_aws(f"""
case " $* " in
    *" describe-change-set "*)
        out=$({support.tool("aws")} "$@") || exit $?
        printf '%s' "$out" | {sys.executable} -c '
import json, sys
described = json.load(sys.stdin)
for change in described.get("Changes", []):
    resource = change["ResourceChange"]
    if resource["Action"] == "Modify":
        resource["Replacement"] = "True" if resource["ResourceType"] == "AWS::SQS::Queue" else "False"
print(json.dumps(described))'
        exit 0 ;;
esac
""")
        changed = self.settings(stack, AWS_CLI=aws, MAX_RECEIVE_COUNT="7")

        refused = support.run(DEPLOY, changed)

        self.assertNotEqual(refused.returncode, 0, refused.stdout)
        self.assertIn("!! replaces SourceQueue (AWS::SQS::Queue)", refused.stdout)
        self.assertIn("ALLOW_REPLACEMENT=true", refused.stderr)
        self.assertIn(f"Stack {stack} was not changed", refused.stderr)
        self.assertEqual(self.max_receive_count(stack), 5)
        cfn = self.moto.client("cloudformation")
        parameters = {p["ParameterKey"]: p["ParameterValue"]
                      for p in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Parameters"]}
        self.assertEqual(parameters["MaxReceiveCount"], "5")
        self.assertEqual([s for s in cfn.list_change_sets(StackName=stack)["Summaries"]
                          if s["ExecutionStatus"] != "EXECUTE_COMPLETE"], [])
        # make plan shows the same change set and says deploy would stop there.
        plan = support.run(PLAN, changed)
        self.assertEqual(plan.returncode, 0, plan.stderr)
        self.assertIn("!! replaces SourceQueue (AWS::SQS::Queue)", plan.stdout)
        self.assertIn("unless ALLOW_REPLACEMENT=true", plan.stdout)

        allowed = support.run(DEPLOY, {**changed, "ALLOW_REPLACEMENT": "true"})

        self.assertEqual(allowed.returncode, 0, allowed.stderr)
        self.assertIn("!! replaces SourceQueue (AWS::SQS::Queue)", allowed.stdout)
        # The change set was executed: the stack has the new setting (moto 5.2.5 does not apply
        # a queue's changed RedrivePolicy on an update, so the queue itself is not asserted).
        parameters = {p["ParameterKey"]: p["ParameterValue"]
                      for p in cfn.describe_stacks(StackName=stack)["Stacks"][0]["Parameters"]}
        self.assertEqual(parameters["MaxReceiveCount"], "7")


class ChangeSetDisplay(unittest.TestCase):
    """infra/changeset.py on DescribeChangeSet answers as AWS gives them (moto leaves out
    Replacement and never nests)."""

    def write(self, directory: Path, name: str, data: dict) -> str:
        path = directory / name
        path.write_text(json.dumps(data), encoding="utf-8")
        return str(path)

    def run_changeset(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, CHANGESET, *args], capture_output=True, text=True, check=False)

    def test_each_change_is_one_line_and_a_replaced_or_removed_data_resource_is_pointed_out(self):
        directory = Path(tempfile.mkdtemp(prefix="redrive-changeset-"))
        self.addCleanup(shutil.rmtree, directory, True)
        nested_arn = "arn:aws:cloudformation:eu-west-1:123456789012:changeSet/redrive-1/nested"

        def change(action, logical, kind, replacement=None, change_set=None):
            resource = {"Action": action, "LogicalResourceId": logical, "ResourceType": kind}
            if replacement:
                resource["Replacement"] = replacement
            if change_set:
                resource["ChangeSetId"] = change_set
            return {"Type": "Resource", "ResourceChange": resource}

        parent = self.write(directory, "parent.json", {
            "Status": "CREATE_COMPLETE", "ExecutionStatus": "AVAILABLE", "StackName": "rd",
            "Changes": [change("Modify", "SourceQueue", "AWS::SQS::Queue", "False"),
                        change("Modify", "CircuitTable", "AWS::DynamoDB::Table", "True"),
                        change("Remove", "ArchiveBucket", "AWS::S3::Bucket"),
                        change("Modify", "RedriverRole", "AWS::IAM::Role", "Conditional"),
                        change("Add", "Alarms", "AWS::CloudFormation::Stack", change_set=nested_arn),
                        change("Modify", "Queues", "AWS::CloudFormation::Stack", "False")]})
        nested = self.write(directory, "nested.json", {
            "ChangeSetId": nested_arn, "StackName": "rd-Alarms-1", "Status": "CREATE_COMPLETE",
            "Changes": [change("Modify", "OrdersDlq", "AWS::SQS::Queue", "Conditional"),
                        change("Add", "OrdersAlarm", "AWS::CloudWatch::Alarm")]})

        status = self.run_changeset("status", parent)
        self.assertEqual(status.stdout.splitlines(), ["CREATE_COMPLETE\tAVAILABLE\t", nested_arn])

        shown = self.run_changeset("show", "rd", parent, nested)
        self.assertEqual(shown.returncode, 3, shown.stderr)
        lines = shown.stdout.splitlines()
        self.assertEqual(lines[0], "stack rd: 6 changes")
        self.assertRegex(shown.stdout, r"(?m)^\s+Modify\s+SourceQueue\s+AWS::SQS::Queue\s+replacement False$")
        self.assertRegex(shown.stdout, r"(?m)^\s+Modify\s+RedriverRole\s+AWS::IAM::Role\s+replacement Conditional$")
        self.assertRegex(shown.stdout, r"(?m)^\s+Remove\s+ArchiveBucket\s+AWS::S3::Bucket$")
        # The nested stack's changes under it, indented further.
        at = next(i for i, line in enumerate(lines) if "Alarms" in line and "AWS::CloudFormation::Stack" in line)
        self.assertRegex(lines[at + 1], r"^ {10}Modify\s+OrdersDlq\s+AWS::SQS::Queue\s+replacement Conditional$")
        self.assertRegex(lines[at + 2], r"^ {10}Add\s+OrdersAlarm\s+AWS::CloudWatch::Alarm$")
        risky = [line for line in lines if line.startswith("!!")]
        self.assertEqual(risky, ["!! replaces CircuitTable (AWS::DynamoDB::Table)",
                                 "!! removes ArchiveBucket (AWS::S3::Bucket)",
                                 "!! replaces OrdersDlq in rd-Alarms-1 (AWS::SQS::Queue) (conditionally)"])

        # Nothing that holds data replaced or removed: exit 0, no `!!` line.
        safe = self.write(directory, "safe.json", {"Status": "CREATE_COMPLETE", "Changes": [
            change("Modify", "SourceQueue", "AWS::SQS::Queue", "False"),
            change("Modify", "RedriverRole", "AWS::IAM::Role", "True"),
            change("Remove", "OldAlarm", "AWS::CloudWatch::Alarm")]})
        shown = self.run_changeset("show", "rd", safe)
        self.assertEqual(shown.returncode, 0, shown.stderr)
        self.assertNotIn("!!", shown.stdout)
        self.assertTrue(shown.stdout.startswith("stack rd: 3 changes\n"))

    def test_a_failed_change_set_reports_its_reason(self):
        directory = Path(tempfile.mkdtemp(prefix="redrive-changeset-"))
        self.addCleanup(shutil.rmtree, directory, True)
        failed = self.write(directory, "failed.json", {
            "Status": "FAILED", "ExecutionStatus": "UNAVAILABLE",
            "StatusReason": "The submitted information didn't contain changes.\nSubmit different information.",
            "Changes": []})
        status = self.run_changeset("status", failed)
        self.assertEqual(status.stdout, "FAILED\tUNAVAILABLE\tThe submitted information didn't contain changes. "
                                        "Submit different information.\n")


if __name__ == "__main__":
    unittest.main()

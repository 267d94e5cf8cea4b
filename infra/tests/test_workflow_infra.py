"""The Step Functions orchestrator's infrastructure: ORCHESTRATOR=lambda|stepfunctions.

What moto 5.2.5 can show is tested by running infra/deploy.sh against it, as a user would: the
task function (cargo lambda deploy, alias live), the state machine's name, role and definition
(the ASL file, rendered into the wiring template), the EventBridge rule with its pattern, role
and input transformer, the roles' policies, no SNS -> re-driver subscription in that mode, and
the switch back to lambda removing all of it.

moto's CloudFormation ignores a state machine's DefinitionSubstitutions, LoggingConfiguration
and StateMachineType and does not create CloudWatch alarms; those are checked statically on the
(rendered) templates below, and by the Guard rules (test_guard.py).
"""

from __future__ import annotations

import copy
import io
import json
import re
import shutil
import tempfile
import unittest
import zipfile
from pathlib import Path

import support

DEPLOY_SCRIPT = str(support.INFRA / "deploy.sh")
DEPLOY = support.MAKE_DEPLOY
DESTROY = str(support.INFRA / "destroy.sh")
ASL = support.INFRA / "statemachine" / "redrive.asl.json"
DOWNSTREAM = "https://orders.example.com/ingest"
LOG_DELIVERY = sorted([
    "logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery", "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries", "logs:PutResourcePolicy", "logs:DescribeResourcePolicies", "logs:DescribeLogGroups",
])


def render(directory: Path, asl: Path = ASL) -> Path:
    """The wiring template as deploy.sh renders it (render_wiring_template in infra/lib.sh)."""
    out = directory / "wiring.rendered.yaml"
    result = support.run(
        ["bash", "-c", '. infra/lib.sh && render_wiring_template "$1" "$2" "$3"', "render",
         str(support.WIRING_TEMPLATE), str(asl), str(out)],
        env=support.script_env(None),
    )
    if result.returncode != 0:
        raise AssertionError(result.stderr)
    return out


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("bootstrap", b"\x7fELF")
    return buffer.getvalue()


def actions(statement: dict) -> list[str]:
    return sorted(support.as_list(statement["Action"]))


def statements(resources: dict, role: str) -> dict[str, dict]:
    return {s["Sid"]: s for s in resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]}


# The SQS adapter the task function drains through (the engine's `impl Queue for SqsQueue`).
ENGINE_SQS = support.REPO / "engine" / "src" / "aws.rs"
# What the task function calls on each queue of the stack, by IAM action (a batch API is
# authorized as its single-message action).
QUEUE_CALLS = {
    "DeadLetterQueue": {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",  # only what a destination acknowledged
        "sqs:ChangeMessageVisibility",  # hold until the delete; release what a drain will not move
        "sqs:GetQueueAttributes",  # depth for the summary; MessageRetentionPeriod, no hop outlives it
        "sqs:SendMessage",  # the hop: a wait beyond DelaySeconds goes back to the DLQ; a rejected copy
    },
    "SourceQueue": {"sqs:SendMessage", "sqs:GetQueueAttributes"},  # the copy; MaximumMessageSize
    "PoisonQueue": {"sqs:SendMessage", "sqs:GetQueueAttributes"},  # isolation; MaximumMessageSize
}
# Calls the engine makes only for the protected DLQs of attach mode (each message's own source,
# checked against the DLQ's sources; the DLQ's redrive:* tags), which the Step Functions
# orchestrator does not serve (deploy.sh refuses the combination).
ATTACH_ONLY_CALLS = {"sqs:ListDeadLetterSourceQueues", "sqs:ListQueueTags"}


def engine_sqs_actions() -> set[str]:
    """The IAM actions of the SQS operations the engine's SQS adapter calls."""
    text = ENGINE_SQS.read_text(encoding="utf-8")
    start = text.index("pub struct SqsQueue")
    end = text.index("pub struct", start + 1)
    operations = set(re.findall(r"\.client\s*\.(\w+)\(\)", text[start:end]))
    if not operations:
        raise AssertionError(f"no SQS call found in {ENGINE_SQS}")
    camel = {"".join(w.title() for w in op.split("_")) for op in operations}
    return {f"sqs:{op.removesuffix('Batch')}" for op in camel}


def sqs_grants(resources: dict, role: str) -> dict[str, set[str]]:
    """Queue (logical id, or the resource as written when it names no queue of the stack) ->
    the SQS actions `role` grants on it."""
    out: dict[str, set[str]] = {}
    for statement in statements(resources, role).values():
        sqs = {a for a in actions(statement) if a.startswith("sqs:")}
        if not sqs:
            continue
        for resource in support.as_list(statement["Resource"]):
            att = resource.get("Fn::GetAtt") if isinstance(resource, dict) else None
            queue = att[0] if att and att[1] == "Arn" else json.dumps(resource)
            out.setdefault(queue, set()).update(sqs)
    return out


class Definition(unittest.TestCase):
    """The ASL file is the definition deployed, and deploy provides every substitution it uses."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.tmp = Path(tempfile.mkdtemp(prefix="redrive-wf-"))
        cls.rendered = support.load_template(render(cls.tmp))
        cls.machine = cls.rendered["Resources"]["StateMachine"]["Properties"]

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_the_asl_file_is_valid_json_with_states(self):
        definition = json.loads(ASL.read_text(encoding="utf-8"))
        self.assertIn(definition["StartAt"], definition["States"])

    def test_the_tasks_that_hold_the_dlqs_lease_get_the_execution_arn(self):
        # The lease (functions/workflow/src/lease.rs): taken by the start action, renewed by
        # checkCircuit, released by summary, each naming the execution.
        states = json.loads(ASL.read_text(encoding="utf-8"))["States"]
        actions = {s["Parameters"]["action"]: s["Parameters"] for s in states.values()
                   if s.get("Type") == "Task" and "action" in s.get("Parameters", {})}
        for action in ("start", "checkCircuit", "summary"):
            self.assertEqual(actions[action].get("executionArn.$"), "$$.Execution.Id", action)

    def test_the_rendered_template_holds_the_asl_file_exactly(self):
        self.assertEqual(self.machine["DefinitionString"], ASL.read_text(encoding="utf-8"))
        raw = support.WIRING_TEMPLATE.read_text(encoding="utf-8")
        self.assertEqual(raw.count("@REDRIVE_ASL@"), 1)

    def test_every_substitution_in_the_asl_is_provided_and_none_is_unused(self):
        used = set(re.findall(r"\$\{([^}]*)\}", ASL.read_text(encoding="utf-8")))
        self.assertTrue(used, "the ASL names its task function by a substitution")
        self.assertEqual(used, set(self.machine["DefinitionSubstitutions"]))

    def test_the_task_function_is_invoked_through_its_live_alias(self):
        arn = self.machine["DefinitionSubstitutions"]["TaskFunctionArn"]["Fn::Sub"]
        self.assertTrue(arn.endswith(":function:${WorkflowFunctionName}:live"), arn)
        role = statements(self.rendered["Resources"], "StateMachineRole")
        self.assertEqual(role["InvokeTaskFunction"]["Resource"]["Fn::Sub"], arn)

    def test_standard_with_logging_and_substitutions(self):
        self.assertEqual(self.machine["StateMachineType"], "STANDARD")
        logging = self.machine["LoggingConfiguration"]
        self.assertEqual(logging["Level"], {"Ref": "WorkflowLogLevel"})
        self.assertEqual(self.rendered["Parameters"]["WorkflowLogLevel"]["AllowedValues"], ["ALL", "ERROR"])
        self.assertEqual(logging["Destinations"][0]["CloudWatchLogsLogGroup"]["LogGroupArn"],
                         {"Ref": "StateMachineLogGroupArn"})

    def test_the_rendered_template_is_cfn_lint_clean(self):
        result = support.run([support.tool("cfn-lint"), str(self.tmp / "wiring.rendered.yaml")],
                             env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_cfn_lint_checks_the_definition_it_embeds(self):
        # A broken state type in the ASL must fail the lint: the lint really reads the definition.
        broken = self.tmp / "broken.asl.json"
        broken.write_text(ASL.read_text(encoding="utf-8").replace('"Type": "Choice"', '"Type": "Choise"', 1),
                          encoding="utf-8")
        bad_dir = self.tmp / "bad"
        bad_dir.mkdir(exist_ok=True)
        bad = render(bad_dir, broken)
        result = support.run([support.tool("cfn-lint"), str(bad)], env=support.script_env(None))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("Choise", result.stdout)

    def test_the_rendered_template_passes_every_guard_rule(self):
        result = support.run(
            [support.cfn_guard(), "validate", "--rules", str(support.GUARD_RULES), "--data",
             str(self.tmp / "wiring.rendered.yaml"), "--show-summary", "fail"],
            env=support.script_env(None),
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

    def test_render_refuses_a_template_without_exactly_one_marker(self):
        template = self.tmp / "no-marker.yaml"
        template.write_text("Resources: {}\n", encoding="utf-8")
        result = support.run(
            ["bash", "-c", '. infra/lib.sh && render_wiring_template "$1" "$2" "$3"', "render",
             str(template), str(ASL), str(self.tmp / "x.yaml")],
            env=support.script_env(None),
        )
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("exactly one @REDRIVE_ASL@ line (found 0)", result.stderr)


class Roles(unittest.TestCase):
    """Least privilege, statically on the templates (moto keeps policies but not their meaning)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.resources = support.load_template(support.RESOURCES_TEMPLATE)["Resources"]
        cls.wiring = support.load_template(support.WIRING_TEMPLATE)["Resources"]

    def test_task_role_grants_exactly_what_workflow_rs_calls(self):
        role = statements(self.resources, "WorkflowRole")
        granted = {a for s in role.values() for a in actions(s)}
        self.assertEqual(sorted(granted), sorted([
            "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
            "sqs:SendMessage", "cloudwatch:PutMetricData", "cloudwatch:DescribeAlarms", "cloudwatch:SetAlarmState",
            "dynamodb:GetItem", "dynamodb:PutItem", "logs:CreateLogStream",
            "logs:PutLogEvents",
        ]))
        # That the code's calls are granted: the task function runs under this role in the
        # IAM-enforced tests (functions/workflow/tests/workflow.rs, e.g.
        # the_task_role_may_write_the_circuit_record).

    def test_task_role_is_scoped_to_this_stack(self):
        role = statements(self.resources, "WorkflowRole")
        self.assertEqual(role["DrainDlq"]["Resource"], {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]})
        self.assertEqual(role["SendToSourceAndPoison"]["Resource"],
                         [{"Fn::GetAtt": ["SourceQueue", "Arn"]}, {"Fn::GetAtt": ["PoisonQueue", "Arn"]}])
        self.assertEqual(role["CircuitRecord"]["Resource"], {"Fn::GetAtt": ["CircuitTable", "Arn"]})
        self.assertEqual(role["WriteOwnLogs"]["Resource"], {"Fn::GetAtt": ["WorkflowLogGroup", "Arn"]})
        self.assertEqual(role["PublishOwnMetrics"]["Condition"],
                         {"StringEquals": {"cloudwatch:namespace": {"Ref": "MetricNamespace"}}})
        # One execution per DLQ is a lease in the circuit table, not a list of executions.
        self.assertNotIn("ListOwnExecutions", role)
        alarm = self.resources["DlqNotEmptyAlarm"]["Properties"]["AlarmName"]["Fn::Sub"]
        self.assertTrue(role["RearmTriggerAlarm"]["Resource"]["Fn::Sub"].endswith(f":alarm:{alarm}"))
        outputs = support.load_template(support.RESOURCES_TEMPLATE)["Outputs"]
        self.assertEqual(outputs["WorkflowTriggerAlarmName"]["Value"]["Fn::Sub"], alarm)

    def test_task_role_grants_each_queue_exactly_the_sqs_calls_the_engine_makes_on_it(self):
        # Every SQS call of the adapter is placed on a queue, and none is imagined.
        self.assertEqual(set().union(*QUEUE_CALLS.values()), engine_sqs_actions() - ATTACH_ONLY_CALLS)
        self.assertEqual(sqs_grants(self.resources, "WorkflowRole"), QUEUE_CALLS)

    def test_a_dlq_grant_without_the_hop_fails_the_check(self):
        resources = copy.deepcopy(self.resources)
        drain = statements(resources, "WorkflowRole")["DrainDlq"]
        drain["Action"] = [a for a in drain["Action"] if a != "sqs:SendMessage"]
        self.assertNotEqual(sqs_grants(resources, "WorkflowRole"), QUEUE_CALLS)
        # Nor does a grant on any queue pass for one on the DLQ.
        resources = copy.deepcopy(self.resources)
        statements(resources, "WorkflowRole")["DrainDlq"]["Resource"] = "*"
        self.assertNotEqual(sqs_grants(resources, "WorkflowRole"), QUEUE_CALLS)

    def test_state_machine_role_invokes_the_alias_and_delivers_logs_only(self):
        role = statements(self.wiring, "StateMachineRole")
        self.assertEqual(sorted(role), ["DeliverExecutionLogs", "InvokeTaskFunction"])
        self.assertEqual(actions(role["InvokeTaskFunction"]), ["lambda:InvokeFunction"])
        self.assertEqual(actions(role["DeliverExecutionLogs"]), LOG_DELIVERY)
        trust = self.wiring["StateMachineRole"]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        self.assertEqual([s["Principal"] for s in trust], [{"Service": "states.amazonaws.com"}])

    def test_eventbridge_role_only_starts_this_state_machine(self):
        role = statements(self.wiring, "StartExecutionRole")
        self.assertEqual(list(role), ["StartWorkflow"])
        self.assertEqual(actions(role["StartWorkflow"]), ["states:StartExecution"])
        self.assertEqual(role["StartWorkflow"]["Resource"], {"Ref": "StateMachine"})

    def test_log_group_and_alarm_name_what_deploy_creates(self):
        outputs = support.load_template(support.RESOURCES_TEMPLATE)["Outputs"]
        function = outputs["WorkflowFunctionName"]["Value"]["Fn::Sub"]
        self.assertEqual(self.resources["WorkflowLogGroup"]["Properties"]["LogGroupName"]["Fn::Sub"],
                         f"/aws/lambda/{function}")
        deploy = Path(DEPLOY_SCRIPT).read_text(encoding="utf-8")
        self.assertIn("WORKFLOW_FUNCTION_NAME=$STACK_NAME-workflow-tasks", deploy)
        self.assertEqual(function, "${AWS::StackName}-workflow-tasks")
        alarm = self.resources["WorkflowExecutionsFailedAlarm"]["Properties"]
        machine = outputs["StateMachineName"]["Value"]["Fn::Sub"]
        metrics = {m["Id"]: m for m in alarm["Metrics"]}
        for metric_id, name in (("failed", "ExecutionsFailed"), ("timedout", "ExecutionsTimedOut")):
            metric = metrics[metric_id]["MetricStat"]["Metric"]
            self.assertEqual((metric["Namespace"], metric["MetricName"]), ("AWS/States", name))
            self.assertTrue(metric["Dimensions"][0]["Value"]["Fn::Sub"].endswith(f":stateMachine:{machine}"))
        self.assertEqual(alarm["AlarmActions"], [{"Ref": "AlertsTopic"}])

    def test_one_orchestrator_at_a_time(self):
        # Everything of the state machine exists only in stepfunctions mode; the SNS path and
        # the re-driver's schedule only in lambda mode.
        for logical in ("StateMachine", "StateMachineRole", "StartExecutionRole", "DlqAlarmStartsWorkflow"):
            self.assertEqual(self.wiring[logical]["Condition"], "UseStepFunctions", logical)
        for logical in ("WorkflowRole", "WorkflowLogGroup", "StateMachineLogGroup", "WorkflowExecutionsFailedAlarm"):
            self.assertEqual(self.resources[logical]["Condition"], "UseStepFunctions", logical)
        for logical in ("RedriverSubscription", "TriggerTopicInvokesRedriver"):
            self.assertEqual(self.wiring[logical]["Condition"], "UseLambda", logical)
        self.assertEqual(self.wiring["RedriverSchedule"]["Condition"], "LambdaSchedule")
        self.assertEqual(self.wiring["WorkflowSchedule"]["Condition"], "WorkflowScheduleEnabled")

    def test_the_alarm_rule_matches_the_dlq_alarm_going_to_alarm(self):
        rule = self.wiring["DlqAlarmStartsWorkflow"]["Properties"]
        pattern = rule["EventPattern"]
        self.assertEqual(pattern["source"], ["aws.cloudwatch"])
        self.assertEqual(pattern["detail-type"], ["CloudWatch Alarm State Change"])
        self.assertEqual(pattern["detail"], {"state": {"value": ["ALARM"]}})
        self.assertTrue(pattern["resources"][0]["Fn::Sub"].endswith(":alarm:${TriggerAlarmName}"))
        (target,) = rule["Targets"]
        self.assertEqual(target["Arn"], {"Ref": "StateMachine"})
        self.assertEqual(target["InputTransformer"], {
            "InputPathsMap": {"alarm": "$.detail.alarmName"},
            "InputTemplate": '{"triggerAlarm": <alarm>}',
        })


class DeployStepFunctions(support.DeployTestCase):
    """infra/deploy.sh with ORCHESTRATOR=stepfunctions against moto, then back to lambda."""

    def env(self, stack: str, **extra: str) -> dict:
        settings = {"STACK_NAME": stack, **support.BUILD_SETTINGS, "LAMBDA_DIR": str(self.lambda_dir),
                    "DOWNSTREAM_URL": DOWNSTREAM}
        settings.update(extra)
        return support.script_env(self.moto, **settings)

    def stack_resources(self, stack: str) -> dict[str, str]:
        cfn = self.moto.client("cloudformation")
        return {r["LogicalResourceId"]: r.get("PhysicalResourceId")
                for r in cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
                if r.get("PhysicalResourceId") and not r["ResourceStatus"].startswith("DELETE")}

    def outputs(self, stack: str) -> dict:
        described = self.moto.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        return {o["OutputKey"]: o["OutputValue"] for o in described.get("Outputs", [])}

    def role_policy(self, role_name: str) -> list[dict]:
        iam = self.moto.client("iam")
        out = []
        for name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
            out.extend(support.policy_document(iam.get_role_policy(RoleName=role_name, PolicyName=name)["PolicyDocument"])["Statement"])
        return out

    def test_stepfunctions_deploys_the_state_machine_and_destroy_removes_it(self):
        stack = support.unique("rdw")
        account = self.moto.account_id()
        arn = lambda service, rest: f"arn:aws:{service}:{support.REGION}:{account}:{rest}"  # noqa: E731
        # A settings file of an earlier release still sets the hold-and-search settings: the
        # deploy goes on, says they are ignored, and they never reach the task function (whose
        # init refuses them).
        env = self.env(stack, ORCHESTRATOR="stepfunctions", WORKFLOW_BACKOFF_MAX_SECONDS="7200",
                       WORKFLOW_BATCH_SIZE="20", WORKFLOW_MAX_DELAY_SECONDS="600",
                       WORKFLOW_HOPS_PER_ROUND="500",
                       WORKFLOW_SEARCH_RECEIVES="3", WORKFLOW_HOLD_SLACK_SECONDS="2")
        first = support.run(DEPLOY, env=env)
        self.assertEqual(first.returncode, 0, first.stderr)
        for removed in ("WORKFLOW_SEARCH_RECEIVES=3", "WORKFLOW_HOLD_SLACK_SECONDS=2"):
            self.assertIn(f"WARNING: {removed} is no longer read and is ignored", first.stderr)
        out = self.outputs(stack)
        lam = self.moto.client("lambda")

        # The task function: its role, the re-driver's settings with the long backoff cap, live alias.
        task = lam.get_function_configuration(FunctionName=f"{stack}-workflow-tasks")
        self.assertEqual(task["Role"], out["WorkflowRoleArn"])
        self.assertEqual((task["MemorySize"], task["Timeout"]), (256, 300))
        support.assert_real_functions(self, self.moto, self.lambda_dir, {
            f"{stack}-workflow-tasks": "redrive-workflow", f"{stack}-redriver": "redriver"})
        variables = task["Environment"]["Variables"]
        redriver = lam.get_function_configuration(FunctionName=f"{stack}-redriver")["Environment"]["Variables"]
        self.assertEqual(variables["BACKOFF_MAX_SECONDS"], "7200")
        self.assertEqual(redriver["BACKOFF_MAX_SECONDS"], "900")
        self.assertEqual(variables["WORKFLOW_BATCH_SIZE"], "20")
        self.assertEqual(variables["WORKFLOW_HOPS_PER_ROUND"], "500")
        self.assertEqual(variables["WORKFLOW_MAX_DELAY_SECONDS"], "600")
        self.assertNotIn("WORKFLOW_SEARCH_RECEIVES", variables)
        self.assertNotIn("WORKFLOW_HOLD_SLACK_SECONDS", variables)
        own = ("BACKOFF_MAX_SECONDS", "WORKFLOW_BATCH_SIZE", "WORKFLOW_MAX_DELAY_SECONDS", "WORKFLOW_HOPS_PER_ROUND")
        self.assertEqual({k: v for k, v in variables.items() if k not in own},
                         {k: v for k, v in redriver.items() if k != "BACKOFF_MAX_SECONDS"})
        self.assertEqual(variables["CIRCUIT_TABLE"], f"{stack}-circuit")
        # Every execution's summary re-arms the alarm whose rule starts executions.
        self.assertEqual(variables["TRIGGER_ALARM_NAME"], out["WorkflowTriggerAlarmName"])
        alias = lam.get_alias(FunctionName=f"{stack}-workflow-tasks", Name="live")
        self.assertNotEqual(alias["FunctionVersion"], "$LATEST")

        # The state machine: the name the task role names, its role, the ASL file as definition
        # (moto stores DefinitionString without applying DefinitionSubstitutions).
        sfn = self.moto.client("stepfunctions")
        machine_arn = arn("states", f"stateMachine:{stack}-workflow")
        machine = sfn.describe_state_machine(stateMachineArn=machine_arn)
        self.assertEqual(json.loads(machine["definition"]), json.loads(ASL.read_text(encoding="utf-8")))
        wiring = self.stack_resources(f"{stack}-wiring")
        role_name = wiring["StateMachineRole"]
        self.assertTrue(machine["roleArn"].endswith(f":role/{role_name}"), machine["roleArn"])
        self.assertEqual(self.outputs(f"{stack}-wiring")["StateMachineArn"], machine_arn)
        machine_role = {s["Sid"]: s for s in self.role_policy(role_name)}
        self.assertEqual(support.as_list(machine_role["InvokeTaskFunction"]["Resource"]),
                         [arn("lambda", f"function:{stack}-workflow-tasks:live")])

        # The task role as IAM holds it: the circuit table (the lease too), no Step Functions API.
        task_role = {s["Sid"]: s for s in self.role_policy(out["WorkflowRoleArn"].rsplit("/", 1)[1])}
        self.assertFalse([a for s in task_role.values() for a in support.as_list(s["Action"]) if a.startswith("states:")])
        self.assertEqual(support.as_list(task_role["CircuitRecord"]["Action"]), ["dynamodb:GetItem", "dynamodb:PutItem"])

        # The rule on the DLQ alarm's state change, starting the state machine with the alarm's name.
        events = self.moto.client("events")
        rule_name = self.outputs(f"{stack}-wiring")["DlqAlarmRuleName"]
        rule = events.describe_rule(Name=rule_name)
        pattern = json.loads(rule["EventPattern"])
        self.assertEqual(pattern["resources"], [arn("cloudwatch", f"alarm:{stack}-dlq-not-empty")])
        self.assertEqual(pattern["detail"], {"state": {"value": ["ALARM"]}})
        (target,) = events.list_targets_by_rule(Rule=rule_name)["Targets"]
        self.assertEqual(target["Arn"], machine_arn)
        self.assertEqual(target["InputTransformer"]["InputTemplate"], '{"triggerAlarm": <alarm>}')
        start_role = {s["Sid"]: s for s in self.role_policy(target["RoleArn"].rsplit("/", 1)[1])}
        self.assertEqual(list(start_role), ["StartWorkflow"])
        self.assertEqual(support.as_list(start_role["StartWorkflow"]["Resource"]), [machine_arn])
        # The schedule starts the state machine too; nothing invokes the re-driver.
        schedules = [r for r in events.list_rules(NamePrefix=f"{stack}-wiring-")["Rules"]
                     if r.get("ScheduleExpression") == "rate(5 minutes)"]
        self.assertEqual([t["Arn"] for r in schedules for t in events.list_targets_by_rule(Rule=r["Name"])["Targets"]],
                         [machine_arn])
        # (moto creates neither SNS subscriptions nor Lambda permissions from a template: their
        # conditions are checked in Roles.test_one_orchestrator_at_a_time.)
        self.assertNotIn("RedriverSchedule", wiring)
        self.assertIn("orchestrator   stepfunctions", first.stdout)

        # make destroy removes the task function too.
        gone = support.run([DESTROY], env=self.env(stack))
        self.assertEqual(gone.returncode, 0, gone.stderr)
        self.assertIn(f"deleted function {stack}-workflow-tasks", gone.stderr)
        self.assertFalse({f["FunctionName"] for f in lam.list_functions()["Functions"]
                          if f["FunctionName"].startswith(stack)})

    def test_back_to_lambda_deletes_the_task_function_an_earlier_deploy_left(self):
        # moto 5.2.5 cannot update a stack whose resources' conditions change (it modifies a
        # resource whose condition turned false instead of deleting it), so the switch of the
        # stacks is checked statically (Roles.test_one_orchestrator_at_a_time); what deploy.sh
        # itself does on the way back is checked here.
        stack = support.unique("rdl")
        first = support.run(DEPLOY, env=self.env(stack, ORCHESTRATOR="lambda"))
        self.assertEqual(first.returncode, 0, first.stderr)
        lam = self.moto.client("lambda")
        left = lam.get_function_configuration(FunctionName=f"{stack}-redriver")
        lam.create_function(FunctionName=f"{stack}-workflow-tasks", Runtime="provided.al2023", Role=left["Role"],
                            Handler="bootstrap", Architectures=["arm64"],
                            Code={"ZipFile": _zip()})
        again = support.run(DEPLOY, env=self.env(stack, ORCHESTRATOR="lambda"))
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn(f"deleted the task function {stack}-workflow-tasks", again.stderr)
        self.assertNotIn(f"{stack}-workflow-tasks", {f["FunctionName"] for f in lam.list_functions()["Functions"]})
        # In lambda mode the wiring holds no state machine and the schedule invokes the re-driver.
        wiring = self.stack_resources(f"{stack}-wiring")
        self.assertIn("RedriverSchedule", wiring)
        for logical in ("StateMachine", "DlqAlarmStartsWorkflow", "StateMachineRole", "WorkflowSchedule"):
            self.assertNotIn(logical, wiring)
        self.assertEqual([m["name"] for m in self.moto.client("stepfunctions").list_state_machines()["stateMachines"]
                          if m["name"].startswith(stack)], [])
        self.assertNotIn("orchestrator   stepfunctions", again.stdout)
        self.assertEqual(support.run([DESTROY], env=self.env(stack)).returncode, 0)

    def test_an_unknown_orchestrator_stops_before_anything_changes(self):
        stack = support.unique("rdx")
        result = support.run(DEPLOY, env=self.env(stack, ORCHESTRATOR="step-functions"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("ORCHESTRATOR='step-functions' is invalid", result.stderr)
        cfn = self.moto.client("cloudformation")
        self.assertFalse([s for s in cfn.list_stacks()["StackSummaries"] if s["StackName"] == stack])

    def test_stepfunctions_needs_the_task_binary(self):
        stack = support.unique("rdb")
        empty = Path(tempfile.mkdtemp(prefix="redrive-lambda-"))
        self.addCleanup(shutil.rmtree, empty, True)
        # SKIP_BUILD=true deploys what LAMBDA_DIR holds: every built function but the task function.
        built = support.build_functions()
        for name in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            shutil.copytree(built / name, empty / name)
        result = support.run(DEPLOY, env=self.env(stack, ORCHESTRATOR="stepfunctions", LAMBDA_DIR=str(empty),
                                                  SKIP_BUILD="true"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("redrive-workflow/bootstrap is missing", result.stderr)


if __name__ == "__main__":
    unittest.main()

"""`make deploy` / `make destroy` (infra/deploy.sh, infra/destroy.sh) against a moto server.

The scripts run as a user runs them, `make deploy` with AWS_ENDPOINT_URL pointing at moto:
its build step builds the four functions for real (cargo lambda build), the AWS CLI deploys
both stacks and `cargo lambda deploy` uploads the built functions (it honours
AWS_ENDPOINT_URL). Only the documented build settings differ from a user's defaults
(support.BUILD_SETTINGS: x86_64, the quick profile); moto stores the functions without running them.

The failure modes are checked to stop with a clear message before anything is changed.
moto never rolls a stack back, so the failed-state tests put the stack into that state through
moto's backend, the way a failed creation leaves it on AWS.
"""

from __future__ import annotations

import json
import unittest
from pathlib import Path

import support

DEPLOY = support.MAKE_DEPLOY
DESTROY = str(support.INFRA / "destroy.sh")
ROLLBACK = str(support.INFRA / "rollback.sh")
DOWNSTREAM = "https://orders.example.com/ingest?source=redrive#v1"


class DeployScript(support.DeployTestCase):
    # ---------------------------------------------------------------- helpers
    def settings(self, stack: str, **extra: str) -> dict:
        base = {
            "STACK_NAME": stack,
            **support.BUILD_SETTINGS,
            "LAMBDA_DIR": str(self.lambda_dir),
            "DOWNSTREAM_URL": DOWNSTREAM,
        }
        base.update(extra)
        return support.script_env(self.moto, **base)

    def run_script(self, script: str | list[str], env: dict):
        return support.run(script if isinstance(script, list) else [script], env=env)

    def stack_status(self, name: str) -> str | None:
        cfn = self.moto.client("cloudformation")
        for summary in cfn.list_stacks()["StackSummaries"]:
            if summary["StackName"] == name and summary["StackStatus"] != "DELETE_COMPLETE":
                return summary["StackStatus"]
        return None

    def function_names(self) -> set[str]:
        return {f["FunctionName"] for f in self.moto.client("lambda").list_functions()["Functions"]}

    def outputs(self, stack: str) -> dict:
        described = self.moto.client("cloudformation").describe_stacks(StackName=stack)["Stacks"][0]
        return {o["OutputKey"]: o["OutputValue"] for o in described["Outputs"]}

    def role_policy(self, role_arn: str, policy_name: str) -> dict | None:
        """A role's inline policy document, or None when it has no policy of that name."""
        iam = self.moto.client("iam")
        role = role_arn.rsplit("/", 1)[1]
        if policy_name not in iam.list_role_policies(RoleName=role)["PolicyNames"]:
            return None
        raw = iam.get_role_policy(RoleName=role, PolicyName=policy_name)["PolicyDocument"]
        return support.policy_document(raw)

    def role_actions(self, role_arn: str, policy_name: str) -> set[str]:
        """Every action a role's inline policy allows."""
        document = self.role_policy(role_arn, policy_name)
        return {a for st in document["Statement"] for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}

    def assert_stopped_early(self, result, *phrases: str) -> None:
        self.assertNotEqual(result.returncode, 0, result.stderr)
        for phrase in phrases:
            self.assertIn(phrase, result.stderr)

    def create_resources_stack(self, stack: str) -> None:
        self.moto.client("cloudformation").create_stack(
            StackName=stack,
            TemplateBody=support.RESOURCES_TEMPLATE.read_text(encoding="utf-8"),
            Capabilities=["CAPABILITY_IAM"],
        )

    # ---------------------------------------------------------------- the happy path
    def test_deploy_creates_everything_reruns_cleanly_and_destroy_removes_it(self):
        stack = support.unique("rdd")
        real_aws = support.tool("aws")
        aws_log, _ = self.shim("aws", f'printf "%s\\n" "$*" >>"$STATE/calls"\nexec {real_aws} "$@"\n')
        env = self.settings(
            stack,
            AWS_CLI=aws_log,
            GUARD_ALARM_NAMES="downstream-5xx,downstream-latency",
            MAX_RECEIVE_COUNT="4",
            CONSUMER_TIMEOUT_SECONDS="45",
            REDRIVER_MEMORY_MB="512",
            MAX_CONCURRENCY="3",
        )
        account = self.moto.account_id()

        first = self.run_script(DEPLOY, env)
        self.assertEqual(first.returncode, 0, first.stderr)
        self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
        self.assertEqual(self.stack_status(f"{stack}-wiring"), "CREATE_COMPLETE")
        out = self.outputs(stack)

        lam = self.moto.client("lambda")
        redriver = lam.get_function_configuration(FunctionName=f"{stack}-redriver")
        consumer = lam.get_function_configuration(FunctionName=f"{stack}-consumer")
        for config in (redriver, consumer):
            self.assertEqual(config["Runtime"], "provided.al2023")
        support.assert_real_functions(self, self.moto, self.lambda_dir, {
            f"{stack}-redriver": "redriver", f"{stack}-consumer": "consumer", f"{stack}-archiver": "archiver",
            f"{stack}-triage-widget": "triage-widget", f"{stack}-triage-action": "triage-action"})
        # Every function logs JSON whatever the account's default (Lambda's is Text): set by the
        # deploy that created it.
        calls = (Path(aws_log).parent / "calls").read_text(encoding="utf-8").splitlines()
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            self.assertIn(f"--region {support.REGION} lambda update-function-configuration --function-name "
                          f"{stack}-{function} --logging-config LogFormat=JSON", calls)
            config = lam.get_function_configuration(FunctionName=f"{stack}-{function}")
            self.assertEqual(config["LoggingConfig"]["LogFormat"], "JSON", function)
        self.assertEqual(redriver["Role"], out["RedriverRoleArn"])
        self.assertEqual(consumer["Role"], out["ConsumerRoleArn"])
        self.assertEqual((redriver["MemorySize"], redriver["Timeout"]), (512, 120))
        # The consumer's timeout comes from the stack, whose source queue visibility is 6x it.
        self.assertEqual((consumer["MemorySize"], consumer["Timeout"]), (256, 45))
        sqs = self.moto.client("sqs")
        source = sqs.get_queue_attributes(QueueUrl=out["SourceQueueUrl"], AttributeNames=["All"])["Attributes"]
        self.assertEqual(int(source["VisibilityTimeout"]), 6 * 45)
        self.assertEqual(int(json.loads(source["RedrivePolicy"])["maxReceiveCount"]), 4)

        self.assertEqual(
            redriver["Environment"]["Variables"],
            {
                "DLQ_URL": out["DeadLetterQueueUrl"],
                "SOURCE_QUEUE_URL": out["SourceQueueUrl"],
                "POISON_QUEUE_URL": out["PoisonQueueUrl"],
                "MAX_REDRIVE_ATTEMPTS": "5",
                "BACKOFF_BASE_SECONDS": "60",
                "BACKOFF_MULTIPLIER": "2",
                "BACKOFF_MAX_SECONDS": "900",
                "BACKOFF_JITTER": "full",
                "MAX_MESSAGES_PER_INVOCATION": "100",
                "MAX_MESSAGES_PER_SECOND": "0",
                "GUARD_ALARM_NAMES": "downstream-5xx,downstream-latency",
                "REARM_ALARM": "true",
                # Scheduled and manual drains (and workflow executions) re-arm it too.
                "TRIGGER_ALARM_NAME": f"{stack}-dlq-not-empty",
                "METRIC_NAMESPACE": "DLQRedriver",
                "DRY_RUN": "false",
                "RUST_LOG": "info",
                # The adaptive circuit: on, its table from the stack (triage's book too).
                "CIRCUIT_TABLE": f"{stack}-circuit",
            },
        )
        # The archiver's live index reads the causes our consumer records: its table, key and
        # namespace (its function's name).
        archiver = lam.get_function_configuration(FunctionName=f"{stack}-archiver")["Environment"]["Variables"]
        self.assertEqual((archiver["CAUSES_TABLE"], archiver["CAUSES_KEY"], archiver["CAUSES_NAMESPACE"]),
                         (f"{stack}-idempotency", "message", f"{stack}-consumer"))
        self.assertEqual(archiver["TRIAGE_TABLE"], f"{stack}-circuit")
        self.assertEqual(
            consumer["Environment"]["Variables"],
            {
                "IDEMPOTENCY_TABLE": f"{stack}-idempotency",
                "IDEMPOTENCY_KEY": "message",
                "DLQ_URL": out["DeadLetterQueueUrl"],
                "DOWNSTREAM_URL": DOWNSTREAM,
                "DOWNSTREAM_TIMEOUT_SECONDS": "10",
                "RETRY_BASE_SECONDS": "2",
                "RETRY_MULTIPLIER": "3",
                "RETRY_MAX_SECONDS": "900",
                "RETRY_JITTER": "full",
                "RUST_LOG": "info",
            },
        )
        # The triage console: each function under its own role, one environment; the widgets'
        # buttons call the action function's alias live (the dashboard calls the widget's:
        # test_templates.py checks its body, which moto does not keep).
        widget = lam.get_function_configuration(FunctionName=f"{stack}-triage-widget")
        action = lam.get_function_configuration(FunctionName=f"{stack}-triage-action")
        self.assertEqual((widget["Role"], action["Role"]), (out["TriageWidgetRoleArn"], out["TriageActionRoleArn"]))
        self.assertEqual(len({out["TriageWidgetRoleArn"], out["TriageActionRoleArn"], out["RedriverRoleArn"],
                              out["ArchiverRoleArn"], out["ConsumerRoleArn"]}), 5)
        action_alias = f"arn:aws:lambda:{support.REGION}:{account}:function:{stack}-triage-action:live"
        for config in (widget, action):
            self.assertEqual(config["Environment"]["Variables"], {
                "TRIAGE_TABLE": f"{stack}-circuit",
                "TRIAGE_QUEUE_URLS": f"{out['DeadLetterQueueUrl']},{out['PoisonQueueUrl']}",
                "TRIAGE_ACTION_FUNCTION": action_alias,
                "TRIAGE_SHOW_BODIES": "false",
                "ARCHIVE_BUCKET": out["ArchiveBucketName"],
                "ARCHIVE_PREFIX": "archive",
                "POISON_QUEUE_URL": out["PoisonQueueUrl"],
                "SOURCE_QUEUE_URL": out["SourceQueueUrl"],
                "RUST_LOG": "info",
            })
            self.assertEqual((config["MemorySize"], config["Timeout"]), (256, 30))
        self.assertEqual(lam.get_alias(FunctionName=f"{stack}-triage-action", Name="live")["AliasArn"], action_alias)
        # The roles as deployed: the widget's reads the books and the queues' depth; only the
        # action's writes the books and moves a group's messages (replay's canary, discard
        # archived first); the widget's never receives, sends or deletes a message.
        widget_actions = self.role_actions(out["TriageWidgetRoleArn"], "triage-widget")
        self.assertEqual(widget_actions, {"dynamodb:GetItem", "sqs:GetQueueAttributes",
                                          "logs:CreateLogStream", "logs:PutLogEvents"})
        self.assertEqual(self.role_actions(out["TriageActionRoleArn"], "triage-action"),
                         widget_actions | {"dynamodb:PutItem", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility",
                                           "sqs:DeleteMessage", "sqs:ListDeadLetterSourceQueues",
                                           "sqs:SendMessage", "s3:PutObject"})
        # Every trigger goes through the alias `live`, on the version this deploy published.
        for function in (f"{stack}-redriver", f"{stack}-consumer", f"{stack}-triage-widget", f"{stack}-triage-action"):
            alias = lam.get_alias(FunctionName=function, Name="live")
            self.assertNotEqual(alias["FunctionVersion"], "$LATEST")
            self.assertEqual(alias["Description"], "previous=none")
        mappings = lam.list_event_source_mappings(FunctionName=f"{stack}-consumer:live")["EventSourceMappings"]
        self.assertEqual([(m["EventSourceArn"], m["ScalingConfig"]) for m in mappings],
                         [(out["SourceQueueArn"], {"MaximumConcurrency": 3})])
        # AWS names the alias; moto resolves it to the version the alias points at.
        live = lam.get_alias(FunctionName=f"{stack}-consumer", Name="live")["FunctionVersion"]
        self.assertIn(mappings[0]["FunctionArn"].rsplit(":", 1)[1], ("live", live))
        rules = self.moto.client("events").list_rules(NamePrefix=f"{stack}-wiring-")["Rules"]
        # The re-driver's safety net; the archiver's schedule is checked in test_archive.py.
        rules = [r for r in rules if r["ScheduleExpression"] != "rate(1 hour)"]
        self.assertEqual([r["ScheduleExpression"] for r in rules], ["rate(5 minutes)"])
        targets = self.moto.client("events").list_targets_by_rule(Rule=rules[0]["Name"])["Targets"]
        self.assertEqual([t["Arn"] for t in targets],
                         [f"arn:aws:lambda:{support.REGION}:{account}:function:{stack}-redriver:live"])
        # One re-driver at a time.
        self.assertEqual(lam.get_function_concurrency(FunctionName=f"{stack}-redriver")["ReservedConcurrentExecutions"], 1)
        # TRACING=PassThrough by default: Lambda's own default, and no X-Ray grant.
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            config = lam.get_function_configuration(FunctionName=f"{stack}-{function}")
            self.assertEqual(config["TracingConfig"], {"Mode": "PassThrough"}, function)
        for role in ("RedriverRoleArn", "ConsumerRoleArn", "ArchiverRoleArn", "TriageWidgetRoleArn", "TriageActionRoleArn"):
            self.assertEqual(self.role_policy(out[role], "xray"), None, role)
        # Termination protection on both stacks; the dashboard's address printed.
        cfn = self.moto.client("cloudformation")
        for name in (stack, f"{stack}-wiring"):
            self.assertTrue(cfn.describe_stacks(StackName=name)["Stacks"][0]["EnableTerminationProtection"], name)
        self.assertIn(f"dashboard      {out['DashboardUrl']}", first.stdout)
        self.assertIn(f"#dashboards:name={stack}", out["DashboardUrl"])
        self.assertEqual(out["DashboardName"], stack)

        second = self.run_script(DEPLOY, env)
        self.assertEqual(second.returncode, 0, second.stderr)
        self.assertIn(self.stack_status(stack), ("CREATE_COMPLETE", "UPDATE_COMPLETE"))
        # A function that logs JSON already keeps it: the redeploy sets no log format.
        again = (Path(aws_log).parent / "calls").read_text(encoding="utf-8").splitlines()[len(calls):]
        self.assertFalse([c for c in again if "--logging-config" in c], again)
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            config = lam.get_function_configuration(FunctionName=f"{stack}-{function}")
            self.assertEqual(config["LoggingConfig"]["LogFormat"], "JSON", function)
        self.assertEqual(self.outputs(stack)["RedriverRoleArn"], out["RedriverRoleArn"])
        self.assertEqual(len(lam.list_event_source_mappings(FunctionName=f"{stack}-consumer:live")["EventSourceMappings"]), 1)
        self.assertEqual({f for f in self.function_names() if f.startswith(stack)},
                         {f"{stack}-redriver", f"{stack}-consumer", f"{stack}-archiver",
                          f"{stack}-triage-widget", f"{stack}-triage-action"})

        gone = self.run_script(DESTROY, env)
        self.assertEqual(gone.returncode, 0, gone.stderr)
        self.assertIsNone(self.stack_status(stack))
        self.assertIsNone(self.stack_status(f"{stack}-wiring"))
        self.assertFalse({f for f in self.function_names() if f.startswith(stack)})
        queues = sqs.list_queues(QueueNamePrefix=stack).get("QueueUrls", [])
        self.assertEqual(queues, [])

        again = self.run_script(DESTROY, env)
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn(f"stack {stack} does not exist", again.stderr)

    def test_consumer_gets_no_dlq_url_when_fast_track_is_off(self):
        stack = support.unique("rdf")
        env = self.settings(stack, FAST_TRACK_PERMANENT_FAILURES="false", IDEMPOTENCY_TTL_SECONDS="3888000")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        variables = self.moto.client("lambda").get_function_configuration(
            FunctionName=f"{stack}-consumer")["Environment"]["Variables"]
        self.assertNotIn("DLQ_URL", variables)
        self.assertEqual(variables["IDEMPOTENCY_TTL_SECONDS"], "3888000")
        rules = self.moto.client("events").list_rules(NamePrefix=f"{stack}-wiring-")["Rules"]
        self.assertEqual(sorted(r["ScheduleExpression"] for r in rules), ["rate(1 hour)", "rate(5 minutes)"])
        # The default guard is the stack's consumer-errors alarm.
        redriver = self.moto.client("lambda").get_function_configuration(FunctionName=f"{stack}-redriver")
        self.assertEqual(redriver["Environment"]["Variables"]["GUARD_ALARM_NAMES"], f"{stack}-consumer-errors")
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    def test_tracing_active_traces_every_function_and_only_then_grants_xray_writes(self):
        # GIVEN TRACING=Active, with the Step Functions orchestrator's task function too
        stack = support.unique("rdx")
        env = self.settings(stack, TRACING="Active", ORCHESTRATOR="stepfunctions")

        # WHEN it is deployed
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)

        # THEN every function is created with active tracing, and every role may write traces
        # (X-Ray's write actions, on "*": they have no resource type), nothing more
        lam = self.moto.client("lambda")
        out = self.outputs(stack)
        functions = {"redriver": "RedriverRoleArn", "consumer": "ConsumerRoleArn",
                     "archiver": "ArchiverRoleArn", "workflow-tasks": "WorkflowRoleArn",
                     "triage-widget": "TriageWidgetRoleArn", "triage-action": "TriageActionRoleArn"}
        for function, role in functions.items():
            config = lam.get_function_configuration(FunctionName=f"{stack}-{function}")
            self.assertEqual(config["TracingConfig"], {"Mode": "Active"}, function)
            statements = self.role_policy(out[role], "xray")["Statement"]
            self.assertEqual(
                [(sorted(support.as_list(s["Action"])), s["Resource"]) for s in statements],
                [(["xray:PutTelemetryRecords", "xray:PutTraceSegments"], "*")], role)
        # (Back to PassThrough is a redeploy: cargo lambda deploy updates each function's mode
        # and the stack update deletes XRayWrites. moto 5.2.5 applies neither on an update, so
        # that direction is not shown here; a PassThrough deploy grants nothing, see above.)

    def test_empty_guard_list_deploys_the_bash_3_2_path(self):
        # GUARD_ALARM_NAMES=none: the empty list that stopped deploy.sh under macOS's bash 3.2.
        stack = support.unique("rde")
        env = self.settings(stack, GUARD_ALARM_NAMES="none", REDRIVER_RESERVED_CONCURRENCY="none")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        lam = self.moto.client("lambda")
        variables = lam.get_function_configuration(FunctionName=f"{stack}-redriver")["Environment"]["Variables"]
        self.assertEqual(variables["GUARD_ALARM_NAMES"], "")
        self.assertNotIn("ReservedConcurrentExecutions", lam.get_function_concurrency(FunctionName=f"{stack}-redriver"))
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    # ---------------------------------------------------------------- deploys that succeed, redeploys that can be undone
    def test_create_function_is_retried_until_lambda_can_assume_the_new_role(self):
        stack = support.unique("rdi")
        real = support.tool("cargo-lambda")
        # The first two CreateFunction calls meet a role IAM has not propagated yet.
        shim, state = self.shim("cargo-lambda", f"""
if [ "$2" = deploy ]; then
    n=$(cat "$STATE/fails" 2>/dev/null || echo 0)
    if [ "$n" -lt 2 ]; then
        echo $((n + 1)) >"$STATE/fails"
        echo 'Error: InvalidParameterValueException: The role defined for the function cannot be assumed by Lambda.' >&2
        exit 1
    fi
    echo "$4" >>"$STATE/deployed"
fi
exec {real} "$@"
""")
        env = self.settings(stack, CARGO_LAMBDA=shim, IAM_PROPAGATION_WAIT_SECONDS="0")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr.count("IAM has not propagated role"), 2)
        # redriver, consumer, archiver, triage-action, triage-widget
        self.assertEqual((state / "deployed").read_text().split(), ["--binary-name"] * 5)
        self.assertEqual({f for f in self.function_names() if f.startswith(stack)},
                         {f"{stack}-redriver", f"{stack}-consumer", f"{stack}-archiver",
                          f"{stack}-triage-widget", f"{stack}-triage-action"})
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    def test_create_function_retries_are_bounded(self):
        stack = support.unique("rdj")
        real = support.tool("cargo-lambda")
        # Every CreateFunction meets a role IAM never propagates; the build runs for real.
        shim, _ = self.shim("cargo-lambda", f"""
if [ "$2" = deploy ]; then
    echo 'Error: InvalidParameterValueException: The role defined for the function cannot be assumed by Lambda.' >&2
    exit 1
fi
exec {real} "$@"
""")
        env = self.settings(stack, CARGO_LAMBDA=shim, IAM_PROPAGATION_WAIT_SECONDS="0", IAM_PROPAGATION_ATTEMPTS="3")
        result = self.run_script(DEPLOY, env)
        self.assert_stopped_early(result, "cargo lambda deploy of", "make deploy again")
        self.assertEqual(result.stderr.count("IAM has not propagated role"), 2)
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    def test_stack_creation_waits_out_queue_deleted_recently(self):
        stack = support.unique("rdq")
        real = support.tool("aws")
        # SQS refuses the DLQ's name once (a destroy less than 60 s ago): the stack's creation
        # fails with CloudFormation's event for it. moto cannot fail a creation, so the shim
        # reports that failure for the first creation, as the AWS CLI would.
        shim, state = self.shim("aws", f"""
case " $* " in
    *" create-change-set "*"--change-set-type CREATE"*) echo x >>"$STATE/creates" ;;
esac
if [ ! -e "$STATE/failed" ]; then
    case " $* " in
        *" wait stack-create-complete "*)
            touch "$STATE/failed"
            echo 'Waiter StackCreateComplete failed: Waiter encountered a terminal failure state' >&2
            exit 255 ;;
    esac
fi
if [ -e "$STATE/failed" ] && [ ! -e "$STATE/explained" ]; then
    case " $* " in
        *" describe-stack-events "*)
            touch "$STATE/explained"
            echo 'Resource handler returned message: "You must wait 60 seconds after deleting a queue before you can create another with the same name. (Service: Sqs, Status Code: 400, Request ID: 0)" (RequestToken: 0, HandlerErrorCode: GeneralServiceException)'
            exit 0 ;;
    esac
fi
exec {real} "$@"
""")
        env = self.settings(stack, AWS_CLI=shim, QUEUE_NAME_REUSE_WAIT_SECONDS="0")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("QueueDeletedRecently", result.stderr)
        self.assertEqual(len((state / "creates").read_text().split()), 3)  # resources twice, wiring once
        self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
        sqs = self.moto.client("sqs")
        self.assertEqual(sorted(u.rsplit("/", 1)[1] for u in sqs.list_queues(QueueNamePrefix=stack)["QueueUrls"]),
                         [f"{stack}-dlq", f"{stack}-poison", f"{stack}-source"])
        self.assertEqual(self.run_script(DESTROY, self.settings(stack)).returncode, 0)

    def test_rollback_points_live_back_at_the_previous_versions(self):
        stack = support.unique("rdk")
        lam = self.moto.client("lambda")
        env = self.settings(stack)
        self.assertEqual(self.run_script(DEPLOY, env).returncode, 0)
        first = {f: lam.get_alias(FunctionName=f"{stack}-{f}", Name="live")["FunctionVersion"]
                 for f in ("redriver", "consumer")}
        # A second deploy with a changed setting: a new re-driver version goes live.
        second = self.run_script(DEPLOY, self.settings(stack, MAX_REDRIVE_ATTEMPTS="7"))
        self.assertEqual(second.returncode, 0, second.stderr)
        live = lam.get_alias(FunctionName=f"{stack}-redriver", Name="live")["FunctionVersion"]
        self.assertGreater(int(live), int(first["redriver"]))
        self.assertEqual(lam.get_function_configuration(FunctionName=f"{stack}-redriver", Qualifier="live")
                         ["Environment"]["Variables"]["MAX_REDRIVE_ATTEMPTS"], "7")

        result = self.run_script(ROLLBACK, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        after = {f: lam.get_alias(FunctionName=f"{stack}-{f}", Name="live")["FunctionVersion"]
                 for f in ("redriver", "consumer")}
        self.assertEqual(after, first)
        self.assertEqual(lam.get_function_configuration(FunctionName=f"{stack}-redriver", Qualifier="live")
                         ["Environment"]["Variables"]["MAX_REDRIVE_ATTEMPTS"], "5")
        # Nothing more is recorded: a second rollback says so and changes nothing.
        self.assert_stopped_early(self.run_script(ROLLBACK, env), "nothing to roll back")
        self.assertEqual({f: lam.get_alias(FunctionName=f"{stack}-{f}", Name="live")["FunctionVersion"]
                          for f in ("redriver", "consumer")}, first)
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    def test_destroy_refuses_while_messages_are_parked_unless_forced(self):
        stack = support.unique("rdx")
        env = self.settings(stack)
        self.assertEqual(self.run_script(DEPLOY, env).returncode, 0)
        sqs = self.moto.client("sqs")
        dynamodb = self.moto.client("dynamodb")

        def assert_nothing_changed():
            self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
            self.assertEqual(self.stack_status(f"{stack}-wiring"), "CREATE_COMPLETE")
            self.assertEqual({f for f in self.function_names() if f.startswith(stack)},
                             {f"{stack}-redriver", f"{stack}-consumer", f"{stack}-archiver",
                              f"{stack}-triage-widget", f"{stack}-triage-action"})

        # Parked messages (DLQ, poison queue) and unconsumed ones (source queue: the consumer
        # is paused, as moto would otherwise try to run it in Docker).
        lam = self.moto.client("lambda")
        for mapping in lam.list_event_source_mappings(FunctionName=f"{stack}-consumer:live")["EventSourceMappings"]:
            lam.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)
        for queue in ("dlq", "poison", "source"):
            url = sqs.get_queue_url(QueueName=f"{stack}-{queue}")["QueueUrl"]
            sqs.send_message(QueueUrl=url, MessageBody="parked")
            refused = self.run_script(DESTROY, env)
            self.assert_stopped_early(refused, "refusing to destroy", f"{url} holds 1", "FORCE=1", "Nothing was changed",
                                      "aws sqs purge-queue")
            assert_nothing_changed()
            sqs.purge_queue(QueueUrl=url)
        # An operator's circuit override (`redrive circuit open`); an automatic record is no reason.
        dlq_url = sqs.get_queue_url(QueueName=f"{stack}-dlq")["QueueUrl"]
        dynamodb.put_item(TableName=f"{stack}-circuit",
                          Item={"queue": {"S": dlq_url}, "operator": {"S": "open"}, "state": {"S": "closed"}})
        dynamodb.put_item(TableName=f"{stack}-circuit",
                          Item={"queue": {"S": dlq_url + "-other"}, "operator": {"S": "auto"}, "state": {"S": "open"}})
        refused = self.run_script(DESTROY, env)
        self.assert_stopped_early(refused, "refusing to destroy", f"operator circuit overrides (1 in {stack}-circuit)",
                                  "aws dynamodb delete-item", "FORCE=1", "Nothing was changed")
        assert_nothing_changed()
        sqs.send_message(QueueUrl=dlq_url, MessageBody="parked")
        sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=f"{stack}-source")["QueueUrl"], MessageBody="unconsumed")

        forced = self.run_script(DESTROY, {**env, "FORCE": "1"})
        self.assertEqual(forced.returncode, 0, forced.stderr)
        self.assertIn("FORCE=1: deleting parked messages", forced.stderr)
        self.assertIsNone(self.stack_status(stack))
        self.assertEqual(sqs.list_queues(QueueNamePrefix=stack).get("QueueUrls", []), [])
        tables = self.moto.client("dynamodb").list_tables()["TableNames"]
        self.assertNotIn(f"{stack}-idempotency", tables)
        self.assertNotIn(f"{stack}-circuit", tables)

    def test_a_stray_stack_delete_is_refused_and_keeps_parked_messages_anyway(self):
        stack = support.unique("rdt")
        env = self.settings(stack)
        self.assertEqual(self.run_script(DEPLOY, env).returncode, 0)
        cfn = self.moto.client("cloudformation")
        with self.assertRaisesRegex(Exception, "TerminationProtection"):
            cfn.delete_stack(StackName=stack)
        # Past the protection, the stack goes but the queues and the tables stay: parked and
        # unconsumed messages, idempotency records, the operator's circuit override.
        for name in (f"{stack}-wiring", stack):
            cfn.update_termination_protection(StackName=name, EnableTerminationProtection=False)
            cfn.delete_stack(StackName=name)
        self.assertIsNone(self.stack_status(stack))
        queues = self.moto.client("sqs").list_queues(QueueNamePrefix=stack).get("QueueUrls", [])
        self.assertEqual(sorted(u.rsplit("/", 1)[1] for u in queues),
                         [f"{stack}-dlq", f"{stack}-poison", f"{stack}-source"])
        tables = self.moto.client("dynamodb").list_tables()["TableNames"]
        self.assertIn(f"{stack}-idempotency", tables)
        self.assertIn(f"{stack}-circuit", tables)
        # make destroy still finds and removes them.
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)
        self.assertEqual(self.moto.client("sqs").list_queues(QueueNamePrefix=stack).get("QueueUrls", []), [])
        self.assertFalse({t for t in self.moto.client("dynamodb").list_tables()["TableNames"] if t.startswith(stack)})

    # ---------------------------------------------------------------- what deploy sends to AWS
    def test_what_deploy_sends_fits_aws_and_waits_for_each_function_before_publishing(self):
        stack = support.unique("rds")
        real = support.tool("aws")
        # Records every AWS CLI call, and a copy of each TemplateBody as the CLI reads it; answers
        # the first readiness poll of each function as Lambda does while it still creates it
        # (State Pending, LastUpdateStatus InProgress).
        shim, state = self.shim("aws", f"""
n=$(ls "$STATE" | grep -c '^call' || true)
printf '%s\\n' "$*" >"$STATE/call.$(printf %04d "$n")"
prev=
function=
for arg in "$@"; do
    if [ "$prev" = --template-body ]; then cp "${{arg#file://}}" "$STATE/body.$(printf %04d "$n")"; fi
    if [ "$prev" = --function-name ]; then function=$arg; fi
    prev=$arg
done
case "$*" in
    *"get-function-configuration"*"[State,LastUpdateStatus"*)
        if [ ! -e "$STATE/pending.$function" ]; then
            : >"$STATE/pending.$function"
            printf 'Pending\\tInProgress\\tNone\\tThe function is being created.\\tNone\\n'
            exit 0
        fi ;;
esac
exec {real} "$@"
""")
        env = self.settings(stack, AWS_CLI=shim)
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        # CloudFormation refuses a CreateStack/UpdateStack TemplateBody above 51,200 bytes: the
        # wiring template goes as a body, the resources template (above it) by its S3 URL.
        bodies = sorted(state.glob("body.*"))
        self.assertEqual(len(bodies), 1)  # wiring
        for body in bodies:
            self.assertLessEqual(body.stat().st_size, 51_200, body.read_bytes()[:200])
        by_url = [path.read_text() for path in sorted(state.glob("call.*")) if "--template-url" in path.read_text()]
        self.assertEqual(len(by_url), 1, by_url)  # resources
        # cargo lambda deploy returns before Lambda has finished creating or updating the
        # function; publishing a version then is refused (ResourceConflictException). Deploy
        # polls until the function is Active and its last update Successful: the Pending answer
        # is followed by another poll, both before the version is published.
        calls = [path.read_text().split() for path in sorted(state.glob("call.*"))]
        lambda_calls = [c[c.index("lambda") + 1:] for c in calls if "lambda" in c]
        for function in ("redriver", "consumer", "archiver", "triage-widget", "triage-action"):
            name = f"{stack}-{function}"
            self.assertTrue((state / f"pending.{name}").exists(), function)
            about = [c for c in lambda_calls if name in c]
            verbs = [c[0] for c in about]
            publish = verbs.index("publish-version")
            polls = [c for c in about[:publish] if c[0] == "get-function-configuration"
                     and any(a.startswith("[State,LastUpdateStatus") for a in c)]
            self.assertGreaterEqual(len(polls), 2, (function, verbs))
            # Each function's CLI calls from its readiness to its alias: at most seven (two
            # polls, the log format set and polled once more on a new function, whose format is
            # Lambda's default Text, PublishVersion, GetAlias and CreateAlias or UpdateAlias).
            first = verbs.index("get-function-configuration")
            alias = max(i for i, verb in enumerate(verbs) if verb in ("create-alias", "update-alias"))
            self.assertLessEqual(alias + 1 - first, 7, (function, verbs))

    def test_a_template_above_the_template_body_limit_goes_through_s3(self):
        stack = support.unique("rdl")
        # Both templates are larger (compact JSON: resources about 51 kB, the rendered wiring
        # with its state machine about 20 kB).
        env = self.settings(stack, TEMPLATE_BODY_LIMIT="15000")
        result = self.run_script(DEPLOY, env)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.addCleanup(self.run_script, DESTROY, env)
        self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
        self.assertEqual(self.stack_status(f"{stack}-wiring"), "CREATE_COMPLETE")
        bucket = f"redrive-templates-{self.moto.account_id()}-{support.REGION}"
        self.assertIn(f"sending it through s3://{bucket}/{stack}/", result.stderr)
        self.assertIn(f"sending it through s3://{bucket}/{stack}-wiring/", result.stderr)
        s3 = self.moto.client("s3")
        # Private, and each template gone once its stack operation has read it.
        self.assertTrue(all(s3.get_public_access_block(Bucket=bucket)["PublicAccessBlockConfiguration"].values()))
        self.assertEqual(s3.list_objects_v2(Bucket=bucket, Prefix=stack).get("KeyCount"), 0)

    # ---------------------------------------------------------------- failure modes
    def test_no_credentials_stops_before_any_change(self):
        stack = support.unique("rdc")
        env = self.settings(stack)
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        for script in (DEPLOY, DESTROY):
            result = self.run_script(script, env)
            self.assert_stopped_early(result, "no AWS credentials found", "aws configure", "Nothing was changed")
        self.assertIsNone(self.stack_status(stack))
        self.assertFalse({f for f in self.function_names() if f.startswith(stack)})

    def test_missing_downstream_url_stops_before_any_change(self):
        stack = support.unique("rdu")
        env = self.settings(stack)
        del env["DOWNSTREAM_URL"]
        result = self.run_script(DEPLOY, env)
        self.assert_stopped_early(result, "DOWNSTREAM_URL is not set", "DOWNSTREAM_URL=https://", "Nothing was changed")
        self.assertIsNone(self.stack_status(stack))

    def test_missing_region_is_named(self):
        env = self.settings(support.unique("rdr"))
        del env["AWS_DEFAULT_REGION"]
        self.assert_stopped_early(self.run_script(DEPLOY, env), "no AWS region configured", "AWS_REGION")

    def test_invalid_settings_are_named_before_any_change(self):
        stack = support.unique("rdv")
        cases = {
            "BATCH_SIZE=50 needs MAX_BATCHING_WINDOW_SECONDS": {"BATCH_SIZE": "50"},
            "CONSUMER_TIMEOUT_SECONDS='40' is invalid": {"CONSUMER_TIMEOUT_SECONDS": "40"},
            "must stay below 1209600": {"SOURCE_QUEUE_RETENTION_SECONDS": "604800", "DLQ_FINAL_AGE_ALARM_SECONDS": "691200"},
            "DLQ_AGE_ALARM_SECONDS must stay below DLQ_FINAL_AGE_ALARM_SECONDS": {"DLQ_AGE_ALARM_SECONDS": "604800"},
            "SOURCE_AGE_ALARM_SECONDS must stay below": {"SOURCE_AGE_ALARM_SECONDS": "345600"},
            "REDRIVER_RESERVED_CONCURRENCY='2' is invalid": {"REDRIVER_RESERVED_CONCURRENCY": "2"},
            "DRY_RUN='yes' is invalid": {"DRY_RUN": "yes"},
            "DOWNSTREAM_URL='ftp://x' is invalid": {"DOWNSTREAM_URL": "ftp://x"},
            "STACK_NAME='2bad' is invalid": {"STACK_NAME": "2bad"},
            "ARCHIVE_READER_ARNS='*' is invalid": {"ARCHIVE_READER_ARNS": "*"},
            "ARCHIVE_KMS_KEY_ARN='alias/archive' is invalid": {"ARCHIVE_KMS_KEY_ARN": "alias/archive"},
            "TRACING='active' is invalid": {"TRACING": "active"},
        }
        for phrase, extra in cases.items():
            with self.subTest(phrase):
                self.assert_stopped_early(self.run_script(DEPLOY, self.settings(stack, **extra)), phrase)
        self.assertIsNone(self.stack_status(stack))

    def test_rollback_complete_stack_is_explained_and_the_advice_works(self):
        stack = support.unique("rdb")
        self.create_resources_stack(stack)
        self.moto.set_stack_status(stack, "ROLLBACK_COMPLETE")
        env = self.settings(stack)

        result = self.run_script(DEPLOY, env)
        self.assert_stopped_early(
            result, f"stack {stack} is in ROLLBACK_COMPLETE", "describe-stack-events",
            f"aws cloudformation delete-stack --region {support.REGION} --stack-name {stack}", "make destroy",
            "Nothing was changed",
        )
        self.assertEqual(self.stack_status(stack), "ROLLBACK_COMPLETE")
        self.assertIsNone(self.stack_status(f"{stack}-wiring"))
        self.assertFalse({f for f in self.function_names() if f.startswith(stack)})

        # The fix the message gives: make destroy, then make deploy.
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)
        self.assertIsNone(self.stack_status(stack))
        redeploy = self.run_script(DEPLOY, env)
        self.assertEqual(redeploy.returncode, 0, redeploy.stderr)
        self.assertEqual(self.stack_status(stack), "CREATE_COMPLETE")
        self.assertEqual(self.run_script(DESTROY, env).returncode, 0)

    def test_update_rollback_failed_stack_is_explained(self):
        stack = support.unique("rdz")
        self.create_resources_stack(stack)
        self.moto.set_stack_status(stack, "UPDATE_ROLLBACK_FAILED")
        result = self.run_script(DEPLOY, self.settings(stack))
        self.assert_stopped_early(result, "UPDATE_ROLLBACK_FAILED", "continue-update-rollback", "Nothing was changed")
        self.assertFalse({f for f in self.function_names() if f.startswith(stack)})

    def test_busy_stack_is_explained(self):
        stack = support.unique("rdp")
        self.create_resources_stack(stack)
        self.moto.set_stack_status(stack, "UPDATE_IN_PROGRESS")
        result = self.run_script(DEPLOY, self.settings(stack))
        self.assert_stopped_early(result, "is busy (UPDATE_IN_PROGRESS)", "Nothing was changed")


if __name__ == "__main__":
    unittest.main()

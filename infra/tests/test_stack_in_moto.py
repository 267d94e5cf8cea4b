"""Deploys both templates into moto's CloudFormation and reads back what moto really created.

moto 5.2.5's CloudFormation reports some resources and properties as created without creating
them: CloudWatch alarms, SNS subscriptions, the queues' RedriveAllowPolicy, the table's TTL and
point-in-time recovery. Those are covered by the Guard rules (test_guard.py) over the template;
the skipped tests at the end say so instead of asserting on what moto does not do.
Lambda functions are not in the templates (cargo lambda deploy creates them); here stand-ins are
created with boto3 so that the wiring stack has something to wire.
"""

from __future__ import annotations

import io
import json
import unittest
import zipfile

import support

MAX_RECEIVE_COUNT = "3"
CONSUMER_TIMEOUT = "60"


def _zip_of_bootstrap() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("bootstrap", b"\x7fELF")
    return buffer.getvalue()


class StackInMoto(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.moto = support.Moto()
        cls.stack = support.unique("rdm")
        cls.account = cls.moto.account_id()
        cfn = cls.moto.client("cloudformation")
        cfn.create_stack(
            StackName=cls.stack,
            TemplateBody=support.RESOURCES_TEMPLATE.read_text(encoding="utf-8"),
            Capabilities=["CAPABILITY_IAM"],
            Parameters=[
                {"ParameterKey": "MaxReceiveCount", "ParameterValue": MAX_RECEIVE_COUNT},
                {"ParameterKey": "ConsumerTimeoutSeconds", "ParameterValue": CONSUMER_TIMEOUT},
                {"ParameterKey": "MetricNamespace", "ParameterValue": "OrdersRedrive"},
                {"ParameterKey": "LogRetentionDays", "ParameterValue": "14"},
            ],
        )
        stack = cfn.describe_stacks(StackName=cls.stack)["Stacks"][0]
        cls.status = stack["StackStatus"]
        cls.outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
        cls.resources = {
            r["LogicalResourceId"]: r.get("PhysicalResourceId")
            for r in cfn.list_stack_resources(StackName=cls.stack)["StackResourceSummaries"]
        }

        # Stand-ins for what cargo lambda deploy creates, then the wiring stack.
        lam = cls.moto.client("lambda")
        for name, role in (
            (cls.outputs["RedriverFunctionName"], cls.outputs["RedriverRoleArn"]),
            (cls.outputs["ConsumerFunctionName"], cls.outputs["ConsumerRoleArn"]),
            (cls.outputs["ArchiverFunctionName"], cls.outputs["ArchiverRoleArn"]),
        ):
            lam.create_function(
                FunctionName=name,
                Runtime="provided.al2023",
                Role=role,
                Handler="bootstrap",
                Architectures=["arm64"],
                Code={"ZipFile": _zip_of_bootstrap()},
            )
            # deploy.sh publishes a version and points the alias `live` at it.
            version = lam.publish_version(FunctionName=name)["Version"]
            lam.create_alias(FunctionName=name, Name="live", FunctionVersion=version)
        cls.wiring = f"{cls.stack}-wiring"
        cfn.create_stack(
            StackName=cls.wiring,
            TemplateBody=support.WIRING_TEMPLATE.read_text(encoding="utf-8"),
            Parameters=[
                {"ParameterKey": "RedriverFunctionName", "ParameterValue": cls.outputs["RedriverFunctionName"]},
                {"ParameterKey": "ConsumerFunctionName", "ParameterValue": cls.outputs["ConsumerFunctionName"]},
                {"ParameterKey": "TriggerTopicArn", "ParameterValue": cls.outputs["TriggerTopicArn"]},
                {"ParameterKey": "SourceQueueArn", "ParameterValue": cls.outputs["SourceQueueArn"]},
                {"ParameterKey": "BatchSize", "ParameterValue": "20"},
                {"ParameterKey": "MaximumBatchingWindowSeconds", "ParameterValue": "5"},
                {"ParameterKey": "MaximumConcurrency", "ParameterValue": "7"},
                {"ParameterKey": "EnableSchedule", "ParameterValue": "true"},
                {"ParameterKey": "ScheduleExpression", "ParameterValue": "rate(30 minutes)"},
                {"ParameterKey": "ArchiverFunctionName", "ParameterValue": cls.outputs["ArchiverFunctionName"]},
            ],
        )
        cls.wiring_status = cfn.describe_stacks(StackName=cls.wiring)["Stacks"][0]["StackStatus"]

    @classmethod
    def tearDownClass(cls) -> None:
        cls.moto.stop()

    # ---------------------------------------------------------------- helpers
    def queue(self, suffix: str) -> dict:
        sqs = self.moto.client("sqs")
        url = sqs.get_queue_url(QueueName=f"{self.stack}-{suffix}")["QueueUrl"]
        return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{support.REGION}:{self.account}:{resource}"

    def role_statements(self, logical_id: str) -> list[dict]:
        """Every statement of every inline policy of the role, keyed by Sid."""
        iam = self.moto.client("iam")
        role_name = self.resources[logical_id]
        statements = []
        for policy_name in iam.list_role_policies(RoleName=role_name)["PolicyNames"]:
            raw = iam.get_role_policy(RoleName=role_name, PolicyName=policy_name)["PolicyDocument"]
            statements.extend(support.policy_document(raw)["Statement"])
        return statements

    def grants(self, logical_id: str) -> dict[str, dict]:
        """Sid -> (sorted actions, sorted resources, condition)."""
        out = {}
        for s in self.role_statements(logical_id):
            self.assertEqual(s["Effect"], "Allow")
            out[s["Sid"]] = {
                "actions": sorted(support.as_list(s["Action"])),
                "resources": sorted(support.as_list(s["Resource"])),
                "condition": s.get("Condition"),
            }
        return out

    def own_logs(self, grants: dict[str, dict], function: str) -> dict:
        """The expected WriteOwnLogs grant of `function`'s role: writes to its own log group
        only (AWS's GetAtt LogGroup.Arn ends in ":*", every stream; moto's does not)."""
        log_group = self.arn("logs", f"log-group:/aws/lambda/{self.stack}-{function}")
        resources = grants["WriteOwnLogs"]["resources"]
        self.assertIn(resources, ([log_group], [f"{log_group}:*"]))
        return {"actions": ["logs:CreateLogStream", "logs:PutLogEvents"], "resources": resources,
                "condition": None}

    # ---------------------------------------------------------------- stacks
    def test_both_stacks_are_created(self):
        self.assertEqual(self.status, "CREATE_COMPLETE")
        self.assertEqual(self.wiring_status, "CREATE_COMPLETE")

    def test_outputs_feed_deploy_script(self):
        for key in (
            "SourceQueueUrl", "SourceQueueArn", "DeadLetterQueueUrl", "PoisonQueueUrl",
            "IdempotencyTableName", "TriggerTopicArn", "AlertsTopicArn", "MetricNamespace",
            "ConsumerTimeoutSeconds", "RedriverFunctionName", "ConsumerFunctionName",
            "RedriverRoleArn", "ConsumerRoleArn", "DefaultGuardAlarmNames", "DashboardUrl", "RecoveryTopicArn",
            "TriageWidgetFunctionName", "TriageWidgetRoleArn", "TriageActionFunctionName", "TriageActionRoleArn",
        ):
            self.assertTrue(self.outputs.get(key), f"output {key} missing")
        self.assertEqual(self.outputs["ConsumerTimeoutSeconds"], CONSUMER_TIMEOUT)
        self.assertEqual(self.outputs["MetricNamespace"], "OrdersRedrive")
        self.assertEqual(self.outputs["RedriverFunctionName"], f"{self.stack}-redriver")
        self.assertEqual(self.outputs["ConsumerFunctionName"], f"{self.stack}-consumer")
        self.assertEqual(self.outputs["TriageWidgetFunctionName"], f"{self.stack}-triage-widget")
        self.assertNotEqual(self.outputs["TriageWidgetRoleArn"], self.outputs["TriageActionRoleArn"])
        self.assertTrue(self.outputs["DeadLetterQueueUrl"].endswith(f"/{self.stack}-dlq"))

    # ---------------------------------------------------------------- queues
    def test_source_queue_redrives_to_dlq_after_max_receive_count(self):
        source = self.queue("source")
        policy = json.loads(source["RedrivePolicy"])
        self.assertEqual(policy["deadLetterTargetArn"], self.arn("sqs", f"{self.stack}-dlq"))
        self.assertEqual(int(policy["maxReceiveCount"]), int(MAX_RECEIVE_COUNT))

    def test_source_queue_visibility_is_six_consumer_timeouts(self):
        self.assertEqual(int(self.queue("source")["VisibilityTimeout"]), 6 * int(CONSUMER_TIMEOUT))

    def test_source_queue_retention_leaves_room_for_the_dlq_age_alarm(self):
        self.assertEqual(self.queue("source")["MessageRetentionPeriod"], "345600")

    def test_every_queue_is_encrypted(self):
        for suffix in ("source", "dlq", "poison"):
            self.assertEqual(self.queue(suffix).get("SqsManagedSseEnabled"), "true", suffix)

    def test_dlq_and_poison_queue_are_terminal_with_14_day_retention(self):
        for suffix in ("dlq", "poison"):
            attributes = self.queue(suffix)
            self.assertNotIn("RedrivePolicy", attributes, suffix)
            self.assertEqual(attributes["MessageRetentionPeriod"], "1209600", suffix)

    # ---------------------------------------------------------------- table, topics, logs
    def test_circuit_table_is_on_demand_keyed_by_queue(self):
        table = self.moto.client("dynamodb").describe_table(TableName=f"{self.stack}-circuit")["Table"]
        self.assertEqual(table["KeySchema"], [{"AttributeName": "queue", "KeyType": "HASH"}])
        self.assertEqual(table["AttributeDefinitions"], [{"AttributeName": "queue", "AttributeType": "S"}])
        self.assertEqual(table["BillingModeSummary"]["BillingMode"], "PAY_PER_REQUEST")

    def test_idempotency_table_is_on_demand_with_string_key_id(self):
        table = self.moto.client("dynamodb").describe_table(TableName=f"{self.stack}-idempotency")["Table"]
        self.assertEqual(table["KeySchema"], [{"AttributeName": "id", "KeyType": "HASH"}])
        self.assertEqual(table["AttributeDefinitions"], [{"AttributeName": "id", "AttributeType": "S"}])
        self.assertEqual(table["BillingModeSummary"]["BillingMode"], "PAY_PER_REQUEST")

    def test_trigger_and_alerts_topics_exist(self):
        arns = {t["TopicArn"] for t in self.moto.client("sns").list_topics()["Topics"]}
        self.assertIn(self.arn("sns", f"{self.stack}-trigger"), arns)
        self.assertIn(self.arn("sns", f"{self.stack}-alerts"), arns)
        self.assertEqual(self.outputs["TriggerTopicArn"], self.arn("sns", f"{self.stack}-trigger"))

    def test_log_groups_exist_so_roles_need_no_create_log_group(self):
        groups = self.moto.client("logs").describe_log_groups(logGroupNamePrefix=f"/aws/lambda/{self.stack}-")
        found = {g["logGroupName"]: g.get("retentionInDays") for g in groups["logGroups"]}
        self.assertEqual(
            found,
            {f"/aws/lambda/{self.stack}-redriver": 14, f"/aws/lambda/{self.stack}-consumer": 14,
             f"/aws/lambda/{self.stack}-archiver": 14, f"/aws/lambda/{self.stack}-triage-widget": 14,
             f"/aws/lambda/{self.stack}-triage-action": 14},
        )

    # ---------------------------------------------------------------- IAM
    def test_roles_trust_lambda_only(self):
        iam = self.moto.client("iam")
        for logical_id in ("RedriverRole", "ConsumerRole", "TriageWidgetRole", "TriageActionRole"):
            trust = support.policy_document(
                iam.get_role(RoleName=self.resources[logical_id])["Role"]["AssumeRolePolicyDocument"]
            )
            self.assertEqual(
                [(s["Principal"], s["Action"]) for s in trust["Statement"]],
                [({"Service": "lambda.amazonaws.com"}, "sts:AssumeRole")],
            )

    def test_redriver_role_grants_exactly_what_it_needs(self):
        grants = self.grants("RedriverRole")
        self.assertEqual(
            grants,
            {
                "DrainDlq": {
                    "actions": sorted(["sqs:ReceiveMessage", "sqs:DeleteMessage",
                                       "sqs:ChangeMessageVisibility", "sqs:GetQueueAttributes",
                                       "sqs:SendMessage", "sqs:ListDeadLetterSourceQueues",
                                       "sqs:ListQueueTags"]),
                    "resources": [self.arn("sqs", f"{self.stack}-dlq")],
                    "condition": None,
                },
                "SendToSourceAndPoison": {
                    "actions": ["sqs:GetQueueAttributes", "sqs:SendMessage"],
                    "resources": sorted([self.arn("sqs", f"{self.stack}-source"),
                                         self.arn("sqs", f"{self.stack}-poison")]),
                    "condition": None,
                },
                "PublishOwnMetrics": {
                    "actions": ["cloudwatch:PutMetricData"],
                    "resources": ["*"],
                    "condition": {"StringEquals": {"cloudwatch:namespace": "OrdersRedrive"}},
                },
                "ReadAlarms": {
                    "actions": ["cloudwatch:DescribeAlarms"],
                    "resources": ["*"],
                    "condition": None,
                },
                "RearmTriggerAlarm": {
                    "actions": ["cloudwatch:SetAlarmState"],
                    "resources": [self.arn("cloudwatch", f"alarm:{self.stack}-dlq-not-empty")],
                    "condition": None,
                },
                # The adaptive circuit: its own record, read and written, nothing else.
                "CircuitRecord": {
                    "actions": ["dynamodb:GetItem", "dynamodb:PutItem"],
                    "resources": [self.arn("dynamodb", f"table/{self.stack}-circuit")],
                    "condition": None,
                },
                "WriteOwnLogs": self.own_logs(grants, "redriver"),
            },
        )

    def test_consumer_role_grants_exactly_what_it_needs(self):
        grants = self.grants("ConsumerRole")
        self.assertEqual(
            grants,
            {
                "SqsEventSource": {
                    "actions": sorted(["sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes",
                                       "sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"]),
                    "resources": [self.arn("sqs", f"{self.stack}-source")],
                    "condition": None,
                },
                "FastTrackPermanentFailuresToDlq": {
                    "actions": ["sqs:SendMessage"],
                    "resources": [self.arn("sqs", f"{self.stack}-dlq")],
                    "condition": None,
                },
                # Its records, and the cause of each failed attempt (UpdateItem: `cause#<id>`).
                "IdempotencyRecords": {
                    "actions": sorted(["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem",
                                       "dynamodb:UpdateItem"]),
                    "resources": [self.arn("dynamodb", f"table/{self.stack}-idempotency")],
                    "condition": None,
                },
                "WriteOwnLogs": self.own_logs(grants, "consumer"),
            },
        )

    def test_passthrough_tracing_grants_no_xray_writes(self):
        # TRACING=PassThrough, the default: no role may write traces.
        iam = self.moto.client("iam")
        for logical_id in ("RedriverRole", "ConsumerRole", "ArchiverRole"):
            self.assertNotIn("xray", iam.list_role_policies(RoleName=self.resources[logical_id])["PolicyNames"])
        self.assertNotIn("XRayWrites", self.resources)

    def test_no_statement_has_a_wildcard_action(self):
        for logical_id in ("RedriverRole", "ConsumerRole"):
            for statement in self.role_statements(logical_id):
                for action in support.as_list(statement["Action"]):
                    self.assertNotIn("*", action, f"{logical_id} {statement.get('Sid')}")

    # ---------------------------------------------------------------- wiring
    def test_consumer_event_source_reports_batch_item_failures(self):
        mappings = self.moto.client("lambda").list_event_source_mappings(
            FunctionName=self.outputs["ConsumerFunctionName"] + ":live"
        )["EventSourceMappings"]
        self.assertEqual(len(mappings), 1)
        mapping = mappings[0]
        self.assertEqual(mapping["EventSourceArn"], self.outputs["SourceQueueArn"])
        self.assertEqual(mapping["FunctionResponseTypes"], ["ReportBatchItemFailures"])
        self.assertEqual(mapping["BatchSize"], 20)
        self.assertEqual(mapping["MaximumBatchingWindowInSeconds"], 5)
        self.assertEqual(mapping["ScalingConfig"], {"MaximumConcurrency": 7})

    def test_only_the_trigger_topic_and_the_schedule_may_invoke_the_redriver(self):
        policy = json.loads(
            self.moto.client("lambda").get_policy(FunctionName=self.outputs["RedriverFunctionName"], Qualifier="live")["Policy"]
        )
        rule = self.moto.client("events").list_rules(NamePrefix=f"{self.wiring}-RedriverSchedule")["Rules"]
        self.assertEqual(len(rule), 1)
        self.assertEqual(
            sorted((s["Principal"]["Service"], s["Condition"]["ArnLike"]["AWS:SourceArn"]) for s in policy["Statement"]),
            sorted([("sns.amazonaws.com", self.outputs["TriggerTopicArn"]), ("events.amazonaws.com", rule[0]["Arn"])]),
        )

    def test_safety_net_schedule_targets_the_redriver(self):
        events = self.moto.client("events")
        rule = events.list_rules(NamePrefix=f"{self.wiring}-RedriverSchedule")["Rules"][0]
        self.assertEqual(rule["ScheduleExpression"], "rate(30 minutes)")
        targets = events.list_targets_by_rule(Rule=rule["Name"])["Targets"]
        self.assertEqual([t["Arn"] for t in targets], [self.arn("lambda", f"function:{self.stack}-redriver:live")])

    # ---------------------------------------------------------------- what moto does not create
    @unittest.skip("moto 5.2.5 reports AWS::CloudWatch::Alarm created without creating it: "
                   "the alarms are checked by Guard rule alarms_have_actions and test_guard.py")
    def test_alarms(self):
        pass

    @unittest.skip("moto 5.2.5 does not create AWS::SNS::Subscription: the trigger topic's "
                   "subscription is exercised against AWS only; its Lambda permission is tested above")
    def test_trigger_subscription(self):
        pass

    @unittest.skip("moto 5.2.5 ignores RedriveAllowPolicy: checked by Guard rule redrive_allow_policy_present")
    def test_redrive_allow_policy(self):
        pass

    @unittest.skip("moto 5.2.5 ignores TimeToLiveSpecification and PointInTimeRecoverySpecification: "
                   "checked by Guard rule tables_have_ttl_and_pitr")
    def test_table_ttl_and_point_in_time_recovery(self):
        pass


class ActiveTracingStackInMoto(unittest.TestCase):
    """TRACING=Active with the Lambda orchestrator: the three functions' roles may write traces,
    and nothing else is granted (the deploy test covers the Step Functions task role too)."""

    def test_active_tracing_grants_exactly_the_xray_writes_to_each_function_role(self):
        moto = support.Moto()
        self.addCleanup(moto.stop)
        stack = support.unique("rdt")
        cfn = moto.client("cloudformation")
        cfn.create_stack(
            StackName=stack,
            TemplateBody=support.RESOURCES_TEMPLATE.read_text(encoding="utf-8"),
            Capabilities=["CAPABILITY_IAM"],
            Parameters=[{"ParameterKey": "Tracing", "ParameterValue": "Active"}],
        )
        self.assertEqual(cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"], "CREATE_COMPLETE")
        roles = {r["LogicalResourceId"]: r["PhysicalResourceId"]
                 for r in cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
                 if r["ResourceType"] == "AWS::IAM::Role"}
        iam = moto.client("iam")
        for logical_id in ("RedriverRole", "ConsumerRole", "ArchiverRole"):
            raw = iam.get_role_policy(RoleName=roles[logical_id], PolicyName="xray")["PolicyDocument"]
            statements = support.policy_document(raw)["Statement"]
            self.assertEqual(
                [(s["Effect"], sorted(support.as_list(s["Action"])), s["Resource"]) for s in statements],
                [("Allow", ["xray:PutTelemetryRecords", "xray:PutTraceSegments"], "*")], logical_id)
        self.assertNotIn("WorkflowRole", roles)


if __name__ == "__main__":
    unittest.main()

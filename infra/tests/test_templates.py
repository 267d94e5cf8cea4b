"""The templates themselves: cfn-lint, and the names that must agree across resources.

Some names are spelled out rather than referenced (an IAM policy naming an alarm, an alarm
naming a function that cargo lambda creates later, the log group Lambda writes to); they are
checked here because moto creates neither alarms nor functions from a template.
"""

from __future__ import annotations

import json
import unittest

import support


class CfnLint(unittest.TestCase):
    def test_templates_are_cfn_lint_clean(self):
        result = support.run(
            [support.tool("cfn-lint"), str(support.RESOURCES_TEMPLATE), str(support.WIRING_TEMPLATE)],
            env=support.script_env(None),
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


class NamesAgree(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.template = support.load_template(support.RESOURCES_TEMPLATE)
        cls.resources = cls.template["Resources"]
        cls.outputs = cls.template["Outputs"]

    def sub(self, value) -> str:
        self.assertIsInstance(value, dict)
        return value["Fn::Sub"]

    def statement(self, role: str, sid: str) -> dict:
        for s in self.resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]:
            if s.get("Sid") == sid:
                return s
        raise KeyError(sid)

    def test_redriver_may_rearm_exactly_its_trigger_alarm(self):
        alarm_name = self.sub(self.resources["DlqNotEmptyAlarm"]["Properties"]["AlarmName"])
        resource = self.sub(self.statement("RedriverRole", "RearmTriggerAlarm")["Resource"])
        self.assertTrue(resource.endswith(f":alarm:{alarm_name}"), (resource, alarm_name))
        self.assertEqual(self.statement("RedriverRole", "RearmTriggerAlarm")["Action"], "cloudwatch:SetAlarmState")

    def test_log_groups_and_errors_alarm_name_the_functions_deploy_sh_creates(self):
        for function, log_group in (("RedriverFunctionName", "RedriverLogGroup"),
                                    ("ConsumerFunctionName", "ConsumerLogGroup")):
            name = self.sub(self.outputs[function]["Value"])
            self.assertEqual(self.sub(self.resources[log_group]["Properties"]["LogGroupName"]), f"/aws/lambda/{name}")
        dimensions = self.resources["RedriverErrorsAlarm"]["Properties"]["Dimensions"]
        self.assertEqual([d["Name"] for d in dimensions], ["FunctionName"])
        self.assertEqual(self.sub(dimensions[0]["Value"]), self.sub(self.outputs["RedriverFunctionName"]["Value"]))

    def test_dlq_alarms_watch_the_dlq_and_poison_alarms_the_poison_queue(self):
        expected = {
            "DlqNotEmptyAlarm": "DeadLetterQueue",
            "DlqOldestMessageAgeAlarm": "DeadLetterQueue",
            "RedriveFailuresAlarm": "DeadLetterQueue",
            "PoisonNewMessageAlarm": "PoisonQueue",
        }
        for alarm, queue in expected.items():
            dimensions = self.resources[alarm]["Properties"]["Dimensions"]
            self.assertEqual(dimensions, [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}], alarm)
        metric = self.resources["PoisonNotEmptyDailyAlarm"]["Properties"]["Metrics"][0]["MetricStat"]["Metric"]
        self.assertEqual(metric["Dimensions"], [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["PoisonQueue", "QueueName"]}}])

    def test_alarm_topics_separate_the_redriver_from_humans(self):
        actions = {name: r["Properties"]["AlarmActions"] for name, r in self.resources.items()
                   if r["Type"] == "AWS::CloudWatch::Alarm"}
        self.assertEqual(actions.pop("DlqNotEmptyAlarm"), [{"Ref": "TriggerTopic"}])
        # 14 + circuit-open (issue 14) + archive-failures (issue 15) + workflow-executions-failed (issue 13)
        self.assertEqual(len(actions), 17)
        for name, action in actions.items():
            self.assertEqual(action, [{"Ref": "AlertsTopic"}], name)

    def test_alarm_metrics_are_the_ones_the_design_relies_on(self):
        def metric(alarm):
            p = self.resources[alarm]["Properties"]
            return p["Namespace"], p["MetricName"], p["ComparisonOperator"]

        self.assertEqual(metric("DlqNotEmptyAlarm"),
                         ("AWS/SQS", "ApproximateNumberOfMessagesVisible", "GreaterThanThreshold"))
        self.assertEqual(metric("DlqOldestMessageAgeAlarm"),
                         ("AWS/SQS", "ApproximateAgeOfOldestMessage", "GreaterThanOrEqualToThreshold"))
        self.assertEqual(self.resources["DlqOldestMessageAgeAlarm"]["Properties"]["Threshold"],
                         {"Ref": "DlqAgeAlarmSeconds"})
        self.assertEqual(self.template["Parameters"]["DlqAgeAlarmSeconds"]["Default"], 86400)
        self.assertEqual(metric("PoisonNewMessageAlarm"), ("AWS/SQS", "NumberOfMessagesSent", "GreaterThanThreshold"))
        self.assertEqual(metric("RedriverErrorsAlarm"), ("AWS/Lambda", "Errors", "GreaterThanThreshold"))
        self.assertEqual(metric("RedriveFailuresAlarm"),
                         ({"Ref": "MetricNamespace"}, "RedriveFailures", "GreaterThanThreshold"))
        self.assertEqual(self.template["Parameters"]["MetricNamespace"]["Default"], "DLQRedriver")
        daily = self.resources["PoisonNotEmptyDailyAlarm"]["Properties"]["Metrics"]
        self.assertEqual(daily[0]["MetricStat"]["Period"], 3600)
        self.assertIn("HOUR(visible) == ${PoisonReminderHourUtc}", daily[1]["Expression"]["Fn::Sub"])



def _actions(statement: dict) -> list[str]:
    return support.as_list(statement["Action"])


class Issue12Operations(unittest.TestCase):
    """Issue 12 on the templates (moto creates neither alarms nor dashboards from a template, and
    ignores deletion policies, so these are read from the parsed YAML)."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.template = support.load_template(support.RESOURCES_TEMPLATE)
        cls.resources = cls.template["Resources"]
        cls.wiring = support.load_template(support.WIRING_TEMPLATE)

    def alarm(self, logical_id: str) -> dict:
        resource = self.resources[logical_id]
        self.assertEqual(resource["Type"], "AWS::CloudWatch::Alarm", logical_id)
        return resource["Properties"]

    def test_issue12_schedule_is_on_by_default_every_5_minutes(self):
        parameters = self.wiring["Parameters"]
        self.assertEqual(parameters["EnableSchedule"]["Default"], "true")
        self.assertEqual(parameters["ScheduleExpression"]["Default"], "rate(5 minutes)")
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nENABLE_SCHEDULE=true\n", env)
        self.assertIn("\nSCHEDULE_EXPRESSION=rate(5 minutes)\n", env)

    def test_issue12_every_trigger_goes_through_the_live_alias(self):
        r = self.wiring["Resources"]
        for logical_id in ("TriggerTopicInvokesRedriver", "ScheduleInvokesRedriver"):
            self.assertEqual(r[logical_id]["Properties"]["FunctionName"], {"Fn::Sub": "${RedriverFunctionName}:live"})
        self.assertEqual(r["ConsumerEventSource"]["Properties"]["FunctionName"], {"Fn::Sub": "${ConsumerFunctionName}:live"})
        self.assertTrue(r["RedriverSubscription"]["Properties"]["Endpoint"]["Fn::Sub"].endswith(
            ":function:${RedriverFunctionName}:live"))
        self.assertTrue(r["RedriverSchedule"]["Properties"]["Targets"][0]["Arn"]["Fn::Sub"].endswith(
            ":function:${RedriverFunctionName}:live"))

    def test_issue12_parked_messages_and_idempotency_records_outlive_the_stack(self):
        for logical_id in ("DeadLetterQueue", "PoisonQueue", "IdempotencyTable"):
            resource = self.resources[logical_id]
            self.assertEqual((resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")),
                             ("Retain", "Retain"), logical_id)

    def test_issue12_every_queue_sets_its_maximum_message_size(self):
        sizes = {name: r["Properties"].get("MaximumMessageSize") for name, r in self.resources.items()
                 if r["Type"] == "AWS::SQS::Queue"}
        self.assertEqual(sizes, {"SourceQueue": {"Ref": "SourceMaximumMessageSize"},
                                 "DeadLetterQueue": 1048576, "PoisonQueue": 1048576})
        self.assertEqual(self.template["Parameters"]["SourceMaximumMessageSize"]["Default"], 262144)

    def test_issue12_alarms_that_wake_someone_before_anything_is_lost(self):
        def queue(name):
            return [{"Name": "QueueName", "Value": {"Fn::GetAtt": [name, "QueueName"]}}]

        def function(suffix):
            return [{"Name": "FunctionName", "Value": {"Fn::Sub": "${AWS::StackName}-" + suffix}}]

        namespace = {"Ref": "MetricNamespace"}
        expected = {
            # alarm: (namespace, metric, dimensions, threshold)
            "SourceOldestMessageAgeAlarm": ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue("SourceQueue"),
                                            {"Ref": "SourceAgeAlarmSeconds"}),
            "DlqOldestMessageAgeAlarm": ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue("DeadLetterQueue"),
                                         {"Ref": "DlqAgeAlarmSeconds"}),
            "DlqFinalAgeAlarm": ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue("DeadLetterQueue"),
                                 {"Ref": "DlqFinalAgeAlarmSeconds"}),
            "PoisonOldestMessageAgeAlarm": ("AWS/SQS", "ApproximateAgeOfOldestMessage", queue("PoisonQueue"),
                                            {"Ref": "PoisonAgeAlarmSeconds"}),
            "ConsumerErrorsAlarm": ("AWS/Lambda", "Errors", function("consumer"), 0),
            "ConsumerThrottlesAlarm": ("AWS/Lambda", "Throttles", function("consumer"), 0),
            "RedriverAsyncEventsDroppedAlarm": ("AWS/Lambda", "AsyncEventsDropped", function("redriver"), 0),
            "TriggerDeliveryFailuresAlarm": ("AWS/SNS", "NumberOfNotificationsFailed",
                                             [{"Name": "TopicName", "Value": {"Fn::Sub": "${AWS::StackName}-trigger"}}], 0),
            "DlqReceiveFailuresAlarm": (namespace, "DlqReceiveFailures", queue("DeadLetterQueue"), 0),
            "UnplaceableMessagesAlarm": (namespace, "UnplaceableMessages", queue("DeadLetterQueue"), 0),
        }
        for logical_id, (ns, metric, dimensions, threshold) in expected.items():
            with self.subTest(logical_id):
                p = self.alarm(logical_id)
                self.assertEqual((p["Namespace"], p["MetricName"], p["Dimensions"], p["Threshold"]),
                                 (ns, metric, dimensions, threshold))
                self.assertEqual(p["AlarmActions"], [{"Ref": "AlertsTopic"}])
        # The topic name the SNS alarm watches is the trigger topic's.
        self.assertEqual(self.resources["TriggerTopic"]["Properties"]["TopicName"],
                         {"Fn::Sub": "${AWS::StackName}-trigger"})
        # Ages are in seconds and the poison alarm fires before the 14-day deletion.
        p = self.template["Parameters"]
        self.assertLess(p["PoisonAgeAlarmSeconds"]["Default"], 1209600)
        self.assertLess(p["PoisonAgeAlarmSeconds"]["MaxValue"], 1209600)
        self.assertLess(p["DlqAgeAlarmSeconds"]["Default"], p["DlqFinalAgeAlarmSeconds"]["Default"])
        self.assertLess(p["SourceAgeAlarmSeconds"]["Default"], p["SourceQueueRetentionSeconds"]["Default"])

    def test_issue12_ok_notifications_never_reach_the_alerts_topic(self):
        self.assertEqual(self.resources["RecoveryTopic"]["Type"], "AWS::SNS::Topic")
        with_ok = 0
        for name, r in self.resources.items():
            if r["Type"] == "AWS::CloudWatch::Alarm" and "OKActions" in r["Properties"]:
                with_ok += 1
                self.assertEqual(r["Properties"]["OKActions"], [{"Ref": "RecoveryTopic"}], name)
        self.assertGreater(with_ok, 0)

    def test_issue12_default_guard_alarm_is_the_consumer_errors_alarm(self):
        self.assertEqual(self.template["Outputs"]["DefaultGuardAlarmNames"]["Value"],
                         self.alarm("ConsumerErrorsAlarm")["AlarmName"])
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nGUARD_ALARM_NAMES=\n", env)

    def test_issue12_dashboard_shows_queues_redrives_and_the_consumer(self):
        dashboard = self.resources["Dashboard"]
        self.assertEqual(dashboard["Type"], "AWS::CloudWatch::Dashboard")
        body, variables = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
        self.assertEqual(variables, {
            "Dlq": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]},
            "Source": {"Fn::GetAtt": ["SourceQueue", "QueueName"]},
            "Poison": {"Fn::GetAtt": ["PoisonQueue", "QueueName"]},
        })
        widgets = json.loads(body)["widgets"]
        metrics = {(m[0], m[1], m[3]) for w in widgets for m in w["properties"].get("metrics", [])}
        for queue in ("${Dlq}", "${Source}", "${Poison}"):
            self.assertIn(("AWS/SQS", "ApproximateNumberOfMessagesVisible", queue), metrics)
            self.assertIn(("AWS/SQS", "ApproximateAgeOfOldestMessage", queue), metrics)
        for metric in ("SuccessfulRedrives", "PoisonPillsIsolated", "RedriveFailures", "DlqReceiveFailures",
                       "UnplaceableMessages"):
            self.assertIn(("${MetricNamespace}", metric, "${Dlq}"), metrics)
        for metric in ("Errors", "Throttles", "Duration"):
            self.assertIn(("AWS/Lambda", metric, "${AWS::StackName}-consumer"), metrics)
        # The alarm widget names every alarm of the stack.
        # (Not the alarms that exist in one mode only, such as the Step Functions orchestrator's,
        # issue 13: a dashboard cannot leave out an alarm by condition.)
        alarm_names = {r["Properties"]["AlarmName"]["Fn::Sub"].split("}-", 1)[1]
                       for r in self.resources.values()
                       if r["Type"] == "AWS::CloudWatch::Alarm" and "Condition" not in r}
        listed = {a.rsplit(":alarm:${AWS::StackName}-", 1)[1]
                  for w in widgets if w["type"] == "alarm" for a in w["properties"]["alarms"]}
        self.assertEqual(listed, alarm_names)
        self.assertEqual(len(listed), 17)  # 15 + circuit-open (issue 14) + archive-failures (issue 15)
        self.assertIn("#dashboards:name=${Dashboard}", self.template["Outputs"]["DashboardUrl"]["Value"]["Fn::Sub"])


class Issue11Iam(unittest.TestCase):
    """Issue 11 items 7 and 18: the roles grant what the code calls, and nothing else."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.resources = support.load_template(support.RESOURCES_TEMPLATE)["Resources"]

    def statements(self, role: str) -> list[dict]:
        return self.resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]

    def test_item_07_redriver_may_describe_composite_and_metric_guard_alarms(self):
        describe = [s for s in self.statements("RedriverRole") if "cloudwatch:DescribeAlarms" in _actions(s)]
        self.assertEqual(len(describe), 1)
        # Composite alarms, and a guard configured after the deploy, are readable: a guard that
        # cannot be described would fail closed on AccessDenied.
        self.assertEqual((describe[0]["Resource"], _actions(describe[0])), ("*", ["cloudwatch:DescribeAlarms"]))
        self.assertNotIn("RedriverGuardAlarmsPolicy", self.resources)

    def test_item_18_consumer_does_not_get_update_item(self):
        actions = {a for s in self.statements("ConsumerRole") for a in _actions(s)}
        self.assertNotIn("dynamodb:UpdateItem", actions)
        self.assertEqual(sorted(a for a in actions if a.startswith("dynamodb:")),
                         ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem"])

    # That every call of the code is granted is no longer read from the source text: the
    # functions run under these roles, rendered by tests/iam_policy.py, in the IAM-enforced
    # tests (functions/redriver/tests/lambda.rs and circuit.rs for RedriverRole,
    # functions/consumer/tests/lambda_watch.rs for ConsumerRole).

    def test_item_18_redriver_reads_destination_sizes_and_rearms_its_trigger(self):
        by_sid = {s["Sid"]: s for s in self.statements("RedriverRole")}
        self.assertEqual(sorted(_actions(by_sid["SendToSourceAndPoison"])),
                         ["sqs:GetQueueAttributes", "sqs:SendMessage"])
        self.assertEqual(by_sid["SendToSourceAndPoison"]["Resource"],
                         [{"Fn::GetAtt": ["SourceQueue", "Arn"]}, {"Fn::GetAtt": ["PoisonQueue", "Arn"]}])
        self.assertEqual(_actions(by_sid["RearmTriggerAlarm"]), ["cloudwatch:SetAlarmState"])


class AdaptiveCircuit(unittest.TestCase):
    """Issue 14: the circuit's table, the re-driver's least privilege on it, and its alarm."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.template = support.load_template(support.RESOURCES_TEMPLATE)
        cls.resources = cls.template["Resources"]

    def test_one_item_per_dlq_keyed_by_queue(self):
        table = self.resources["CircuitTable"]["Properties"]
        self.assertEqual(table["KeySchema"], [{"AttributeName": "queue", "KeyType": "HASH"}])
        self.assertEqual(table["TableName"], {"Fn::Sub": "${AWS::StackName}-circuit"})
        self.assertEqual(self.template["Outputs"]["CircuitTableName"]["Value"], {"Ref": "CircuitTable"})

    def test_redriver_may_get_and_put_its_record_and_nothing_else_in_dynamodb(self):
        statements = self.resources["RedriverRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        dynamo = [s for s in statements if any(a.startswith("dynamodb:") for a in _actions(s))]
        self.assertEqual(len(dynamo), 1, dynamo)
        self.assertEqual(sorted(_actions(dynamo[0])), ["dynamodb:GetItem", "dynamodb:PutItem"])
        self.assertEqual(dynamo[0]["Resource"], {"Fn::GetAtt": ["CircuitTable", "Arn"]})
        # The consumer has no business with the circuit.
        consumer = self.resources["ConsumerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        self.assertNotIn("CircuitTable", json.dumps(consumer))

    def test_circuit_open_alarm_watches_the_metric_the_redriver_publishes(self):
        p = self.resources["CircuitOpenAlarm"]["Properties"]
        self.assertEqual((p["Namespace"], p["MetricName"]), ({"Ref": "MetricNamespace"}, "CircuitOpen"))
        self.assertEqual(p["Dimensions"], [{"Name": "QueueName", "Value": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]}}])
        self.assertEqual((p["Statistic"], p["Threshold"], p["ComparisonOperator"]), ("Maximum", 0, "GreaterThanThreshold"))
        self.assertEqual(p["AlarmActions"], [{"Ref": "AlertsTopic"}])
        self.assertEqual(p["OKActions"], [{"Ref": "RecoveryTopic"}])
        published = (support.REPO / "functions/redriver/src/aws.rs").read_text(encoding="utf-8")
        self.assertIn('datum("CircuitOpen"', published)


if __name__ == "__main__":
    unittest.main()

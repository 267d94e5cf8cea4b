"""The templates themselves: cfn-lint, and the names that must agree across resources.

Some names are spelled out rather than referenced (an IAM policy naming an alarm, an alarm
naming a function that cargo lambda creates later, the log group Lambda writes to); they are
checked here because moto creates neither alarms nor functions from a template.
"""

from __future__ import annotations

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
        resource = self.sub(self.statement("RedriverRole", "ReadAndRearmTriggerAlarm")["Resource"])
        self.assertTrue(resource.endswith(f":alarm:{alarm_name}"), (resource, alarm_name))
        self.assertEqual(
            sorted(self.statement("RedriverRole", "ReadAndRearmTriggerAlarm")["Action"]),
            ["cloudwatch:DescribeAlarms", "cloudwatch:SetAlarmState"],
        )

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
        self.assertEqual(len(actions), 5)
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
        self.assertEqual(self.template["Parameters"]["DlqAgeAlarmSeconds"]["Default"], 604800)
        self.assertEqual(metric("PoisonNewMessageAlarm"), ("AWS/SQS", "NumberOfMessagesSent", "GreaterThanThreshold"))
        self.assertEqual(metric("RedriverErrorsAlarm"), ("AWS/Lambda", "Errors", "GreaterThanThreshold"))
        self.assertEqual(metric("RedriveFailuresAlarm"),
                         ({"Ref": "MetricNamespace"}, "RedriveFailures", "GreaterThanThreshold"))
        self.assertEqual(self.template["Parameters"]["MetricNamespace"]["Default"], "DLQRedriver")
        daily = self.resources["PoisonNotEmptyDailyAlarm"]["Properties"]["Metrics"]
        self.assertEqual(daily[0]["MetricStat"]["Period"], 3600)
        self.assertIn("HOUR(visible) == ${PoisonReminderHourUtc}", daily[1]["Expression"]["Fn::Sub"])


if __name__ == "__main__":
    unittest.main()

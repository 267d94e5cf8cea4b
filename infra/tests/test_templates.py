"""The templates themselves: cfn-lint, and the names that must agree across resources.

Some names are spelled out rather than referenced (an IAM policy naming an alarm, an alarm
naming a function that cargo lambda creates later, the log group Lambda writes to); they are
checked here because moto creates neither alarms nor functions from a template.
"""

from __future__ import annotations

import json
import tempfile
import unittest
from pathlib import Path

import support


class CfnLint(unittest.TestCase):
    def test_templates_are_cfn_lint_clean(self):
        result = support.run(
            [support.tool("cfn-lint"), str(support.RESOURCES_TEMPLATE), str(support.WIRING_TEMPLATE)],
            env=support.script_env(None),
        )
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


    def test_the_attach_template_and_its_nested_stacks_pass_cfn_lint_and_the_guard_rules(self):
        """As deploy renders them (infra/attach_template.py), for 101 DLQs: two nested stacks."""
        import sys

        sys.path.insert(0, str(support.INFRA))
        import attach_template

        dlqs = [{"name": f"q{i:03d}-dlq", "arn": f"arn:aws:sqs:eu-west-1:123456789012:q{i:03d}-dlq",
                 "sources": [f"arn:aws:sqs:eu-west-1:123456789012:q{i:03d}"]} for i in range(101)]
        template, children = attach_template.build_stacks(support.load_template(support.RESOURCES_TEMPLATE), dlqs, "rdx")
        self.assertEqual(len(children), 2)
        with tempfile.TemporaryDirectory() as work:
            paths = [Path(work) / "resources.attach.json"]
            paths[0].write_text(json.dumps(template), encoding="utf-8")
            for key, body in children.items():
                paths.append(Path(work) / key)
                paths[-1].write_text(body, encoding="utf-8")
            result = support.run([support.tool("cfn-lint"), *map(str, paths)], env=support.script_env(None))
            self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
            for path in paths:
                result = support.run([support.cfn_guard(), "validate", "--rules", str(support.GUARD_RULES),
                                      "--data", str(path), "--show-summary", "fail"], env=support.script_env(None))
                self.assertEqual(result.returncode, 0, path.name + result.stdout + result.stderr)


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
                                    ("ConsumerFunctionName", "ConsumerLogGroup"),
                                    ("TriageWidgetFunctionName", "TriageWidgetLogGroup"),
                                    ("TriageActionFunctionName", "TriageActionLogGroup")):
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
        # 14 + circuit-open + archive-failures + workflow-executions-failed
        # + the alarms receives cannot hide: dlq-not-empty-daily, the archiver-read ages of the
        # poison queue and the DLQ, circuit-held-open
        self.assertEqual(len(actions), 21)
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
        self.assertIn("HOUR(visible) == ${PoisonReminderHourUtc}", daily[-1]["Expression"]["Fn::Sub"])



def _actions(statement: dict) -> list[str]:
    return support.as_list(statement["Action"])


class Operations(support.TemplatesTestCase):
    """The templates (moto creates neither alarms nor dashboards from a template, and
    ignores deletion policies, so these are read from the parsed YAML)."""

    def alarm(self, logical_id: str) -> dict:
        resource = self.resources[logical_id]
        self.assertEqual(resource["Type"], "AWS::CloudWatch::Alarm", logical_id)
        return resource["Properties"]

    def test_schedule_is_on_by_default_every_5_minutes(self):
        parameters = self.wiring["Parameters"]
        self.assertEqual(parameters["EnableSchedule"]["Default"], "true")
        self.assertEqual(parameters["ScheduleExpression"]["Default"], "rate(5 minutes)")
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nENABLE_SCHEDULE=true\n", env)
        self.assertIn("\nSCHEDULE_EXPRESSION=rate(5 minutes)\n", env)

    def test_every_trigger_goes_through_the_live_alias(self):
        r = self.wiring["Resources"]
        for logical_id in ("TriggerTopicInvokesRedriver", "ScheduleInvokesRedriver"):
            self.assertEqual(r[logical_id]["Properties"]["FunctionName"], {"Fn::Sub": "${RedriverFunctionName}:live"})
        self.assertEqual(r["ConsumerEventSource"]["Properties"]["FunctionName"], {"Fn::Sub": "${ConsumerFunctionName}:live"})
        self.assertTrue(r["RedriverSubscription"]["Properties"]["Endpoint"]["Fn::Sub"].endswith(
            ":function:${RedriverFunctionName}:live"))
        self.assertTrue(r["RedriverSchedule"]["Properties"]["Targets"][0]["Arn"]["Fn::Sub"].endswith(
            ":function:${RedriverFunctionName}:live"))

    def test_parked_messages_and_idempotency_records_outlive_the_stack(self):
        for logical_id in ("DeadLetterQueue", "PoisonQueue", "IdempotencyTable"):
            resource = self.resources[logical_id]
            self.assertEqual((resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")),
                             ("Retain", "Retain"), logical_id)

    def test_unconsumed_messages_and_circuit_overrides_outlive_the_stack(self):
        # A replacement or a stray stack delete must not take the source queue's unconsumed
        # messages or the operator's circuit override with it.
        for logical_id in ("SourceQueue", "CircuitTable"):
            resource = self.resources[logical_id]
            self.assertEqual((resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")),
                             ("Retain", "Retain"), logical_id)
        stores = [name for name, r in self.resources.items()
                  if r["Type"] in ("AWS::SQS::Queue", "AWS::DynamoDB::Table")]
        self.assertEqual([n for n in stores if self.resources[n].get("DeletionPolicy") != "Retain"], [])

    def test_every_queue_sets_its_maximum_message_size(self):
        sizes = {name: r["Properties"].get("MaximumMessageSize") for name, r in self.resources.items()
                 if r["Type"] == "AWS::SQS::Queue"}
        self.assertEqual(sizes, {"SourceQueue": {"Ref": "SourceMaximumMessageSize"},
                                 "DeadLetterQueue": 1048576, "PoisonQueue": 1048576})
        self.assertEqual(self.template["Parameters"]["SourceMaximumMessageSize"]["Default"], 262144)

    def test_alarms_that_wake_someone_before_anything_is_lost(self):
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

    def test_ok_notifications_never_reach_the_alerts_topic(self):
        self.assertEqual(self.resources["RecoveryTopic"]["Type"], "AWS::SNS::Topic")
        with_ok = 0
        for name, r in self.resources.items():
            if r["Type"] == "AWS::CloudWatch::Alarm" and "OKActions" in r["Properties"]:
                with_ok += 1
                self.assertEqual(r["Properties"]["OKActions"], [{"Ref": "RecoveryTopic"}], name)
        self.assertGreater(with_ok, 0)

    def test_default_guard_alarm_is_the_consumer_errors_alarm(self):
        self.assertEqual(self.template["Outputs"]["DefaultGuardAlarmNames"]["Value"],
                         self.alarm("ConsumerErrorsAlarm")["AlarmName"])
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nGUARD_ALARM_NAMES=\n", env)

    def test_dashboard_shows_queues_redrives_and_the_consumer(self):
        dashboard = self.resources["Dashboard"]
        self.assertEqual(dashboard["Type"], "AWS::CloudWatch::Dashboard")
        body, variables = dashboard["Properties"]["DashboardBody"]["Fn::Sub"]
        self.assertEqual(variables, {
            "Dlq": {"Fn::GetAtt": ["DeadLetterQueue", "QueueName"]},
            "Source": {"Fn::GetAtt": ["SourceQueue", "QueueName"]},
            "Poison": {"Fn::GetAtt": ["PoisonQueue", "QueueName"]},
            "TriageWidget": {"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:"
                                        "${AWS::StackName}-triage-widget:live"},
        })
        widgets = json.loads(body)["widgets"]
        metrics = {(m[0], m[1], m[3] if len(m) > 3 and isinstance(m[3], str) else None)
                   for w in widgets for m in w["properties"].get("metrics", [])}
        # The ages the archiver reads, and the drains a guard held.
        self.assertIn(("${MetricNamespace}", "OldestMessageAgeSeconds", "${Dlq}"), metrics)
        self.assertIn(("${MetricNamespace}", "OldestMessageAgeSeconds", "${Poison}"), metrics)
        self.assertIn(("${MetricNamespace}/${AWS::StackName}", "GuardHeldRuns", None), metrics)
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
        # a dashboard cannot leave out an alarm by condition.)
        alarm_names = {r["Properties"]["AlarmName"]["Fn::Sub"].split("}-", 1)[1]
                       for r in self.resources.values()
                       if r["Type"] == "AWS::CloudWatch::Alarm" and "Condition" not in r}
        listed = {a.rsplit(":alarm:${AWS::StackName}-", 1)[1]
                  for w in widgets if w["type"] == "alarm" for a in w["properties"]["alarms"]}
        self.assertEqual(listed, alarm_names)
        # 15 + circuit-open + archive-failures + dlq-not-empty-daily,
        # poison-oldest-message-age-archiver, circuit-held-open (the DLQ's archiver-read age alarm
        # exists only with ARCHIVE_DLQ=true)
        self.assertEqual(len(listed), 20)
        self.assertIn("#dashboards:name=${Dashboard}", self.template["Outputs"]["DashboardUrl"]["Value"]["Fn::Sub"])
        # The triage console: a custom widget of the DLQ and one of the poison queue, each calling
        # the widget function's alias live (the stack's output names that function) with the
        # queue's name, as the widget reads its params; redrawn on refresh, resize and range.
        custom = [w for w in widgets if w["type"] == "custom"]
        self.assertEqual([w["properties"]["params"] for w in custom], [{"queue": "${Dlq}"}, {"queue": "${Poison}"}])
        function = self.template["Outputs"]["TriageWidgetFunctionName"]["Value"]["Fn::Sub"]
        self.assertEqual(function, "${AWS::StackName}-triage-widget")
        for w in custom:
            self.assertEqual(w["properties"]["endpoint"], "${TriageWidget}")
            self.assertEqual(w["properties"]["updateOn"], {"refresh": True, "resize": True, "timeRange": True})
            self.assertEqual(w["properties"]["title"], "Triage: " + w["properties"]["params"]["queue"])
        self.assertTrue(variables["TriageWidget"]["Fn::Sub"].endswith(f":function:{function}:live"))

    def test_the_triage_console_roles_are_separate_and_only_the_action_writes_the_books(self):
        def statements(role: str) -> list[dict]:
            return [st for p in self.resources[role]["Properties"]["Policies"] for st in p["PolicyDocument"]["Statement"]]

        def actions(role: str) -> set[str]:
            return {a for st in statements(role) for a in (st["Action"] if isinstance(st["Action"], list) else [st["Action"]])}

        # What the code calls: the book by GetItem (the widget reads it without copying it),
        # the depth by GetQueueAttributes; the action saves the book with PutItem, and its replay
        # and discard move a group's messages: received, held and deleted on the DLQ and the
        # poison queue (the DLQ's sources listed), sent to the source, archived under the prefix.
        self.assertEqual(actions("TriageWidgetRole"),
                         {"dynamodb:GetItem", "sqs:GetQueueAttributes", "logs:CreateLogStream", "logs:PutLogEvents"})
        self.assertEqual(actions("TriageActionRole"), actions("TriageWidgetRole") | {
            "dynamodb:PutItem", "sqs:ReceiveMessage", "sqs:ChangeMessageVisibility", "sqs:DeleteMessage",
            "sqs:ListDeadLetterSourceQueues", "sqs:SendMessage", "s3:PutObject"})
        dlq_and_poison = [{"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}, {"Fn::GetAtt": ["PoisonQueue", "Arn"]}]
        for role in ("TriageWidgetRole", "TriageActionRole"):
            for st in statements(role):
                acts = [st["Action"]] if isinstance(st["Action"], str) else st["Action"]
                if "sqs:SendMessage" in acts:
                    self.assertEqual((role, st["Resource"]),
                                     ("TriageActionRole", {"Fn::GetAtt": ["SourceQueue", "Arn"]}))
                    self.assertEqual(sorted(acts), ["sqs:GetQueueAttributes", "sqs:SendMessage"])
                elif any(a.startswith("sqs:") for a in acts):
                    self.assertEqual(st["Resource"], dlq_and_poison, role)
                if any(a.startswith("s3:") for a in acts):
                    self.assertEqual((role, st["Action"], st["Resource"]),
                                     ("TriageActionRole", "s3:PutObject",
                                      {"Fn::Sub": "${ArchiveBucket.Arn}/${ArchivePrefix}/*"}))
                if any(a.startswith("dynamodb:") for a in acts):
                    # Only the books of the DLQ and the poison queue (by ARN, and by URL as before).
                    keys = st["Condition"]["ForAllValues:StringEquals"]["dynamodb:LeadingKeys"]
                    self.assertEqual([k["Fn::Sub"] for k in keys], [
                        "triage#${DeadLetterQueue.Arn}", "triage#${PoisonQueue.Arn}",
                        "triage#${DeadLetterQueue}", "triage#${PoisonQueue}"], role)
        outputs = self.template["Outputs"]
        self.assertEqual(outputs["TriageWidgetRoleArn"]["Value"], {"Fn::GetAtt": ["TriageWidgetRole", "Arn"]})
        self.assertEqual(outputs["TriageActionRoleArn"]["Value"], {"Fn::GetAtt": ["TriageActionRole", "Arn"]})


class TemplateSize(unittest.TestCase):
    """CloudFormation refuses a CreateStack/UpdateStack TemplateBody above 51,200 bytes. What
    deploy.sh sends is what template_body (infra/lib.sh) writes: measured here for both stacks,
    the wiring template rendered with the state machine as in ORCHESTRATOR=stepfunctions."""

    LIMIT = 51_200
    # A TemplateURL's template: up to 1 MB.
    URL_LIMIT = 1_000_000

    def body(self, template: Path, directory: Path) -> bytes:
        out = directory / (template.stem + ".body.json")
        result = support.run(["bash", "-c", '. infra/lib.sh && template_body "$1" "$2"', "-", str(template), str(out)],
                             env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stderr)
        return out.read_bytes()

    def test_every_template_as_deploy_sends_it_fits_the_template_body_limit(self):
        with tempfile.TemporaryDirectory() as tmp:
            directory = Path(tmp)
            wiring = directory / "wiring.rendered.yaml"
            rendered = support.run(["bash", "-c", '. infra/lib.sh && render_wiring_template "$1" "$2" "$3"', "-",
                                    str(support.WIRING_TEMPLATE), str(support.INFRA / "statemachine" / "redrive.asl.json"),
                                    str(wiring)], env=support.script_env(None))
            self.assertEqual(rendered.returncode, 0, rendered.stderr)
            for source in (support.RESOURCES_TEMPLATE, wiring):
                with self.subTest(source.name):
                    body = self.body(source, directory)
                    # Above it deploy.sh sends the template through S3 (TEMPLATE_BUCKET, test_deploy_script
                    # shows it): a deployer then needs that bucket. The resources template is above it
                    # since the triage policies, as infra/README.md ("Template size") and the README's
                    # deploy prerequisites say; the wiring template fits.
                    if source == support.RESOURCES_TEMPLATE:
                        self.assertGreater(len(body), self.LIMIT, "it fits again: say so in infra/README.md")
                        self.assertLessEqual(len(body), self.URL_LIMIT, f"{source.name}: {len(body)} bytes")
                        readme = (support.INFRA / "README.md").read_text()
                        self.assertIn("`resources.yaml` goes through S3", readme)
                    else:
                        self.assertLessEqual(
                            len(body), self.LIMIT,
                            f"{source.name} is {len(body)} bytes as deploy sends it: make deploy now sends it "
                            "through S3 too (TEMPLATE_BUCKET, infra/README.md 'Template size'); shorten it, or "
                            "document that and change this check")
                    # The same template in meaning: what the YAML says, short-form tags expanded.
                    self.assertEqual(json.loads(body), support.load_template(source))

class AlarmsReceivesCannotHide(unittest.TestCase):
    """SQS leaves a message received three or more times out of ApproximateAgeOfOldestMessage,
    and the archiver receives every parked message each hour: the age alarms on the DLQ and the
    poison queue go blind. These alarms watch what a receive cannot hide."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.template = support.load_template(support.RESOURCES_TEMPLATE)
        cls.resources = cls.template["Resources"]

    def alarm(self, logical_id: str) -> dict:
        self.assertEqual(self.resources[logical_id]["Type"], "AWS::CloudWatch::Alarm")
        p = self.resources[logical_id]["Properties"]
        self.assertEqual(p["AlarmActions"], [{"Ref": "AlertsTopic"}], logical_id)
        return p

    def test_the_dlq_has_a_daily_reminder_on_visible_and_in_flight_counts(self):
        p = self.alarm("DlqNotEmptyDailyAlarm")
        self.assertEqual(p["AlarmName"], {"Fn::Sub": "${AWS::StackName}-dlq-not-empty-daily"})
        stats = {m["Id"]: m["MetricStat"] for m in p["Metrics"] if "MetricStat" in m}
        self.assertEqual({i: (s["Metric"]["Namespace"], s["Metric"]["MetricName"], s["Metric"]["Dimensions"], s["Period"])
                          for i, s in stats.items()},
                         {"visible": ("AWS/SQS", "ApproximateNumberOfMessagesVisible", QUEUE("DeadLetterQueue"), 3600),
                          "inflight": ("AWS/SQS", "ApproximateNumberOfMessagesNotVisible", QUEUE("DeadLetterQueue"), 3600)})
        expression = [m for m in p["Metrics"] if m.get("ReturnData")][0]["Expression"]["Fn::Sub"]
        self.assertIn("HOUR(visible) == ${PoisonReminderHourUtc}", expression)
        self.assertIn("visible + FILL(inflight, 0) > 0", expression)
        # The poison queue's reminder counts in-flight messages too.
        poison = {m["MetricStat"]["Metric"]["MetricName"] for m in self.alarm("PoisonNotEmptyDailyAlarm")["Metrics"]
                  if "MetricStat" in m}
        self.assertEqual(poison, {"ApproximateNumberOfMessagesVisible", "ApproximateNumberOfMessagesNotVisible"})

    def test_the_oldest_age_the_archiver_reads_is_alarmed_per_queue_and_its_silence_breaches(self):
        for logical_id, queue, name in (("PoisonArchiverAgeAlarm", "PoisonQueue", "poison-oldest-message-age-archiver"),
                                        ("DlqArchiverAgeAlarm", "DeadLetterQueue", "dlq-oldest-message-age-archiver")):
            with self.subTest(logical_id):
                p = self.alarm(logical_id)
                self.assertEqual(p["AlarmName"], {"Fn::Sub": "${AWS::StackName}-" + name})
                self.assertEqual((p["Namespace"], p["MetricName"], p["Dimensions"], p["Statistic"]),
                                 ({"Ref": "MetricNamespace"}, "OldestMessageAgeSeconds", QUEUE(queue), "Maximum"))
                self.assertEqual((p["Threshold"], p["ComparisonOperator"]),
                                 ({"Ref": "ArchiveAgeAlarmSeconds"}, "GreaterThanOrEqualToThreshold"))
                # An archiver that stops running must not look healthy; one late hourly run is no alarm.
                self.assertEqual((p["TreatMissingData"], p["Period"], p["EvaluationPeriods"], p["DatapointsToAlarm"]),
                                 ("breaching", 3600, 3, 3))
                self.assertEqual(p["OKActions"], [{"Ref": "RecoveryTopic"}])
        # The DLQ's exists only when the archiver sweeps the DLQ (ARCHIVE_DLQ): its silence
        # would breach for ever otherwise.
        self.assertEqual(self.resources["DlqArchiverAgeAlarm"]["Condition"], "ArchivesDlq")
        self.assertNotIn("Condition", self.resources["PoisonArchiverAgeAlarm"])
        # A day after ARCHIVE_AFTER_DAYS, at most 13 days: before the 14-day retention.
        threshold = self.template["Parameters"]["ArchiveAgeAlarmSeconds"]
        self.assertEqual((threshold["Default"], threshold["MaxValue"]), (11 * 86400, 13 * 86400))
        for days, seconds in (("10", 11 * 86400), ("0.5", 129600), ("12.5", 13 * 86400)):
            result = support.run(["bash", "-c", ". infra/lib.sh && archive_age_alarm_seconds"],
                                 env=support.script_env(None, ARCHIVE_AFTER_DAYS=days))
            self.assertEqual(result.stdout, str(seconds), result.stderr)

    def test_a_guard_holding_every_drain_for_an_hour_pages(self):
        pattern = '{ $.fields.action = "circuit-open" && $.fields.message = "guard alarm*" }'
        namespace = {"Fn::Sub": "${MetricNamespace}/${AWS::StackName}"}
        for logical_id, log_group in (("GuardHeldRunsFilter", "RedriverLogGroup"),
                                      ("WorkflowGuardHeldRunsFilter", "WorkflowLogGroup")):
            p = self.resources[logical_id]["Properties"]
            self.assertEqual((p["LogGroupName"], p["FilterPattern"]), ({"Ref": log_group}, pattern))
            self.assertEqual([(m["MetricNamespace"], m["MetricName"], m["MetricValue"]) for m in p["MetricTransformations"]],
                             [(namespace, "GuardHeldRuns", "1")])
        self.assertEqual(self.resources["WorkflowGuardHeldRunsFilter"]["Condition"], "UseStepFunctions")
        # The filter matches the line each orchestrator logs when a guard holds a run (a guard
        # in ALARM or missing); such a run publishes no CircuitOpen.
        # Both orchestrators hold through the engine (the workflow's CheckCircuitBreaker task
        # calls Engine::check_circuit), so the line is the engine's.
        for source in ("engine/src/engine/invoke.rs", "engine/src/engine/steps.rs", "engine/src/engine/finish.rs"):
            text = (support.REPO / source).read_text(encoding="utf-8")
            self.assertRegex(text, r'action = "circuit-open",\s*"guard alarm', source)
        p = self.alarm("CircuitHeldOpenAlarm")
        self.assertEqual(p["AlarmName"], {"Fn::Sub": "${AWS::StackName}-circuit-held-open"})
        stats = {m["Id"]: m["MetricStat"] for m in p["Metrics"] if "MetricStat" in m}
        self.assertEqual((stats["held"]["Metric"]["Namespace"], stats["held"]["Metric"]["MetricName"], stats["held"]["Stat"]),
                         (namespace, "GuardHeldRuns", "Sum"))
        self.assertEqual(stats["waiting"]["Metric"]["Dimensions"], QUEUE("DeadLetterQueue"))
        # Four 15-minute periods in a row: an hour of held drains while messages wait.
        self.assertEqual({s["Period"] for s in stats.values()}, {900})
        self.assertEqual((p["EvaluationPeriods"], p["DatapointsToAlarm"], p["TreatMissingData"]), (4, 4, "notBreaching"))
        self.assertEqual(p["OKActions"], [{"Ref": "RecoveryTopic"}])


def QUEUE(logical_id: str) -> list[dict]:  # noqa: N802 - reads as the dimension it builds
    return [{"Name": "QueueName", "Value": {"Fn::GetAtt": [logical_id, "QueueName"]}}]


class RoleGrants(unittest.TestCase):
    """The roles grant what the code calls, and nothing else."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.resources = support.load_template(support.RESOURCES_TEMPLATE)["Resources"]

    def statements(self, role: str) -> list[dict]:
        return self.resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]

    def test_redriver_may_describe_composite_and_metric_guard_alarms(self):
        describe = [s for s in self.statements("RedriverRole") if "cloudwatch:DescribeAlarms" in _actions(s)]
        self.assertEqual(len(describe), 1)
        # Composite alarms, and a guard configured after the deploy, are readable: a guard that
        # cannot be described would fail closed on AccessDenied.
        self.assertEqual((describe[0]["Resource"], _actions(describe[0])), ("*", ["cloudwatch:DescribeAlarms"]))
        self.assertNotIn("RedriverGuardAlarmsPolicy", self.resources)

    def test_consumer_gets_its_records_and_the_cause_update_only(self):
        actions = {a for s in self.statements("ConsumerRole") for a in _actions(s)}
        self.assertEqual(sorted(a for a in actions if a.startswith("dynamodb:")),
                         ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem",
                          "dynamodb:UpdateItem"])

    # That every call of the code is granted is no longer read from the source text: the
    # functions run under these roles, rendered by tests/iam_policy.py, in the IAM-enforced
    # tests (functions/redriver/tests/lambda.rs and engine/tests/circuit.rs for RedriverRole,
    # functions/consumer/tests/lambda_watch.rs for ConsumerRole,
    # functions/triage-console/tests/console.rs for TriageWidgetRole and TriageActionRole).

    def test_redriver_reads_destination_sizes_and_rearms_its_trigger(self):
        by_sid = {s["Sid"]: s for s in self.statements("RedriverRole")}
        self.assertEqual(sorted(_actions(by_sid["SendToSourceAndPoison"])),
                         ["sqs:GetQueueAttributes", "sqs:SendMessage"])
        self.assertEqual(by_sid["SendToSourceAndPoison"]["Resource"],
                         [{"Fn::GetAtt": ["SourceQueue", "Arn"]}, {"Fn::GetAtt": ["PoisonQueue", "Arn"]}])
        self.assertEqual(_actions(by_sid["RearmTriggerAlarm"]), ["cloudwatch:SetAlarmState"])


class AdaptiveCircuit(unittest.TestCase):
    """The circuit's table, the re-driver's least privilege on it, and its alarm."""

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
        published = (support.REPO / "engine/src/ports.rs").read_text(encoding="utf-8")
        self.assertIn('MetricValue::count("CircuitOpen"', published)


if __name__ == "__main__":
    unittest.main()

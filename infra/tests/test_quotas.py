"""infra/quotas.py: every AWS quota a deploy can hit, each check failing on an input above it,
and the attach-mode ceiling the README states, proven at its worst case (80-character names,
three sources per DLQ, the longest partition and region)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

import support

sys.path.insert(0, str(support.INFRA))
import attach_template  # noqa: E402
import quotas  # noqa: E402


def role(inline_chars: int) -> dict:
    """A role whose one inline policy is `inline_chars` characters without whitespace."""
    doc = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": ""}]}
    doc["Statement"][0]["Resource"] = "x" * (inline_chars - quotas.policy_chars(doc))
    return {"Type": "AWS::IAM::Role", "Properties": {"Policies": [{"PolicyName": "p", "PolicyDocument": doc}]}}


def managed(chars: int) -> dict:
    doc = role(chars)["Properties"]["Policies"][0]["PolicyDocument"]
    return {"Type": "AWS::IAM::ManagedPolicy", "Properties": {"PolicyDocument": doc}}


def exceeded(template: dict, body_bytes: int = 1000) -> list[str]:
    return [what for what, figure, quota in quotas.over(quotas.check_template(template, body_bytes))]


class EachQuota(unittest.TestCase):
    def test_a_managed_policy_passes_at_6144_characters_and_fails_above(self):
        self.assertEqual(exceeded({"Resources": {"Op": managed(6144)}}), [])
        self.assertEqual(exceeded({"Resources": {"Op": managed(6145)}}), ["managed policy Op (characters)"])

    def test_whitespace_does_not_count(self):
        doc = managed(6144)["Properties"]["PolicyDocument"]
        self.assertEqual(quotas.policy_chars(json.loads(json.dumps(doc, indent=4))), 6144)

    def test_a_roles_inline_policies_count_together_with_the_policies_attached_to_it(self):
        self.assertEqual(exceeded({"Resources": {"R": role(10240)}}), [])
        self.assertEqual(exceeded({"Resources": {"R": role(10241)}}), ["role R inline policies (characters)"])
        extra = managed(200)["Properties"]["PolicyDocument"]
        attached = {"Type": "AWS::IAM::Policy", "Properties": {"Roles": [{"Ref": "R"}], "PolicyDocument": extra}}
        self.assertEqual(exceeded({"Resources": {"R": role(10240 - 200), "X": attached}}), [])
        self.assertEqual(exceeded({"Resources": {"R": role(10240 - 199), "X": attached}}),
                         ["role R inline policies (characters)"])

    def test_intrinsic_functions_count_at_their_longest(self):
        doc = {"Statement": [{"Resource": {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:${AWS::StackName}"}}]}
        resolved = quotas.resolve(doc, {"Resources": {}})
        self.assertEqual(resolved["Statement"][0]["Resource"],
                         "arn:aws-iso-b:sqs:ap-southeast-14:123456789012:" + "S" * 40)

    def test_counts_of_resources_outputs_and_parameters(self):
        many = lambda n: {f"K{i}": {"Type": "AWS::SNS::Topic"} for i in range(n)}  # noqa: E731
        self.assertEqual(exceeded({"Resources": many(500), "Outputs": many(200), "Parameters": many(200)}), [])
        self.assertEqual(sorted(exceeded({"Resources": many(501), "Outputs": many(201), "Parameters": many(201)})),
                         ["outputs", "parameters", "resources"])

    def test_the_template_size_through_s3(self):
        self.assertEqual(exceeded({"Resources": {}}, 1_000_000), [])
        self.assertEqual(exceeded({"Resources": {}}, 1_000_001), ["template size through S3 (bytes)"])

    def test_alarm_actions(self):
        alarm = lambda n: {"Type": "AWS::CloudWatch::Alarm", "Properties": {"AlarmActions": ["a"] * n}}  # noqa: E731
        self.assertEqual(exceeded({"Resources": {"A": alarm(5)}}), [])
        self.assertEqual(exceeded({"Resources": {"A": alarm(6)}}), ["alarm A AlarmActions"])

    def test_a_dashboard_passes_at_its_widget_and_metric_limits_and_fails_above(self):
        def dashboard(*rows: int) -> dict:
            widgets = [{"type": "metric", "properties": {"title": f"w{i}", "metrics": [["N", "M"]] * n}}
                       for i, n in enumerate(rows)]
            return {"Resources": {"D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {
                "DashboardBody": {"Fn::Sub": json.dumps({"widgets": widgets})}}}}}
        self.assertEqual(exceeded(dashboard(500, 500, 500, 500, 500)), [])
        self.assertEqual(exceeded(dashboard(501)), ["dashboard D widget 'w0' metrics"])
        self.assertEqual(exceeded(dashboard(500, 500, 500, 500, 500, 1)), ["dashboard D metrics"])
        self.assertEqual(exceeded(dashboard(*[0] * 500)), [])
        self.assertEqual(exceeded(dashboard(*[0] * 501)), ["dashboard D widgets"])

    def test_custom_widgets_count_and_call_a_lambda_of_the_dashboards_region(self):
        def dashboard(count: int, endpoint: str) -> dict:
            widgets = [{"type": "metric", "properties": {"title": "m", "metrics": [["N", "M"]]}}]
            widgets += [{"type": "custom", "properties": {"title": f"c{i}", "endpoint": endpoint, "params": {}}}
                        for i in range(count)]
            return {"Resources": {"D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {
                "DashboardBody": {"Fn::Sub": json.dumps({"widgets": widgets})}}}}}
        alias = "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-triage-widget:live"
        self.assertEqual(exceeded(dashboard(499, alias)), [])
        self.assertEqual(exceeded(dashboard(500, alias)), ["dashboard D widgets"])
        self.assertEqual(exceeded(dashboard(1, alias.replace(":live", ""))), [])
        for wrong in ("arn:aws:lambda:us-east-1:${AWS::AccountId}:function:w:live",  # another region
                      "arn:${AWS::Partition}:sns:${AWS::Region}:${AWS::AccountId}:w",  # not a function
                      "${AWS::StackName}-triage-widget"):  # a name, not an ARN
            self.assertEqual(exceeded(dashboard(1, wrong)),
                             ["dashboard D custom widget 'c0' endpoint not a Lambda ARN of region ap-southeast-14"], wrong)

    def test_a_fleet_metrics_insights_alarm_matches_each_protected_dlq_and_returns_one_series(self):
        # Without GROUP BY the query returns one series, whatever the fleet; it matches one metric
        # per protected DLQ and the poison queue, at most 10,000 (above, PARTIAL_DATA).
        def fleet(dlqs: int, query: str = 'SELECT SUM(X) FROM SCHEMA("${N}", QueueName)') -> dict:
            alarm = {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Metrics": [
                {"Id": "fleet", "Expression": {"Fn::Sub": query}}]}}
            return {"Resources": {"F": alarm}, "Outputs": {"ProtectedDlqCount": {"Value": str(dlqs)}}}
        self.assertEqual(exceeded(fleet(9_999)), [])
        self.assertEqual(exceeded(fleet(10_000)), ["alarm F Metrics Insights metrics"])
        # With GROUP BY it returns a series per queue (at most its LIMIT): 500 at most.
        grouped = 'SELECT SUM(X) FROM SCHEMA("${N}", QueueName) GROUP BY QueueName'
        self.assertEqual(exceeded(fleet(499, grouped)), [])
        self.assertEqual(exceeded(fleet(500, grouped)), ["alarm F Metrics Insights series"])
        self.assertEqual(exceeded(fleet(5_000, grouped + " ORDER BY SUM() DESC LIMIT 500")), [])
        self.assertEqual(exceeded(fleet(5_000, grouped + " ORDER BY SUM() DESC LIMIT 501")),
                         ["alarm F Metrics Insights series"])

    def nested(self, child: dict, passed: dict | None = None) -> dict:
        """A parent naming `child` (as its nested stack N, under key k.json) with `passed` parameters."""
        declared = {k: {} for k in child.get("Parameters", {})}
        return {"Resources": {"N": {"Type": "AWS::CloudFormation::Stack", "Properties": {
            "TemplateURL": "https://b.s3.eu-west-1.amazonaws.com/s/alarms/k.json",
            "Parameters": declared if passed is None else passed}}}}

    def test_each_nested_stack_is_checked_as_a_template_of_its_own(self):
        many = lambda n: {f"K{i}": {"Type": "AWS::SNS::Topic"} for i in range(n)}  # noqa: E731
        ok = {"Resources": many(500), "Parameters": {"P": {"Type": "String"}}}

        def over(parent: dict, children: dict) -> list[str]:
            return [what for what, _, _ in quotas.over(quotas.check_stacks(parent, 1000, children))]

        self.assertEqual(over(self.nested(ok), {"k.json": (ok, 1_000_000)}), [])
        self.assertEqual(over(self.nested(ok), {"k.json": (ok, 1_000_001)}),
                         ["nested stack N: template size through S3 (bytes)"])
        self.assertEqual(over(self.nested({"Resources": many(501)}), {"k.json": ({"Resources": many(501)}, 10)}),
                         ["nested stack N: resources"])
        self.assertEqual(over(self.nested(ok), {}), ["nested stack N: its template k.json was not given"])
        # CloudFormation refuses a parameter the nested template does not declare, and one it
        # needs (no Default) that the parent does not pass.
        self.assertEqual(len(over(self.nested(ok, {"P": "x", "Q": "y"}), {"k.json": (ok, 10)})), 1)
        self.assertEqual(len(over(self.nested(ok, {}), {"k.json": (ok, 10)})), 1)
        with_default = {"Resources": {}, "Parameters": {"P": {"Type": "String", "Default": "d"}}}
        self.assertEqual(over(self.nested(with_default, {}), {"k.json": (with_default, 10)}), [])

    def test_the_command_checks_the_nested_templates_it_is_given(self):
        work = Path(tempfile.mkdtemp())
        child = {"Resources": {f"K{i}": {"Type": "AWS::SNS::Topic"} for i in range(501)}}
        (work / "t.json").write_text(json.dumps(self.nested(child)))
        (work / "children").mkdir()
        (work / "children" / "k.json").write_text(json.dumps(child))
        command = [sys.executable, str(support.INFRA / "quotas.py"), "check", str(work / "t.json")]
        result = subprocess.run(command + ["--children", str(work / "children")], capture_output=True, text=True,
                                check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("quota exceeded: nested stack N: resources: 501, above AWS's 500", result.stderr)
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("nested stack N: its template k.json was not given", result.stderr)

    def test_a_lambda_environment_passes_at_4_kb_and_fails_above(self):
        variables = {"DLQ_URLS": "u" * (4096 - len("DLQ_URLS"))}
        self.assertEqual(quotas.env_bytes(variables), 4096)
        self.assertEqual(quotas.over([quotas.check_env("redriver", variables)]), [])
        variables["X"] = ""
        self.assertEqual(len(quotas.over([quotas.check_env("redriver", variables)])), 1)

    def test_the_protected_dlqs_list_item_passes_at_400_kb_and_fails_above(self):
        fixed = quotas.dlq_list_item_bytes("")
        self.assertEqual(fixed, len("queue") + len("redrive:fleet:dlq-urls") + len("dlq_urls"))
        self.assertEqual(quotas.over([quotas.check_dlq_list("u" * (400 * 1024 - fixed))]), [])
        self.assertEqual(len(quotas.over([quotas.check_dlq_list("u" * (400 * 1024 - fixed + 1))])), 1)
        work = Path(tempfile.mkdtemp())
        (work / "t.json").write_text(json.dumps({"Resources": {}}))
        (work / "dlq-urls.list").write_text("u" * (400 * 1024))
        result = subprocess.run([sys.executable, str(support.INFRA / "quotas.py"), "check", str(work / "t.json"),
                                 str(work / "dlq-urls.list")], capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn(f"quota exceeded: protected DLQs' list item (bytes): {400 * 1024 + fixed}", result.stderr)

    def test_the_command_names_what_is_exceeded_and_exits_1(self):
        work = Path(tempfile.mkdtemp())
        (work / "t.json").write_text(json.dumps({"Resources": {"Op": managed(6145)}}))
        (work / "redriver.env").write_text("DLQ_URLS='" + "u" * 4100 + "'\n")
        result = subprocess.run([sys.executable, str(support.INFRA / "quotas.py"), "check", str(work / "t.json"),
                                 str(work / "redriver.env")], capture_output=True, text=True, check=False)
        self.assertEqual(result.returncode, 1)
        self.assertIn("quota exceeded: managed policy Op (characters): 6145, above AWS's 6144", result.stderr)
        self.assertIn("quota exceeded: environment of redriver (bytes): 4108, above AWS's 4096", result.stderr)


class Ceiling(unittest.TestCase):
    """What deploy sends in attach mode, rendered by its own code (attach_template.py and the
    environment writers of infra/lib.sh) for N DLQs at the worst case."""

    @classmethod
    def setUpClass(cls) -> None:
        cls.work = Path(tempfile.mkdtemp())
        cls.ceiling, cls.next_exceeds = quotas.ceiling(support.RESOURCES_TEMPLATE, 80, 3, cls.work)

    def test_at_the_ceiling_every_quota_holds_and_one_more_dlq_breaks_one(self):
        # The design's goal: at least 500 DLQs per install at the worst case.
        self.assertGreaterEqual(self.ceiling, 500)
        at = quotas.figures_for(support.RESOURCES_TEMPLATE, quotas.synthetic_dlqs(self.ceiling, 80, 3), self.work)
        self.assertEqual(quotas.over(at), [])
        self.assertTrue(self.next_exceeds)
        # Every figure the deploy sends is measured: both roles, the operator's policy, both environments.
        measured = {what for what, _, _ in at}
        for expected in ("managed policy OperatorPolicy (characters)", "role RedriverRole inline policies (characters)",
                         "role ArchiverRole inline policies (characters)", "environment of redriver (bytes)",
                         "environment of archiver (bytes)", "resources", "template size through S3 (bytes)",
                         "protected DLQs' list item (bytes)", "dashboard Dashboard metrics",
                         "alarm FleetCircuitOpenAlarm Metrics Insights series",
                         "alarm FleetCircuitOpenAlarm Metrics Insights metrics",
                         "nested stack AlarmStack001: resources",
                         "nested stack AlarmStack001: template size through S3 (bytes)",
                         f"nested stack AlarmStack{-(-self.ceiling // attach_template.DLQS_PER_ALARM_STACK):03d}: "
                         "resources"):
            self.assertIn(expected, measured)

    def test_the_fleet_dashboards_of_500_dlqs_hold_within_cloudwatchs_limits(self):
        # One line per DLQ and the poison queue is 501 metrics, above a widget's 500: the lines
        # are split over two widgets; a triage widget per DLQ and the poison queue, beside the
        # others, is more than a dashboard's 500 widgets: the rest go on a second dashboard.
        dlqs = quotas.synthetic_dlqs(500, 80, 3)
        template = {"Resources": {**attach_template.fleet_dashboard(dlqs), "PoisonQueue": {"Type": "AWS::SQS::Queue"}}}
        self.assertEqual(sorted(template["Resources"]), ["Dashboard", "PoisonQueue", "TriageDashboard2"])
        self.assertEqual(exceeded(template), [])
        bodies = [json.loads(quotas.resolve(template["Resources"][d]["Properties"]["DashboardBody"], template))
                  for d in ("Dashboard", "TriageDashboard2")]
        widgets = [w for body in bodies for w in body["widgets"]]
        custom = [w["properties"]["params"]["queue"] for w in widgets if w["type"] == "custom"]
        self.assertEqual(custom, [d["name"] for d in dlqs] + ["N" * 80])  # the poison queue's name last
        for title in ("Depth of every protected DLQ", "Age of oldest message"):
            lines = [row[3] for w in widgets if w["properties"].get("title", "").startswith(title)
                     for row in w["properties"]["metrics"]]
            self.assertEqual(lines, [d["name"] for d in dlqs] + ["N" * 80], title)
        for body in bodies:  # no two widgets of a dashboard overlap
            cells = [(w["x"], w["y"]) for w in body["widgets"]]
            self.assertEqual(len(cells), len(set(cells)))
        self.assertEqual(quotas.resolve(template["Resources"]["TriageDashboard2"]["Properties"]["DashboardName"],
                                     template), "S" * 40 + "-triage-2")

    def test_the_environment_is_the_one_deploy_writes(self):
        redriver, archiver = quotas.attach_env_files(quotas.synthetic_dlqs(2, 80, 3), self.work)
        variables = quotas.read_env_file(redriver)
        # The protected DLQs' list is in the circuit table, which both environments name.
        self.assertNotIn("DLQ_URLS", variables)
        self.assertEqual(variables["DLQ_LIST_TABLE"], variables["CIRCUIT_TABLE"])
        for name in ("POISON_QUEUE_URL", "CIRCUIT_TABLE", "METRIC_NAMESPACE", "TRIGGER_ALARM_NAME", "BACKOFF_JITTER"):
            self.assertIn(name, variables)
        archiver_variables = quotas.read_env_file(archiver)
        self.assertIn("ARCHIVE_BUCKET", archiver_variables)
        self.assertNotIn("DLQ_URLS", archiver_variables)
        self.assertEqual(archiver_variables["DLQ_LIST_TABLE"], variables["CIRCUIT_TABLE"])

    def test_the_readme_states_this_ceiling(self):
        text = (support.REPO / "infra" / "README.md").read_text(encoding="utf-8")
        match = re.search(r"at most \*\*(\d+) DLQs\*\* per install", text)
        self.assertIsNotNone(match, "infra/README.md states the ceiling as 'at most **N DLQs** per install'")
        self.assertEqual(int(match.group(1)), self.ceiling)

    def test_no_policy_and_no_environment_grows_with_the_fleet(self):
        # Grants by tag and the list in the circuit table: the policies and the environments
        # are as large at the ceiling as at one DLQ.
        def sizes(n: int) -> dict:
            figures = quotas.figures_for(support.RESOURCES_TEMPLATE, quotas.synthetic_dlqs(n, 80, 3), self.work)
            return {what: figure for what, figure, _ in figures
                    if what.startswith(("managed policy", "role ", "environment of"))}

        self.assertEqual(sizes(1), sizes(self.ceiling))


if __name__ == "__main__":
    unittest.main()

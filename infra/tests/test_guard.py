"""The project's infrastructure policies (infra/policy/redrive.guard) with AWS CloudFormation Guard.

- the real templates pass every rule, and every rule really applies to one of them (a rule
  that only ever skips would hide a broken template);
- cfn-guard's own unit tests (redrive_tests.yaml) pass, and every rule has an input there that
  it must FAIL, so a rule that stops matching is noticed;
- each rule fails on the real template with one thing broken in it (a mutation), so the rules
  check this template and not only the hand-written fragments.
"""

from __future__ import annotations

import copy
import json
import re
import tempfile
import unittest
from pathlib import Path


import support


def rule_names() -> list[str]:
    text = support.GUARD_RULES.read_text(encoding="utf-8")
    return re.findall(r"^rule\s+(\w+)", text, flags=re.MULTILINE)


def guard_validate(template: Path) -> dict:
    """{rule: PASS|FAIL|SKIP} for one data file."""
    result = support.run(
        [support.cfn_guard(), "validate", "--rules", str(support.GUARD_RULES), "--data", str(template),
         "--output-format", "json", "--show-summary", "none"],
        env=support.script_env(None),
    )
    # 0 = all pass, 19 = some rule failed; anything else is a usage or parse error.
    if result.returncode not in (0, 19):
        raise AssertionError(f"cfn-guard validate failed ({result.returncode}):\n{result.stderr}{result.stdout}")
    report = json.loads(result.stdout)
    status = {name: "PASS" for name in report["compliant"]}
    status.update({name: "SKIP" for name in report["not_applicable"]})
    for entry in report["not_compliant"]:
        status[entry["Rule"]["name"] if isinstance(entry, dict) else entry] = "FAIL"
    return status


def real_templates() -> list[Path]:
    """make deploy's two templates, and the standalone template (infra/standalone_template.py) as
    make dist writes it and with its policy documents written as Fn::Sub text parsed back into
    documents (what CloudFormation gives IAM), which the rules read statement by statement."""
    directory = support.scratch_dir("redrive-guard-")
    return [support.RESOURCES_TEMPLATE, support.WIRING_TEMPLATE,
            support.write_json(support.standalone_template(), directory, "standalone.json"),
            support.write_json(support.standalone_template(expanded=True), directory, "standalone-expanded.json")]


class RealTemplates(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.templates = real_templates()

    def test_every_rule_passes_or_does_not_apply(self):
        for template in self.templates:
            status = guard_validate(template)
            self.assertEqual(sorted(status), sorted(rule_names()), template.name)
            failing = [rule for rule, s in status.items() if s == "FAIL"]
            self.assertEqual(failing, [], f"{template.name} breaks {failing}")

    def test_every_rule_applies_to_a_real_template(self):
        passed = set()
        for template in self.templates:
            passed |= {rule for rule, s in guard_validate(template).items() if s == "PASS"}
        self.assertEqual(sorted(set(rule_names()) - passed), [], "rules that never apply")

    def test_the_standalone_template_is_checked_statement_by_statement(self):
        # The rules on the roles' statements apply to the expanded standalone template as to
        # make deploy's: the documents written as text hide none of its grants from them.
        status = guard_validate(self.templates[3])
        for rule in ("no_wildcard_iam_actions", "wildcard_resource_only_for_metrics_and_describe_alarms",
                     "circuit_alarm_and_least_privilege", "archive_written_only_by_its_writers",
                     "template_functions_invoked_directly"):
            self.assertEqual(status[rule], "PASS", rule)


class RuleUnitTests(unittest.TestCase):
    def test_cfn_guard_unit_tests_pass(self):
        result = support.run(
            [support.cfn_guard(), "test", "--rules-file", str(support.GUARD_RULES),
             "--test-data", str(support.GUARD_TESTS), "--output-format", "json"],
            env=support.script_env(None),
        )
        report = json.loads(result.stdout)
        failures = [(t["name"], t["failed_rules"]) for t in report["test_cases"] if t["failed_rules"]]
        self.assertEqual(failures, [])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertGreaterEqual(len(report["test_cases"]), len(rule_names()))

    def test_every_rule_has_an_input_it_must_fail(self):
        cases = support.cfn_yaml.loads(support.GUARD_TESTS.read_text(encoding="utf-8"))
        with_failing_example = {
            rule for case in cases for rule, expected in case["expectations"]["rules"].items() if expected == "FAIL"
        }
        self.assertEqual(sorted(set(rule_names()) - with_failing_example), [])
        self.assertEqual(sorted(with_failing_example - set(rule_names())), [], "expectations for unknown rules")


def _resources(template: dict) -> dict:
    return template["Resources"]


def _statement(template: dict, role: str, sid: str) -> dict:
    for statement in _resources(template)[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]:
        if statement.get("Sid") == sid:
            return statement
    raise KeyError(sid)


# rule -> (template, what to break in it, why it must fail)
MUTATIONS = {
    "queues_encrypted": (
        "resources", lambda t: _resources(t)["PoisonQueue"]["Properties"].pop("SqsManagedSseEnabled")),
    "terminal_queues_keep_14_days": (
        "resources", lambda t: _resources(t)["DeadLetterQueue"]["Properties"].update(MessageRetentionPeriod=345600)),
    "source_dead_letters_into_dlq": (
        "resources", lambda t: _resources(t)["SourceQueue"]["Properties"]["RedrivePolicy"].update(
            deadLetterTargetArn={"Fn::GetAtt": ["PoisonQueue", "Arn"]})),
    "redrive_allow_policy_present": (
        "resources", lambda t: _resources(t)["DeadLetterQueue"]["Properties"].pop("RedriveAllowPolicy")),
    "source_visibility_six_times_consumer_timeout": (
        "resources", lambda t: t["Mappings"]["ConsumerTimeouts"]["30"].update(SourceQueueVisibilityTimeout=150)),
    "alarms_have_actions": (
        "resources", lambda t: _resources(t)["DlqOldestMessageAgeAlarm"]["Properties"].pop("AlarmActions")),
    "tables_have_ttl_and_pitr": (
        "resources", lambda t: _resources(t)["IdempotencyTable"]["Properties"].pop("PointInTimeRecoverySpecification")),
    "no_wildcard_iam_actions": (
        "resources", lambda t: _statement(t, "ConsumerRole", "IdempotencyRecords").update(Action="dynamodb:*")),
    "wildcard_resource_only_for_metrics_and_describe_alarms": (
        "resources", lambda t: _statement(t, "RedriverRole", "SendToSourceAndPoison").update(Resource="*")),
    "xray_writes_only_with_active_tracing": (
        "resources", lambda t: _resources(t)["XRayWrites"].pop("Condition")),
    "lambda_permissions_scoped": (
        "wiring", lambda t: _resources(t)["TriggerTopicInvokesRedriver"]["Properties"].pop("SourceArn")),
    "sqs_event_source_reports_batch_failures": (
        "wiring", lambda t: _resources(t)["ConsumerEventSource"]["Properties"].pop("FunctionResponseTypes")),
    "terminal_data_retained": (
        "resources", lambda t: _resources(t)["IdempotencyTable"].update(DeletionPolicy="Delete")),
    "queues_set_maximum_message_size": (
        "resources", lambda t: _resources(t)["PoisonQueue"]["Properties"].pop("MaximumMessageSize")),
    "loss_alarms_present": (
        "resources", lambda t: _resources(t).pop("SourceOldestMessageAgeAlarm")),
    "ok_actions_not_on_alerts_topic": (
        "resources", lambda t: _resources(t)["DlqFinalAgeAlarm"]["Properties"].update(OKActions=[{"Ref": "AlertsTopic"}])),
    "dashboard_present": (
        "resources", lambda t: _resources(t).pop("Dashboard") and t["Outputs"].pop("DashboardUrl")
        and t["Outputs"].pop("DashboardName")),
    "invocations_through_live_alias": (
        "wiring", lambda t: _resources(t)["ConsumerEventSource"]["Properties"].update(
            FunctionName={"Ref": "ConsumerFunctionName"})),
    "template_functions_invoked_directly": (
        "standalone", lambda t: _resources(t)["RedriverSchedule"]["Properties"]["Targets"][0].update(
            Arn={"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${AWS::StackName}-redriver"})),
    "schedule_on_by_default": (
        "wiring", lambda t: t["Parameters"]["EnableSchedule"].update(Default="false")),
    # ---- adaptive circuit ----
    "circuit_alarm_and_least_privilege": (
        "resources", lambda t: _statement(t, "RedriverRole", "CircuitRecord").update(
            Action=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"])),
    # ---- archive ----
    "buckets_encrypted_versioned_private": (
        "resources", lambda t: _resources(t)["ArchiveBucket"]["Properties"].pop("PublicAccessBlockConfiguration")),
    "buckets_retained_with_lifecycle": (
        "resources", lambda t: _resources(t)["ArchiveBucket"].update(DeletionPolicy="Delete")),
    "buckets_deny_insecure_transport": (
        "resources", lambda t: _resources(t)["ArchiveBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"].pop(0)),
    "archive_written_only_by_its_writers": (
        "resources", lambda t: _statement(t, "ArchiverRole", "WriteArchiveObjects").update(
            Resource={"Fn::Sub": "${ArchiveBucket.Arn}/*"})),
    "archive_reads_only_by_named_roles": (
        "resources", lambda t: _resources(t)["ArchiveBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"].pop(2)),
    "alarms_receives_cannot_hide": (
        "resources", lambda t: _resources(t)["PoisonArchiverAgeAlarm"]["Properties"].update(
            TreatMissingData="notBreaching")),
    # ---- Step Functions orchestrator ----
    "state_machines_standard_with_logging": (
        "wiring", lambda t: _resources(t)["StateMachine"]["Properties"].update(StateMachineType="EXPRESS")),
    "state_machine_rules_target_only_the_state_machine": (
        "wiring", lambda t: _resources(t)["DlqAlarmStartsWorkflow"]["Properties"]["Targets"][0].update(
            Arn={"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${RedriverFunctionName}:live"})),
    "state_machine_role_least_privilege": (
        "wiring", lambda t: _statement(t, "StateMachineRole", "InvokeTaskFunction").update(
            Resource={"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:${WorkflowFunctionName}"})),
    "start_execution_role_least_privilege": (
        "wiring", lambda t: _statement(t, "StartExecutionRole", "StartWorkflow").update(
            Action=["states:StartExecution", "states:StopExecution"])),
    "workflow_task_role_scoped": (
        "resources", lambda t: _statement(t, "WorkflowRole", "CircuitRecord").update(
            Action=["dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:DeleteItem"])),
    "workflow_executions_alarm_present": (
        "resources", lambda t: _resources(t).pop("WorkflowExecutionsFailedAlarm")),
}


class MutatedRealTemplates(unittest.TestCase):
    def test_every_rule_has_a_mutation(self):
        self.assertEqual(sorted(MUTATIONS), sorted(rule_names()))

    def test_each_rule_fails_on_the_real_template_with_one_thing_broken(self):
        originals = {
            "resources": support.load_template(support.RESOURCES_TEMPLATE),
            "wiring": support.load_template(support.WIRING_TEMPLATE),
            "standalone": support.standalone_template(expanded=True),
        }
        with tempfile.TemporaryDirectory() as tmp:
            for rule, (which, mutate) in MUTATIONS.items():
                with self.subTest(rule=rule):
                    template = copy.deepcopy(originals[which])
                    mutate(template)
                    status = guard_validate(support.write_json(template, Path(tmp), f"{rule}.json"))
                    self.assertEqual(status[rule], "FAIL")
                    others = [r for r, s in status.items() if s == "FAIL" and r != rule]
                    self.assertEqual(others, [], "a mutation should break one rule only")


if __name__ == "__main__":
    unittest.main()

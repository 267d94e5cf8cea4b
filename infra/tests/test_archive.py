"""The archiver's infrastructure: the archive bucket, the archiver's role (the only
writer), its schedule and its alarm, read from the parsed templates (moto ignores deletion
policies, bucket policies and alarms); Guard checks the same from the rules' side."""

from __future__ import annotations

import json
import unittest

import support


def _actions(statement: dict) -> list[str]:
    return support.as_list(statement["Action"])


class ArchiveTemplates(support.TemplatesTestCase):
    def statements(self, role: str) -> dict:
        return {s["Sid"]: s for s in self.resources[role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]}

    def test_bucket_is_encrypted_versioned_private_retained_with_a_lifecycle(self):
        bucket = self.resources["ArchiveBucket"]
        self.assertEqual((bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]), ("Retain", "Retain"))
        p = bucket["Properties"]
        self.assertEqual(p["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
                         ["ServerSideEncryptionByDefault"]["SSEAlgorithm"],
                         {"Fn::If": ["HasArchiveKmsKey", "aws:kms", "AES256"]})
        self.assertEqual(p["VersioningConfiguration"], {"Status": "Enabled"})
        self.assertEqual(p["PublicAccessBlockConfiguration"], {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True})
        [rule] = p["LifecycleConfiguration"]["Rules"]
        self.assertEqual(rule["Status"], "Enabled")
        self.assertEqual(rule["NoncurrentVersionExpiration"], {"NoncurrentDays": {"Ref": "ArchiveNoncurrentVersionDays"}})
        self.assertNotIn("ExpirationInDays", rule, "current archive objects never expire by themselves")

    def test_bucket_policy_denies_plain_http_and_writes_by_anyone_but_the_archiver_and_the_console_discard(self):
        statements = {s["Sid"]: s for s in
                      self.resources["ArchiveBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]}
        tls = statements["DenyInsecureTransport"]
        self.assertEqual((tls["Effect"], tls["Principal"], tls["Condition"]),
                         ("Deny", "*", {"Bool": {"aws:SecureTransport": "false"}}))
        only = statements["OnlyArchiveWritersWriteObjects"]
        self.assertEqual((only["Effect"], only["Action"]), ("Deny", "s3:PutObject"))
        self.assertEqual(only["Condition"], {"ArnNotEquals": {"aws:PrincipalArn": [
            {"Fn::GetAtt": ["ArchiverRole", "Arn"]}, {"Fn::GetAtt": ["TriageActionRole", "Arn"]}]}})

    def test_archived_bodies_are_readable_only_by_the_archiver_and_the_named_readers(self):
        statements = {s["Sid"]: s for s in
                      self.resources["ArchiveBucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]}
        reads = statements["OnlyNamedRolesReadObjects"]
        self.assertEqual((reads["Effect"], reads["Principal"], sorted(reads["Action"]), reads["Resource"]),
                         ("Deny", "*", ["s3:GetObject", "s3:GetObjectVersion"], {"Fn::Sub": "${ArchiveBucket.Arn}/*"}))
        spared = reads["Condition"]["ArnNotEquals"]["aws:PrincipalArn"]
        archiver = {"Fn::GetAtt": ["ArchiverRole", "Arn"]}
        self.assertEqual(spared, {"Fn::If": ["HasArchiveReaders",
                                             {"Fn::Split": [",", {"Fn::Sub": "${ArchiverRole.Arn},${ArchiveReaderArns}"}]},
                                             [archiver]]})
        self.assertEqual(self.template["Conditions"]["HasArchiveReaders"],
                         {"Fn::Not": [{"Fn::Equals": [{"Ref": "ArchiveReaderArns"}, ""]}]})
        # Nobody but the archiver by default; the operator names reader roles in redrive.env,
        # and deploy.sh passes them (checked as ARNs, refused otherwise).
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nARCHIVE_READER_ARNS=\n", env)
        self.assertEqual(self.template["Parameters"]["ArchiveReaderArns"]["Default"], "")
        pattern = self.template["Parameters"]["ArchiveReaderArns"]["AllowedPattern"]
        for value in ("", "arn:aws:iam::111122223333:role/ops",
                      "arn:aws:iam::111122223333:role/ops,arn:aws:iam::111122223333:role/team/audit"):
            self.assertRegex(value, pattern)
        for value in ("*", "arn:aws:iam::111122223333:role/ops, arn:aws:iam::111122223333:role/x", "ops"):
            self.assertNotRegex(value, pattern)
        deploy = (support.INFRA / "deploy.sh").read_text(encoding="utf-8")
        self.assertIn('"ArchiveReaderArns=$ARCHIVE_READER_ARNS"', deploy)

    def test_sse_kms_with_the_users_key_and_the_archiver_may_use_that_key_only(self):
        default = self.resources["ArchiveBucket"]["Properties"]["BucketEncryption"][
            "ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        self.assertEqual(default["KMSMasterKeyID"],
                         {"Fn::If": ["HasArchiveKmsKey", {"Ref": "ArchiveKmsKeyArn"}, {"Ref": "AWS::NoValue"}]})
        self.assertEqual(self.template["Conditions"]["HasArchiveKmsKey"],
                         {"Fn::Not": [{"Fn::Equals": [{"Ref": "ArchiveKmsKeyArn"}, ""]}]})
        policy = self.resources["ArchiverKmsPolicy"]
        self.assertEqual((policy["Type"], policy["Condition"], policy["Properties"]["Roles"]),
                         ("AWS::IAM::Policy", "HasArchiveKmsKey",
                          [{"Ref": "ArchiverRole"}, {"Ref": "TriageActionRole"}]))
        [statement] = policy["Properties"]["PolicyDocument"]["Statement"]
        self.assertEqual((statement["Effect"], sorted(_actions(statement)), statement["Resource"]),
                         ("Allow", ["kms:Decrypt", "kms:GenerateDataKey"], {"Ref": "ArchiveKmsKeyArn"}))
        # No other grant of the stack names KMS.
        kms = [name for name, r in self.resources.items() if name != "ArchiverKmsPolicy"
               and '"kms:' in json.dumps(r)]
        self.assertEqual(kms, [])
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nARCHIVE_KMS_KEY_ARN=\n", env)
        self.assertIn('"ArchiveKmsKeyArn=$ARCHIVE_KMS_KEY_ARN"', (support.INFRA / "deploy.sh").read_text(encoding="utf-8"))

    def test_archiver_role_puts_under_the_prefix_and_touches_only_poison_and_dlq(self):
        by_sid = self.statements("ArchiverRole")
        self.assertEqual(_actions(by_sid["WriteArchiveObjects"]), ["s3:PutObject"])
        self.assertEqual(by_sid["WriteArchiveObjects"]["Resource"], {"Fn::Sub": "${ArchiveBucket.Arn}/${ArchivePrefix}/*"})
        sqs = by_sid["SweepPoisonAndDlq"]
        self.assertEqual(sorted(_actions(sqs)), ["sqs:ChangeMessageVisibility", "sqs:DeleteMessage",
                                                 "sqs:GetQueueAttributes", "sqs:ReceiveMessage"])
        self.assertEqual(sqs["Resource"], [{"Fn::GetAtt": ["PoisonQueue", "Arn"]},
                                           {"Fn::GetAtt": ["DeadLetterQueue", "Arn"]}])
        # The triage console's action (a discard archives first) puts under the prefix too; no
        # other role of the stack names S3.
        action = self.statements("TriageActionRole")["WriteArchiveObjects"]
        self.assertEqual((_actions(action), action["Resource"]),
                         (["s3:PutObject"], {"Fn::Sub": "${ArchiveBucket.Arn}/${ArchivePrefix}/*"}))
        for name, r in self.resources.items():
            if r["Type"] == "AWS::IAM::Role" and name not in ("ArchiverRole", "TriageActionRole"):
                actions = [a for p in r["Properties"].get("Policies", [])
                           for s in p["PolicyDocument"]["Statement"] for a in _actions(s)]
                self.assertFalse([a for a in actions if a.startswith("s3:")], name)

    def test_the_index_and_the_digest_write_only_books_plans_and_the_days_claim_and_publish_on_alerts(self):
        by_sid = self.statements("ArchiverRole")
        table = {"Fn::GetAtt": ["CircuitTable", "Arn"]}
        for sid, actions, keys in (("IndexTriageBooks", ["dynamodb:GetItem", "dynamodb:PutItem"],
                                    ["triage#*", "triage-plan#*"]),
                                   ("ClaimDigestDay", ["dynamodb:PutItem"], ["redrive:digest:*"]),
                                   ("ReadConsumerCauses", ["dynamodb:BatchGetItem"], ["cause#*"])):
            resource = {"Fn::GetAtt": ["IdempotencyTable", "Arn"]} if sid == "ReadConsumerCauses" else table
            self.assertEqual((sorted(_actions(by_sid[sid])), by_sid[sid]["Resource"]), (actions, resource), sid)
            self.assertEqual(by_sid[sid]["Condition"],
                             {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": keys}}, sid)
        self.assertEqual((_actions(by_sid["PublishDailyDigest"]), by_sid["PublishDailyDigest"]["Resource"]),
                         (["sns:Publish"], {"Ref": "AlertsTopic"}))
        # Every DynamoDB grant of the archiver is bounded by its items' keys (moto does not check
        # dynamodb:LeadingKeys, so this is where the restriction is held).
        for sid, statement in by_sid.items():
            if any(a.startswith("dynamodb:") for a in _actions(statement)):
                conditions = next(iter(statement["Condition"].values()))
                self.assertIn("dynamodb:LeadingKeys", conditions, sid)

    # That every call of the archiver is granted: it runs under ArchiverRole in the IAM-enforced
    # tests (functions/archiver/tests/archiver.rs, the Lambda under cargo lambda watch).

    def test_alarm_on_archive_failures_and_archiver_errors(self):
        alarm = self.resources["ArchiveFailuresAlarm"]["Properties"]
        self.assertEqual(alarm["AlarmActions"], [{"Ref": "AlertsTopic"}])
        self.assertEqual(alarm["OKActions"], [{"Ref": "RecoveryTopic"}])
        self.assertEqual((alarm["Threshold"], alarm["ComparisonOperator"]), (0, "GreaterThanThreshold"))
        metrics = {m["Id"]: m for m in alarm["Metrics"]}
        for queue_id, queue in (("poison", "PoisonQueue"), ("dlq", "DeadLetterQueue")):
            metric = metrics[queue_id]["MetricStat"]["Metric"]
            self.assertEqual((metric["Namespace"], metric["MetricName"]), ({"Ref": "MetricNamespace"}, "ArchiveFailures"))
            self.assertEqual(metric["Dimensions"], [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue, "QueueName"]}}])
        errors = metrics["errors"]["MetricStat"]["Metric"]
        self.assertEqual((errors["Namespace"], errors["MetricName"]), ("AWS/Lambda", "Errors"))
        self.assertEqual(errors["Dimensions"][0]["Value"], self.template["Outputs"]["ArchiverFunctionName"]["Value"])
        returned = [m for m in alarm["Metrics"] if m.get("ReturnData")]
        self.assertEqual(len(returned), 1)
        for ref in ("poison", "dlq", "errors"):
            self.assertIn(f"FILL({ref}, 0)", returned[0]["Expression"])

    def test_log_group_is_the_one_lambda_writes(self):
        name = self.template["Outputs"]["ArchiverFunctionName"]["Value"]["Fn::Sub"]
        self.assertEqual(self.resources["ArchiverLogGroup"]["Properties"]["LogGroupName"], {"Fn::Sub": f"/aws/lambda/{name}"})

    def test_schedule_runs_the_archiver_hourly_through_its_live_alias(self):
        r = self.wiring["Resources"]
        self.assertEqual(self.wiring["Parameters"]["ArchiveScheduleExpression"]["Default"], "rate(1 hour)")
        self.assertEqual(r["ArchiverSchedule"]["Properties"]["State"], "ENABLED")
        self.assertNotIn("Condition", r["ArchiverSchedule"])
        self.assertTrue(r["ArchiverSchedule"]["Properties"]["Targets"][0]["Arn"]["Fn::Sub"].endswith(
            ":function:${ArchiverFunctionName}:live"))
        permission = r["ScheduleInvokesArchiver"]["Properties"]
        self.assertEqual((permission["FunctionName"], permission["SourceArn"]),
                         ({"Fn::Sub": "${ArchiverFunctionName}:live"}, {"Fn::GetAtt": ["ArchiverSchedule", "Arn"]}))

    def test_settings_default_to_ten_days_and_deploy_passes_them(self):
        env = (support.INFRA / "redrive.env").read_text(encoding="utf-8")
        self.assertIn("\nARCHIVE_AFTER_DAYS=10\n", env)
        self.assertIn("\nARCHIVE_SCHEDULE_EXPRESSION=rate(1 hour)\n", env)
        # deploy.sh, and the environment writers of lib.sh it calls (write_archiver_env).
        deploy = "".join((support.INFRA / name).read_text(encoding="utf-8") for name in ("deploy.sh", "lib.sh"))
        self.assertIn('write_archiver_env "$WORK/archiver.env"', deploy)
        for line in ('"ARCHIVE_BUCKET=$OUT_ArchiveBucketName"', '"POISON_QUEUE_URL=$OUT_PoisonQueueUrl"',
                     'dlqs="DLQ_URL=${OUT_DeadLetterQueueUrl-}"', '"ARCHIVE_AFTER_DAYS=$ARCHIVE_AFTER_DAYS"',
                     '"ALERTS_TOPIC_ARN=$OUT_AlertsTopicArn"', '"TRIAGE_TABLE=$OUT_CircuitTableName"',
                     '"REMINDER_HOUR_UTC=$POISON_REMINDER_HOUR_UTC"',
                     '"ArchiverFunctionName=$OUT_ArchiverFunctionName"',
                     'deploy_function archiver "$OUT_ArchiverFunctionName" "$OUT_ArchiverRoleArn"'):
            self.assertIn(line, deploy)


if __name__ == "__main__":
    unittest.main()

"""The idempotency table snippet users paste into their own templates
(infra/snippets/idempotency-table.yaml): it parses, it is cfn-lint and Guard clean, it declares
the table and the IAM statement the shipped stack declares, and it deploys.

That the consumer's DynamoDB store really runs on a table made from it is checked from the Rust
side: functions/consumer/tests/keys.rs creates the table from this file on moto and runs the
consumer against it.
"""

from __future__ import annotations

import unittest

import support
from test_guard import guard_validate

SNIPPET = support.INFRA / "snippets" / "idempotency-table.yaml"


class IdempotencySnippet(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.snippet = support.load_template(SNIPPET)
        cls.stack = support.load_template(support.RESOURCES_TEMPLATE)

    def statement(self, statements: list, sid: str) -> dict:
        for s in statements:
            if s.get("Sid") == sid:
                return s
        raise KeyError(sid)

    def test_the_table_is_the_one_the_shipped_stack_declares(self):
        # GIVEN the two tables, WHEN compared without the stack's own table name,
        # THEN they are the same resource: key `id` (S), on-demand, TTL on `expiration`, PITR
        ours = self.stack["Resources"]["IdempotencyTable"]
        theirs = self.snippet["Resources"]["IdempotencyTable"]
        shipped_properties = {k: v for k, v in ours["Properties"].items() if k != "TableName"}
        self.assertEqual(theirs["Properties"], shipped_properties)
        self.assertEqual(
            {k: v for k, v in theirs.items() if k != "Properties"},
            {k: v for k, v in ours.items() if k != "Properties"},
        )
        properties = theirs["Properties"]
        self.assertEqual(properties["KeySchema"], [{"AttributeName": "id", "KeyType": "HASH"}])
        self.assertEqual(properties["AttributeDefinitions"], [{"AttributeName": "id", "AttributeType": "S"}])
        self.assertEqual(properties["TimeToLiveSpecification"], {"AttributeName": "expiration", "Enabled": True})
        self.assertEqual(properties["BillingMode"], "PAY_PER_REQUEST")
        self.assertEqual(properties["PointInTimeRecoverySpecification"], {"PointInTimeRecoveryEnabled": True})

    def test_the_iam_statement_is_the_consumer_roles(self):
        role = self.stack["Resources"]["ConsumerRole"]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        shipped = self.statement(role, "IdempotencyRecords")
        policy = self.snippet["Resources"]["IdempotencyTablePolicy"]["Properties"]["PolicyDocument"]["Statement"]
        ours = self.statement(policy, "IdempotencyRecords")
        self.assertEqual(ours, shipped)
        self.assertEqual(sorted(ours["Action"]), ["dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem",
                                                  "dynamodb:UpdateItem"])
        self.assertEqual(ours["Resource"], {"Fn::GetAtt": ["IdempotencyTable", "Arn"]})

    def test_the_snippet_is_cfn_lint_and_guard_clean(self):
        result = support.run([support.tool("cfn-lint"), str(SNIPPET)], env=support.script_env(None))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        failing = [rule for rule, status in guard_validate(SNIPPET).items() if status == "FAIL"]
        self.assertEqual(failing, [], f"the snippet breaks {failing}")

    def test_the_snippet_deploys_as_a_stack(self):
        # GIVEN moto's CloudFormation, WHEN the snippet is deployed as it is,
        # THEN its table has the partition key `id` (S) and its policy exists
        moto = support.Moto()
        try:
            cfn = moto.client("cloudformation")
            name = support.unique("idem")
            cfn.create_stack(
                StackName=name,
                TemplateBody=SNIPPET.read_text(encoding="utf-8"),
                Capabilities=["CAPABILITY_IAM"],
            )
            stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
            self.assertEqual(stack["StackStatus"], "CREATE_COMPLETE", stack.get("StackStatusReason"))
            outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
            table = moto.client("dynamodb").describe_table(TableName=outputs["IdempotencyTableName"])["Table"]
            self.assertEqual(table["KeySchema"], [{"AttributeName": "id", "KeyType": "HASH"}])
            self.assertEqual(table["AttributeDefinitions"], [{"AttributeName": "id", "AttributeType": "S"}])
            self.assertEqual(table["BillingModeSummary"]["BillingMode"], "PAY_PER_REQUEST")
            policy = moto.client("iam").get_policy(PolicyArn=outputs["IdempotencyTablePolicyArn"])["Policy"]
            self.assertTrue(policy["Arn"].endswith(policy["PolicyName"]))
        finally:
            moto.stop()


if __name__ == "__main__":
    unittest.main()

"""The IAM policy that infra/templates/ gives a role, rendered for a test's own resources.

One renderer for every test that runs under a role (see tests/src/iam.rs): the moto launcher
imports it to create a role's test user, and it runs alone to show what a test would get:

    .venv/bin/python tests/iam_policy.py RedriverRole '{"DeadLetterQueue": "orders-dlq"}'

ROLE is the logical id of an `AWS::IAM::Role` (its inline `Policies`) or of an
`AWS::IAM::ManagedPolicy` in infra/templates/*.yaml. RESOURCES maps a logical id or a parameter
to the test's value: a resource's physical name (queue, table or bucket name, state machine
name), a parameter's value. CloudFormation references are resolved from it: `Ref`,
`Fn::GetAtt` (`Arn`, `QueueName`, `QueueUrl`), `Fn::Sub`, `Fn::Join`, the pseudo parameters
(region us-east-1, account 123456789012: moto's). A parameter not given takes its `Default`; a
resource not given gets the name `<StackName>-<LogicalId>`, which matches nothing of the test.

What moto can check, and so what the rendered documents keep:
- SQS and S3 statements keep their resources: moto authorizes them on the queue's and the
  object's ARN, as AWS does.
- Every other statement's resources become `*` (actions kept exact): moto authorizes those
  services on the resource `*` only, so a table or alarm ARN would never match.
- Conditions are dropped: moto has no request context for their keys, and refuses a statement
  whose condition it cannot evaluate. Except `aws:ResourceTag/KEY` (attach mode grants on the
  queues carrying its install's tag): dropping it would grant every queue, so the statement's
  resources become the exact ARNs of the queues that carry the tag when the policy is rendered
  (`tagged`, e.g. read from moto with ListQueueTags), and a statement no queue matches goes. A
  queue without the tag is then denied, as AWS would deny it. Without `tagged`, such a
  statement is refused.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEMPLATES = REPO / "infra" / "templates"
sys.path.insert(0, str(REPO / "infra"))
import cfn_yaml  # noqa: E402 - infra/cfn_yaml.py

REGION = "us-east-1"
ACCOUNT = "123456789012"
PARTITION = "aws"
DEFAULT_STACK = "redrive"
# moto checks these services' calls against the named resource; the others against "*".
EXACT_RESOURCE_SERVICES = ("sqs", "s3")

_templates: list[dict] | None = None


def templates() -> list[dict]:
    """infra/templates/*.yaml in the long JSON form, read once."""
    global _templates
    if _templates is None:
        _templates = [cfn_yaml.load(p) for p in sorted(TEMPLATES.glob("*.yaml"))]
    return _templates


def find(logical_id: str) -> tuple[dict, dict]:
    """The template and the resource of `logical_id`."""
    for template in templates():
        resource = template.get("Resources", {}).get(logical_id)
        if resource is not None:
            return template, resource
    raise KeyError(f"no resource {logical_id!r} in {TEMPLATES}")


class Renderer(cfn_yaml.Intrinsics):
    def __init__(self, template: dict, values: dict[str, str]):
        self.template = template
        self.values = values
        self.stack = values.get("AWS::StackName", DEFAULT_STACK)

    def name(self, logical_id: str) -> str:
        return self.values.get(logical_id) or f"{self.stack}-{logical_id}"

    def arn(self, logical_id: str) -> str:
        kind = self.template["Resources"][logical_id]["Type"]
        name = self.name(logical_id)
        region = f"{PARTITION}:{{}}:{REGION}:{ACCOUNT}"
        return {
            "AWS::SQS::Queue": f"arn:{region.format('sqs')}:{name}",
            "AWS::DynamoDB::Table": f"arn:{region.format('dynamodb')}:table/{name}",
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{name}",
            "AWS::Logs::LogGroup": f"arn:{region.format('logs')}:log-group:{name}:*",
            "AWS::SNS::Topic": f"arn:{region.format('sns')}:{name}",
            "AWS::StepFunctions::StateMachine": f"arn:{region.format('states')}:stateMachine:{name}",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}",
            "AWS::IAM::ManagedPolicy": f"arn:{PARTITION}:iam::{ACCOUNT}:policy/{name}",
        }.get(kind, f"arn:{PARTITION}:unknown:{REGION}:{ACCOUNT}:{name}")

    def ref(self, name: str) -> str:
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": PARTITION,
            "AWS::StackName": self.stack,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        parameter = self.template.get("Parameters", {}).get(name)
        if parameter is not None:
            if name in self.values:
                return self.values[name]
            return str(parameter.get("Default", f"{self.stack}-{name}"))
        kind = self.template["Resources"][name]["Type"]
        if kind in ("AWS::DynamoDB::Table", "AWS::S3::Bucket", "AWS::IAM::Role"):
            return self.name(name)
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self.name(name)}"
        return self.arn(name)

    def get_att(self, logical_id: str, attribute: str) -> str:
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute in ("QueueName", "Name"):
            return self.name(logical_id)
        if attribute == "QueueUrl":
            return self.ref(logical_id)
        raise KeyError(f"Fn::GetAtt {logical_id}.{attribute} is not rendered")


RESOURCE_TAG = "aws:ResourceTag/"


def tag_condition(statement: dict) -> dict[str, list[str]] | None:
    """Tag key -> the values a statement's aws:ResourceTag condition allows (None without one)."""
    found: dict[str, list[str]] = {}
    for operator, keys in statement.get("Condition", {}).items():
        for key, values in keys.items():
            if key.startswith(RESOURCE_TAG):
                if operator != "StringEquals":
                    raise ValueError(f"{operator} on {key} is not rendered (StringEquals only)")
                found[key[len(RESOURCE_TAG):]] = values if isinstance(values, list) else [values]
    return found or None


def tagged_arns(condition: dict[str, list[str]], tagged: dict[str, dict[str, str]]) -> list[str]:
    """The ARNs (of `tagged`: queue ARN -> its tags) whose tags meet every key of `condition`."""
    return sorted(arn for arn, tags in tagged.items()
                  if all(tags.get(key) in values for key, values in condition.items()))


def for_moto(document: dict, tagged: dict[str, dict[str, str]] | None = None) -> dict:
    """The document as moto can check it (see the module's docstring). `tagged`: queue ARN ->
    its tags, for the statements granted by aws:ResourceTag."""
    statements = document["Statement"]
    statements = statements if isinstance(statements, list) else [statements]
    out = []
    for statement in statements:
        condition = tag_condition(statement)
        if condition is not None:
            if tagged is None:
                raise ValueError(f"statement {statement.get('Sid', '')} grants by aws:ResourceTag: "
                                 "render it with the queues' tags (tagged=...)")
            arns = tagged_arns(condition, tagged)
            if not arns:
                continue  # no queue carries the tag: nothing is granted
            statement = {**statement, "Resource": arns}
        statement = {k: v for k, v in statement.items() if k != "Condition"}
        actions = statement.get("Action", [])
        actions = [actions] if isinstance(actions, str) else actions
        exact = [a for a in actions if a.split(":")[0] in EXACT_RESOURCE_SERVICES]
        widened = [a for a in actions if a not in exact]
        if exact:
            out.append({**statement, "Action": exact})
        if widened:
            sid = statement.get("Sid")
            extra = {"Sid": f"{sid}AnyResource"} if sid and exact else {}
            out.append({**statement, **extra, "Action": widened, "Resource": "*"})
    return {"Version": document.get("Version", "2012-10-17"), "Statement": out}


def render(role: str, values: dict[str, str]) -> dict[str, dict]:
    """Policy name -> document of `role` (a role's inline policies, or a managed policy), CFN
    references resolved from `values`, as moto can check it."""
    template, resource = find(role)
    renderer = Renderer(template, values)
    properties = resource.get("Properties", {})
    if resource["Type"] == "AWS::IAM::Role":
        policies = {p["PolicyName"]: p["PolicyDocument"] for p in properties.get("Policies", [])}
    elif resource["Type"] == "AWS::IAM::ManagedPolicy":
        policies = {role: properties["PolicyDocument"]}
    else:
        raise KeyError(f"{role} is a {resource['Type']}, not a role or a managed policy")
    return {
        name: for_moto(renderer.resolve(copy.deepcopy(document)))
        for name, document in policies.items()
    }


def render_template_policies(template: dict, role: str, values: dict[str, str],
                             tagged: dict[str, dict[str, str]] | None = None) -> dict[str, dict]:
    """As `render`, for a role of a template given whole (attach mode's, which deploy renders)."""
    resource = template["Resources"][role]
    renderer = Renderer(template, values)
    properties = resource.get("Properties", {})
    if resource["Type"] == "AWS::IAM::Role":
        policies = {p["PolicyName"]: p["PolicyDocument"] for p in properties.get("Policies", [])}
    else:
        policies = {role: properties["PolicyDocument"]}
    return {name: for_moto(renderer.resolve(copy.deepcopy(document)), tagged)
            for name, document in policies.items()}


def main() -> None:
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    values = json.loads(sys.argv[2]) if len(sys.argv) == 3 else {}
    json.dump(render(sys.argv[1], values), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()

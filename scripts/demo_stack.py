"""Deploys infra/templates/resources.yaml into the demo's emulator and prints what was created.

The same template as production, with demo-sized parameters. moto's CloudFormation reports
some resources as created without creating them; this script creates those through the API with
the values the template gives them:
  - AWS::CloudWatch::Alarm  -> PutMetricAlarm (every property resolved from the template)
  - a table's TimeToLiveSpecification -> UpdateTimeToLive

Reaches the emulator through the standard AWS_ENDPOINT_URL (and AWS_REGION, credentials) that
the caller sets; nothing here names a host. Prints one JSON document on stdout:
  {"stack": ..., "region": ..., "accountId": ..., "outputs": {...},
   "alarms": [{"name": ..., "logicalId": ...}], "apiCreated": [...], "skipped": [...]}

Usage: python scripts/demo_stack.py --stack NAME [--param Key=Value ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import boto3

INFRA = Path(__file__).resolve().parents[1] / "infra"
TEMPLATE = INFRA / "templates" / "resources.yaml"

sys.path.insert(0, str(INFRA))
import cfn_yaml  # noqa: E402 - infra/cfn_yaml.py, shared with the infra tests


class Resolver(cfn_yaml.Intrinsics):
    """Resolves Ref, Fn::GetAtt, Fn::Sub and Fn::Join against a created stack."""

    def __init__(self, template: dict, stack: str, params: dict, physical: dict, region: str, account: str, sqs):
        self.template = template
        self.stack = stack
        self.params = params
        self.physical = physical
        self.region = region
        self.account = account
        self.sqs = sqs

    def param(self, name: str):
        spec = self.template.get("Parameters", {}).get(name)
        if spec is None:
            return None
        value = self.params.get(name, spec.get("Default", ""))
        if spec.get("Type") == "CommaDelimitedList":
            return [v for v in str(value).split(",") if v]
        return str(value)

    def ref(self, name: str):
        pseudo = {
            "AWS::StackName": self.stack,
            "AWS::Region": self.region,
            "AWS::AccountId": self.account,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        value = self.param(name)
        if value is not None:
            return value
        if name in self.physical:
            return self.physical[name]
        raise KeyError(f"cannot resolve Ref {name}")

    def get_att(self, resource: str, attribute: str):
        kind = self.template["Resources"][resource]["Type"]
        physical = self.physical[resource]
        if kind == "AWS::SQS::Queue":
            if attribute == "QueueName":
                return physical.rstrip("/").rsplit("/", 1)[-1]
            if attribute == "Arn":
                return self.sqs.get_queue_attributes(QueueUrl=physical, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
            if attribute == "QueueUrl":
                return physical
        if kind == "AWS::SNS::Topic" and attribute == "TopicArn":
            return physical
        raise KeyError(f"cannot resolve GetAtt {resource}.{attribute}")


# PutMetricAlarm takes the template's alarm properties under the same names.
ALARM_KEYS = (
    "AlarmName", "AlarmDescription", "ActionsEnabled", "OKActions", "AlarmActions",
    "InsufficientDataActions", "MetricName", "Namespace", "Statistic", "ExtendedStatistic",
    "Dimensions", "Period", "Unit", "EvaluationPeriods", "DatapointsToAlarm", "Threshold",
    "ComparisonOperator", "TreatMissingData", "EvaluateLowSampleCountPercentile", "Metrics",
)
NUMBERS = {"Period": int, "EvaluationPeriods": int, "DatapointsToAlarm": int, "Threshold": float}


def alarm_request(props: dict) -> dict:
    request = {k: props[k] for k in ALARM_KEYS if k in props}
    for key, kind in NUMBERS.items():
        if key in request:
            request[key] = kind(request[key])
    for metric in request.get("Metrics", []):
        stat = metric.get("MetricStat")
        if stat and "Period" in stat:
            stat["Period"] = int(stat["Period"])
    return request


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True)
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    params = dict(p.split("=", 1) for p in args.param)

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    session = boto3.session.Session(region_name=region)
    cfn = session.client("cloudformation")
    sqs = session.client("sqs")
    text = TEMPLATE.read_text(encoding="utf-8")
    template = cfn_yaml.loads(text)

    cfn.create_stack(
        StackName=args.stack,
        TemplateBody=text,
        Capabilities=["CAPABILITY_IAM"],
        Parameters=[{"ParameterKey": k, "ParameterValue": v} for k, v in params.items()],
    )
    stack = cfn.describe_stacks(StackName=args.stack)["Stacks"][0]
    if stack["StackStatus"] != "CREATE_COMPLETE":
        print(f"stack {args.stack}: {stack['StackStatus']} {stack.get('StackStatusReason', '')}", file=sys.stderr)
        return 1
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs", [])}
    physical = {
        r["LogicalResourceId"]: r.get("PhysicalResourceId")
        for r in cfn.list_stack_resources(StackName=args.stack)["StackResourceSummaries"]
    }
    account = session.client("sts").get_caller_identity()["Account"]
    resolver = Resolver(template, args.stack, params, physical, region, account, sqs)

    cloudwatch = session.client("cloudwatch")
    dynamodb = session.client("dynamodb")
    alarms, api_created, skipped = [], [], []
    for logical_id, resource in template["Resources"].items():
        kind = resource["Type"]
        if "Condition" in resource:
            skipped.append({"logicalId": logical_id, "why": f"condition {resource['Condition']}"})
            continue
        if kind == "AWS::CloudWatch::Alarm":
            request = alarm_request(resolver.resolve(resource["Properties"]))
            cloudwatch.put_metric_alarm(**request)
            alarms.append({"name": request["AlarmName"], "logicalId": logical_id})
            api_created.append(f"{logical_id}: PutMetricAlarm")
        elif kind == "AWS::DynamoDB::Table" and "TimeToLiveSpecification" in resource["Properties"]:
            ttl = resolver.resolve(resource["Properties"]["TimeToLiveSpecification"])
            dynamodb.update_time_to_live(
                TableName=physical[logical_id],
                TimeToLiveSpecification={
                    "Enabled": str(ttl["Enabled"]).lower() == "true",
                    "AttributeName": ttl["AttributeName"],
                },
            )
            api_created.append(f"{logical_id}: UpdateTimeToLive")

    # The alarms really exist now: read them back rather than trust the calls.
    names = [a["name"] for a in alarms]
    existing = {a["AlarmName"] for a in cloudwatch.describe_alarms(AlarmNames=names)["MetricAlarms"]} if names else set()
    missing = sorted(set(names) - existing)
    if missing:
        print(f"alarms not created: {missing}", file=sys.stderr)
        return 1

    json.dump(
        {
            "stack": args.stack,
            "region": region,
            "accountId": account,
            "outputs": outputs,
            "alarms": alarms,
            "apiCreated": api_created,
            "skipped": skipped,
        },
        sys.stdout,
        indent=1,
    )
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

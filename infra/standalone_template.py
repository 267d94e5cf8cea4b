"""One self-contained CloudFormation template of attach mode, functions included: for the console's
Create stack, a StackSet, Terraform's `aws_cloudformation_stack` or CDK's `CfnInclude`.

`python infra/standalone_template.py OUT_JSON [--version VERSION] [--expanded]`

VERSION: the release the template ships in (default: the workspace's version), the default of its
parameter Version. --expanded writes the policy documents as documents, for cfn-guard (see `expanded`).

Made from the sources make deploy uses, so that it never drifts from them:
- infra/templates/resources.yaml through attach_template.build with no DLQ listed: the poison
  queue, circuit table, topics, archive bucket, log groups, roles (their grants on the protected
  queues conditioned on the tag `redrive-install:NAME` = `dlq`, `dlq+source` or `source`, the
  tags make deploy puts on them, NAME the parameter InstallName, default `redrive`, where make
  deploy's is the stack's name: a StackSet names its stacks differently in every account), the
  fleet's Metrics Insights alarms, the dashboard;
- the four functions of attach mode (re-driver, archiver, the triage console's widget and action)
  as AWS::Lambda::Function resources, their code the release's zips
  (s3://CodeBucket/CodeKeyPrefix + redrive-VERSION-FUNCTION-ARCH.zip, scripts/dist.sh's names),
  each with the environment make deploy gives it in attach mode (infra/lib.sh, write_*_env),
  except that the fleet is found by tag (DLQ_TAG_KEY) instead of a listed DLQ_LIST_TABLE item;
- infra/templates/wiring.yaml's re-driver and archiver wiring (trigger topic subscription, the
  schedules and their permissions), pointing at the functions themselves: no `live` alias.

A template that serves any account names no DLQ: the user tags each queue to protect. Hence no
per-DLQ trigger or age alarm either (they need the list): the re-driver drains the whole fleet on
its schedule (ScheduleExpression, every minute by default); the trigger topic still invokes it
(manual drains). The roles read every queue's tags of the account and region (ListQueueTags,
no tag condition: the tags say which queues are ours) and list the queues.

IAM condition keys cannot hold an intrinsic function, and the tag's key holds the stack's name:
each role's tag-conditioned statements are a second inline policy, `protected-queues`, whose
document is one Fn::Sub string (the rest of its grants stay a document the Guard rules read), and
a managed policy that grants by tag (the operator's, the triage console's users') is one Fn::Sub
string whole. `expanded` parses them back for cfn-guard. No account id, region or partition is
written in the template: every ARN is built from the pseudo parameters.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import attach_template  # noqa: E402
import cfn_yaml  # noqa: E402
import quotas  # noqa: E402

RESOURCES_YAML = HERE / "templates" / "resources.yaml"
WIRING_YAML = HERE / "templates" / "wiring.yaml"
# The install's name in the tag that marks its queues (`redrive-install:NAME`): a parameter, not
# the stack's name, which a StackSet makes different in every account (StackSet-NAME-UUID).
INSTALL = "${InstallName}"
TAG_KEY = attach_template.tag_key(INSTALL)
PROTECTED_POLICY = "protected-queues"

# The functions of attach mode: logical id -> (binary, role, log group, the resources template's
# output naming it, memory parameter, timeout parameter).
FUNCTIONS = {
    "RedriverFunction": ("redriver", "RedriverRole", "RedriverLogGroup", "RedriverFunctionName",
                         "RedriverMemoryMb", "RedriverTimeoutSeconds"),
    "ArchiverFunction": ("archiver", "ArchiverRole", "ArchiverLogGroup", "ArchiverFunctionName",
                         "ArchiverMemoryMb", "ArchiverTimeoutSeconds"),
    "TriageWidgetFunction": ("triage-widget", "TriageWidgetRole", "TriageWidgetLogGroup", "TriageWidgetFunctionName",
                             "TriageConsoleMemoryMb", "TriageConsoleTimeoutSeconds"),
    "TriageActionFunction": ("triage-action", "TriageActionRole", "TriageActionLogGroup", "TriageActionFunctionName",
                             "TriageConsoleMemoryMb", "TriageConsoleTimeoutSeconds"),
}
# The roles of the functions that read the fleet at init: they find it by tag.
FLEET_READERS = ("RedriverRole", "ArchiverRole", "TriageWidgetRole", "TriageActionRole")


def _number(default: int, low: int, high: int, description: str) -> dict:
    return {"Type": "Number", "Default": default, "MinValue": low, "MaxValue": high, "Description": description}


def _choice(default: str, values: list[str], description: str) -> dict:
    return {"Type": "String", "Default": default, "AllowedValues": values, "Description": description}


def settings(env: dict[str, str]) -> dict:
    """The parameters of the functions' settings, their defaults infra/redrive.env's."""
    return {
        "RedriverMemoryMb": _number(int(env["REDRIVER_MEMORY_MB"]), 128, 10240, "REDRIVER_MEMORY_MB"),
        "RedriverTimeoutSeconds": _number(int(env["REDRIVER_TIMEOUT_SECONDS"]), 1, 900, "REDRIVER_TIMEOUT_SECONDS"),
        "RedriverReservedConcurrency": {
            "Type": "String", "Default": env["REDRIVER_RESERVED_CONCURRENCY"], "AllowedPattern": "^(none|[0-9]+)$",
            "Description": "REDRIVER_RESERVED_CONCURRENCY: 1, so that schedule and manual runs never drain at "
                           "once; none: no reservation (an account whose unreserved concurrency cannot spare it)."},
        "MaxRedriveAttempts": _number(int(env["MAX_REDRIVE_ATTEMPTS"]), 1, 1000, "MAX_REDRIVE_ATTEMPTS"),
        "BackoffBaseSeconds": {"Type": "String", "Default": env["BACKOFF_BASE_SECONDS"],
                               "Description": "BACKOFF_BASE_SECONDS (the re-driver checks it at init)"},
        "BackoffMultiplier": {"Type": "String", "Default": env["BACKOFF_MULTIPLIER"],
                              "Description": "BACKOFF_MULTIPLIER (the re-driver checks it at init)"},
        "BackoffMaxSeconds": {"Type": "String", "Default": env["BACKOFF_MAX_SECONDS"],
                              "Description": "BACKOFF_MAX_SECONDS (the re-driver checks it at init)"},
        "BackoffJitter": _choice(env["BACKOFF_JITTER"], ["full", "equal", "none"], "BACKOFF_JITTER"),
        "MaxMessagesPerInvocation": _number(int(env["MAX_MESSAGES_PER_INVOCATION"]), 1, 1000000,
                                            "MAX_MESSAGES_PER_INVOCATION"),
        "MaxMessagesPerSecond": {"Type": "String", "Default": env["MAX_MESSAGES_PER_SECOND"],
                                 "Description": "MAX_MESSAGES_PER_SECOND (0: no cap)"},
        "GuardAlarmNames": {"Type": "String", "Default": "",
                            "Description": "GUARD_ALARM_NAMES: comma separated alarm names; any in ALARM (or "
                                           "missing) stops the re-driver. Empty: no guard."},
        "DryRun": _choice(env["DRY_RUN"], ["true", "false"], "DRY_RUN"),
        "RustLog": {"Type": "String", "Default": env["RUST_LOG"], "Description": "RUST_LOG of every function"},
        "ArchiveAfterDays": {"Type": "String", "Default": env["ARCHIVE_AFTER_DAYS"],
                             "Description": "ARCHIVE_AFTER_DAYS (below 13). Set ArchiveAgeAlarmSeconds to this "
                                            "plus one day, in seconds (make deploy computes it)."},
        "ArchiverMemoryMb": _number(int(env["ARCHIVER_MEMORY_MB"]), 128, 10240, "ARCHIVER_MEMORY_MB"),
        "ArchiverTimeoutSeconds": _number(int(env["ARCHIVER_TIMEOUT_SECONDS"]), 1, 900, "ARCHIVER_TIMEOUT_SECONDS"),
        "TriageConsoleMemoryMb": _number(int(env["TRIAGE_CONSOLE_MEMORY_MB"]), 128, 10240, "TRIAGE_CONSOLE_MEMORY_MB"),
        "TriageConsoleTimeoutSeconds": _number(int(env["TRIAGE_CONSOLE_TIMEOUT_SECONDS"]), 1, 900,
                                               "TRIAGE_CONSOLE_TIMEOUT_SECONDS"),
        "TriageShowBodies": _choice(env["TRIAGE_SHOW_BODIES"], ["true", "false"], "TRIAGE_SHOW_BODIES"),
    }


def redrive_env() -> dict[str, str]:
    """infra/redrive.env's settings (the parameters' defaults)."""
    return quotas.read_env_file(HERE / "redrive.env")


def code_parameters(version: str) -> dict:
    return {
        "InstallName": {"Type": "String", "Default": "redrive", "AllowedPattern": "^[A-Za-z0-9_.:/=+@-]{1,112}$",
                        "Description": "The install's name in the tag that marks its queues: redrive-install:NAME = "
                                       "dlq, dlq+source or source. The same in every account of a StackSet; two "
                                       "installs in one account and region need two names."},
        "CodeBucket": {"Type": "String", "AllowedPattern": "^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$",
                       "Description": "The S3 bucket holding the release's function zips (in this stack's region)."},
        "CodeKeyPrefix": {"Type": "String", "Default": "", "AllowedPattern": "^[A-Za-z0-9!_.*'()/-]*$",
                          "Description": "The zips' key prefix in CodeBucket, e.g. releases/0.1.0/ (with its slash)."},
        "Version": {"Type": "String", "Default": version, "AllowedPattern": "^[0-9A-Za-z.+-]+$",
                    "Description": "The release's version: the zips are CodeKeyPrefix + redrive-VERSION-FUNCTION-ARCH.zip."},
        "Architecture": _choice("arm64", ["arm64", "x86_64"], "The functions' architecture (the zips' ARCH)."),
    }


def wiring_parameters(env: dict[str, str]) -> dict:
    return {
        "ScheduleExpression": {
            "Type": "String", "Default": "rate(1 minute)", "AllowedPattern": "^(rate|cron)\\(.+\\)$",
            "Description": "How often the re-driver drains every protected DLQ: with no per-DLQ alarm in this "
                           "template, the schedule is what triggers drains (a drain waits one period at most)."},
        "ArchiveScheduleExpression": {
            "Type": "String", "Default": env["ARCHIVE_SCHEDULE_EXPRESSION"], "AllowedPattern": "^(rate|cron)\\(.+\\)$",
            "Description": "How often the archiver sweeps the poison queue and the protected DLQs."},
    }


def environments(outputs: dict) -> dict[str, dict]:
    """Each function's environment as make deploy writes it in attach mode (infra/lib.sh:
    write_redriver_env, write_archiver_env, write_triage_console_env), its values the stack's
    own resources (the resources template's outputs deploy reads) and the settings' parameters.
    The fleet: DLQ_TAG_KEY instead of DLQ_LIST_TABLE. No TRIGGER_ALARM_NAME: no per-DLQ alarm
    to re-arm. The action function is named without an alias (the template creates none)."""
    out = {k: v["Value"] for k, v in outputs.items()}
    tag = {"Fn::Sub": TAG_KEY}
    redriver = {
        "DLQ_TAG_KEY": tag,
        "POISON_QUEUE_URL": out["PoisonQueueUrl"],
        "MAX_REDRIVE_ATTEMPTS": {"Ref": "MaxRedriveAttempts"},
        "BACKOFF_BASE_SECONDS": {"Ref": "BackoffBaseSeconds"},
        "BACKOFF_MULTIPLIER": {"Ref": "BackoffMultiplier"},
        "BACKOFF_MAX_SECONDS": {"Ref": "BackoffMaxSeconds"},
        "BACKOFF_JITTER": {"Ref": "BackoffJitter"},
        "MAX_MESSAGES_PER_INVOCATION": {"Ref": "MaxMessagesPerInvocation"},
        "MAX_MESSAGES_PER_SECOND": {"Ref": "MaxMessagesPerSecond"},
        "GUARD_ALARM_NAMES": {"Ref": "GuardAlarmNames"},
        "METRIC_NAMESPACE": out["MetricNamespace"],
        "DRY_RUN": {"Ref": "DryRun"},
        "RUST_LOG": {"Ref": "RustLog"},
        "CIRCUIT_TABLE": out["CircuitTableName"],
    }
    archiver = {
        "ARCHIVE_BUCKET": out["ArchiveBucketName"],
        "ARCHIVE_PREFIX": out["ArchivePrefix"],
        "POISON_QUEUE_URL": out["PoisonQueueUrl"],
        "DLQ_TAG_KEY": tag,
        "ARCHIVE_DLQ": {"Ref": "ArchiveDlq"},
        "ARCHIVE_AFTER_DAYS": {"Ref": "ArchiveAfterDays"},
        "METRIC_NAMESPACE": out["MetricNamespace"],
        "ALERTS_TOPIC_ARN": out["AlertsTopicArn"],
        "TRIAGE_TABLE": out["CircuitTableName"],
        "REMINDER_HOUR_UTC": {"Ref": "PoisonReminderHourUtc"},
        "RUST_LOG": {"Ref": "RustLog"},
    }
    action_name = out["TriageActionFunctionName"]["Fn::Sub"]
    console = {
        "TRIAGE_TABLE": out["CircuitTableName"],
        "TRIAGE_QUEUE_URLS": out["PoisonQueueUrl"],
        "DLQ_TAG_KEY": tag,
        "TRIAGE_ACTION_FUNCTION": {"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:"
                                              + action_name},
        "TRIAGE_SHOW_BODIES": {"Ref": "TriageShowBodies"},
        "ARCHIVE_BUCKET": out["ArchiveBucketName"],
        "ARCHIVE_PREFIX": out["ArchivePrefix"],
        "POISON_QUEUE_URL": out["PoisonQueueUrl"],
        "RUST_LOG": {"Ref": "RustLog"},
    }
    return {"RedriverFunction": redriver, "ArchiverFunction": archiver,
            "TriageWidgetFunction": console, "TriageActionFunction": console}


def function(logical: str, outputs: dict, variables: dict) -> dict:
    binary, role, log_group, name_output, memory, timeout = FUNCTIONS[logical]
    properties = {
        "FunctionName": outputs[name_output]["Value"],
        "Description": f"redrive {binary} (attach mode, standalone template)",
        "Code": {"S3Bucket": {"Ref": "CodeBucket"},
                 "S3Key": {"Fn::Sub": "${CodeKeyPrefix}redrive-${Version}-" + binary + "-${Architecture}.zip"}},
        "Runtime": "provided.al2023",
        "Handler": "bootstrap",
        "Architectures": [{"Ref": "Architecture"}],
        "Role": {"Fn::GetAtt": [role, "Arn"]},
        "MemorySize": {"Ref": memory},
        "Timeout": {"Ref": timeout},
        "Environment": {"Variables": copy.deepcopy(variables)},
        "TracingConfig": {"Mode": {"Ref": "Tracing"}},
        # As make deploy sets it (publish_live): the metric filters read the JSON fields.
        "LoggingConfig": {"LogFormat": "JSON", "LogGroup": {"Ref": log_group}},
        "Tags": [{"Key": "project", "Value": "redrive"}, {"Key": "redrive:stack", "Value": {"Ref": "AWS::StackName"}}],
    }
    if logical == "RedriverFunction":
        properties["ReservedConcurrentExecutions"] = {
            "Fn::If": ["ReserveRedriverConcurrency", {"Ref": "RedriverReservedConcurrency"}, {"Ref": "AWS::NoValue"}]}
    # LoggingConfig names the log group: it is created first, with its retention.
    return {"Type": "AWS::Lambda::Function", "Properties": properties}


def _function_of(text: str) -> str | None:
    """The logical id of the function a wiring.yaml parameter names (RedriverFunctionName...)."""
    return {"RedriverFunctionName": "RedriverFunction", "ArchiverFunctionName": "ArchiverFunction"}.get(text)


_ALIAS_NAME = re.compile(r"^\$\{(\w+)\}:live$")
_ALIAS_ARN = re.compile(r"^arn:\$\{AWS::Partition\}:lambda:\$\{AWS::Region\}:\$\{AWS::AccountId\}:function:\$\{(\w+)\}:live$")


def _rewire(node):
    """A wiring.yaml node pointing at the functions of this template instead of their aliases
    (names from parameters), and at the topic of this template instead of its ARN parameter."""
    if isinstance(node, list):
        return [_rewire(i) for i in node]
    if not isinstance(node, dict):
        return node
    if list(node) == ["Fn::Sub"] and isinstance(node["Fn::Sub"], str):
        for pattern, attribute in ((_ALIAS_NAME, None), (_ALIAS_ARN, "Arn")):
            match = pattern.match(node["Fn::Sub"])
            if match and _function_of(match.group(1)):
                logical = _function_of(match.group(1))
                return {"Fn::GetAtt": [logical, attribute]} if attribute else {"Ref": logical}
    if node == {"Ref": "TriggerTopicArn"}:
        return {"Ref": "TriggerTopic"}
    return {k: _rewire(v) for k, v in node.items()}


WIRING = ("TriggerTopicInvokesRedriver", "RedriverSubscription", "RedriverSchedule", "ScheduleInvokesRedriver",
          "ArchiverSchedule", "ScheduleInvokesArchiver")


def wiring(wiring_yaml: Path) -> dict:
    """wiring.yaml's re-driver and archiver resources, on the functions of this template; always
    on (the schedule is the fleet's trigger here)."""
    source = cfn_yaml.load(wiring_yaml)["Resources"]
    out = {}
    for logical in WIRING:
        resource = {k: v for k, v in source[logical].items() if k != "Condition"}
        out[logical] = _rewire(resource)
    return out


def as_sub(node, variables: dict) -> object:
    """A JSON node with its intrinsic functions written as Fn::Sub variables: Ref X as ${X},
    GetAtt X.A as ${X.A}, a Sub's text as it is (its own variables added to `variables`)."""
    if isinstance(node, list):
        return [as_sub(i, variables) for i in node]
    if not isinstance(node, dict):
        return node
    if list(node) == ["Ref"]:
        return "${" + node["Ref"] + "}"
    if list(node) == ["Fn::GetAtt"]:
        value = node["Fn::GetAtt"]
        return "${" + ".".join(value if isinstance(value, list) else [value]) + "}"
    if list(node) == ["Fn::Sub"]:
        value = node["Fn::Sub"]
        if isinstance(value, str):
            return value
        for name, inner in value[1].items():
            if name in variables and variables[name] != inner:
                raise SystemExit(f"standalone_template.py: two Fn::Sub variables named {name}")
            variables[name] = inner
        return value[0]
    if any(k.startswith("Fn::") for k in node):
        raise SystemExit(f"standalone_template.py: cannot write {node} into a policy's Fn::Sub text")
    return {k: as_sub(v, variables) for k, v in node.items()}


def sub_document(statements: list[dict]) -> dict:
    """A policy document as one Fn::Sub string (an IAM condition key holds no intrinsic function,
    and the tag key holds the stack's name)."""
    variables: dict = {}
    text = json.dumps({"Version": "2012-10-17", "Statement": as_sub(statements, variables)}, separators=(",", ":"))
    return {"Fn::Sub": [text, variables] if variables else text}


def _protected_policy(statements: list[dict]) -> dict:
    return {"PolicyName": PROTECTED_POLICY, "PolicyDocument": sub_document(statements)}


def _names_tag(statement: dict) -> bool:
    return TAG_KEY in json.dumps(statement.get("Condition", {}))


def split_tag_statements(resources: dict) -> None:
    """Moves every role's tag-conditioned statements (attach_template's, with the tag key
    TAG_KEY) into its inline policy PROTECTED_POLICY; adds, for the roles of the functions that
    read the fleet, the listing of the queues and the reading of every queue's tags."""
    for logical, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::IAM::Role":
            policies = props.get("Policies", [])
            moved = []
            for policy in policies:
                statements = policy["PolicyDocument"]["Statement"]
                moved += [s for s in statements if _names_tag(s)]
                policy["PolicyDocument"]["Statement"] = [s for s in statements if not _names_tag(s)]
            if logical in FLEET_READERS:
                policies[0]["PolicyDocument"]["Statement"] += [
                    {"Sid": "FindFleet", "Effect": "Allow", "Action": "sqs:ListQueues", "Resource": "*"},
                    {"Sid": "ReadQueueTags", "Effect": "Allow", "Action": "sqs:ListQueueTags",
                     "Resource": attach_template.ANY_QUEUE},
                ]
            if moved:
                policies.append(_protected_policy(moved))
        elif "PolicyDocument" in props and resource["Type"].startswith("AWS::IAM::"):
            # A managed or attached policy (the operator's, the triage console's users'): its
            # whole document one Fn::Sub string when it grants by tag.
            statements = props["PolicyDocument"]["Statement"]
            if any(_names_tag(s) for s in statements):
                props["PolicyDocument"] = sub_document(statements)


def without_alias(node):
    """The dashboard's custom widgets call the triage widget function itself (no alias here)."""
    if isinstance(node, list):
        return [without_alias(i) for i in node]
    if isinstance(node, dict):
        return {k: without_alias(v) for k, v in node.items()}
    if isinstance(node, str):
        return node.replace("${AWS::StackName}-triage-widget:live", "${AWS::StackName}-triage-widget")
    return node


def build(version: str, resources_yaml: Path = RESOURCES_YAML, wiring_yaml: Path = WIRING_YAML) -> dict:
    source = cfn_yaml.load(resources_yaml)
    declared = copy.deepcopy(source["Parameters"])
    template = attach_template.build(source, [], stack=INSTALL, sources=True)
    resources = template["Resources"]
    outputs = template["Outputs"]
    # Attach mode's record of the queues deploy tagged and of its nested stacks: none here.
    template.pop("Metadata", None)
    for key in ("ProtectedDlqCount", "Orchestrator", "ConsumerTimeoutSeconds"):
        outputs.pop(key, None)
    # The list item DLQ_LIST_TABLE names: not read (DLQ_TAG_KEY).
    for resource in resources.values():
        for policy in resource.get("Properties", {}).get("Policies", []) if resource["Type"] == "AWS::IAM::Role" else []:
            document = policy["PolicyDocument"]
            document["Statement"] = [s for s in document["Statement"] if s.get("Sid") != "ReadProtectedDlqList"]
    split_tag_statements(resources)
    for key in ("Dashboard",):
        resources[key] = without_alias(resources[key])
    env = redrive_env()
    template["Parameters"].update(code_parameters(version))
    template["Parameters"].update(settings(env))
    template["Parameters"].update(wiring_parameters(env))
    template.setdefault("Conditions", {})["ReserveRedriverConcurrency"] = {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "RedriverReservedConcurrency"}, "none"]}]}
    variables = environments(outputs)
    for logical in FUNCTIONS:
        resources[logical] = function(logical, outputs, variables[logical])
    resources.update(wiring(wiring_yaml))
    for key in ("TriageWidgetFunctionName", "TriageActionFunctionName"):
        outputs[key]["Description"] = outputs[key]["Description"].replace("its alias live", "it")
    template["Description"] = (
        "redrive, attach mode, one stack: the re-driver, archiver and triage console functions (code from "
        "CodeBucket), poison queue, circuit table, topics, archive, fleet alarms and roles. Protects every queue "
        "of this region tagged redrive-install:INSTALL_NAME = dlq or dlq+source (its sources: source). "
        "infra/standalone_template.py; infra/README.md, 'One template'.")
    # resources.yaml's parameters the functions name (attach mode dropped those only its
    # managed-mode resources used, e.g. ArchiveDlq).
    for name in sorted(set(attach_template.references(template["Resources"])) - set(template["Parameters"])):
        if name in declared:
            template["Parameters"][name] = declared[name]
    attach_template.drop_unused(template)
    attach_template.check_references(template)
    return template


def expanded(template: dict) -> dict:
    """The template with each policy document written as Fn::Sub text (`sub_document`) as a
    document again, every string of it that names a variable an Fn::Sub of its own: what
    CloudFormation gives IAM, in the form the Guard rules read (make lint-infra and the tests
    check both)."""
    out = copy.deepcopy(template)

    def parse(value):
        text, variables = (value, {}) if isinstance(value, str) else value

        def wrap(node):
            if isinstance(node, list):
                return [wrap(i) for i in node]
            if isinstance(node, dict):
                return {k: wrap(v) for k, v in node.items()}
            if isinstance(node, str) and "${" in node:
                used = {k: v for k, v in variables.items() if "${" + k + "}" in node}
                return {"Fn::Sub": [node, used] if used else node}
            return node

        return wrap(json.loads(text))

    for resource in out["Resources"].values():
        props = resource.get("Properties", {})
        documents = [p for p in props.get("Policies", [])] if resource["Type"] == "AWS::IAM::Role" else []
        if "PolicyDocument" in props and resource["Type"].startswith("AWS::IAM::"):
            documents.append(props)
        for holder in documents:
            document = holder["PolicyDocument"]
            if isinstance(document, dict) and list(document) == ["Fn::Sub"]:
                holder["PolicyDocument"] = parse(document["Fn::Sub"])
    return out


def workspace_version() -> str:
    """The workspace's version (every crate's: version.workspace = true)."""
    cargo = (HERE.parent / "Cargo.toml").read_text(encoding="utf-8")
    return re.search(r'^version\s*=\s*"([^"]+)"', cargo, re.MULTILINE).group(1)


def main(argv: list[str]) -> int:
    version = None
    # --expanded: the policy documents as documents (for cfn-guard), not a template to deploy.
    expand = "--expanded" in argv
    argv = [a for a in argv if a != "--expanded"]
    if "--version" in argv:
        at = argv.index("--version")
        version = argv[at + 1]
        argv = argv[:at] + argv[at + 2:]
    if len(argv) != 1:
        print("usage: standalone_template.py OUT_JSON [--version VERSION] [--expanded]", file=sys.stderr)
        return 2
    template = build(version or workspace_version())
    if expand:
        template = expanded(template)
    Path(argv[0]).write_bytes(cfn_yaml.compact(template).encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

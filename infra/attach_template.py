"""The resources template of attach mode (PROTECT_DLQS / PROTECT_TAG), made from
infra/templates/resources.yaml and the DLQs deploy.sh resolved.

`python infra/attach_template.py RESOURCES_YAML DLQS_TSV OUT_JSON [PARAMS_JSON] --stack STACK_NAME
    [--children DIR] [--child-url-prefix URL] [--previous PREVIOUS_TEMPLATE_JSON]`

DLQS_TSV holds one protected DLQ a line: `NAME<TAB>ARN<TAB>SOURCE_ARNS<TAB>KEY_ARN<TAB>SOURCE_KEY_ARNS`
(SOURCE_ARNS comma separated, empty for a DLQ that no queue names in its RedrivePolicy; KEY_ARN
the customer managed KMS key of the DLQ, SOURCE_KEY_ARNS its sources', both empty without one). The result is the managed
template without the user's queues and what hangs on them:

- removed: the source queue and the DLQ we would create, the shipped consumer (role, log group,
  idempotency table, alarms), and every alarm and dashboard that names our DLQ or source;
- where the managed template's roles name our DLQ, they grant the same actions on the queues of
  the account and region tagged `redrive-install:STACK_NAME` = `dlq` (or `dlq+source`); where
  they name our source queue, on those tagged `source` (or `dlq+source`): no policy grows with
  the fleet. deploy.sh tags exactly the protected DLQs and their sources (the template's
  Metadata lists them, `tagged_queues` reads them; infra/attach_queues.py tags) and untags those no longer protected;
  make destroy untags them all. SetAlarmState names the per-DLQ trigger alarms by one pattern;
  customer managed KMS keys stay listed (the distinct keys, usually few);
- added per protected DLQ: its trigger alarm (depth > 0, to the trigger topic; the re-driver
  drains the DLQ the alarm's QueueName dimension names), its two age alarms (first stage and
  last call, to the alerts topic) and its count-based daily reminder (visible or in flight at
  the reminder hour), all named STACK-<kind>-<queue name>. They live in nested stacks
  (`AlarmStackNNN`, AWS::CloudFormation::Stack resources, each the alarms of at most
  DLQS_PER_ALARM_STACK DLQs, its template in DIR under its content's digest and named in the
  parent by URL_PREFIX + that key), so that CloudFormation's 500 resources per stack bind
  neither the parent nor any of them. Every DLQ stays in the nested stack the previous
  template's Metadata (RedriveAlarmStacks) put it in; a new one fills the first with room;
- the triage console's roles read (the widget) or change (the action function) the books of
  this account and region's queues, not of our DLQ and poison queue only, and read the
  protected DLQs' list item;
- the fleet's failure signals in our namespace (redrive failures, DLQ unreadable, unplaceable
  messages, circuit open, archive failures) as one Metrics Insights alarm each over every
  QueueName, and one dashboard for the fleet (with a triage widget per DLQ and the poison queue;
  past CloudWatch's 500 widgets per dashboard, the other triage widgets on STACK-triage-2...).

ARNs are written into the template, not passed as parameters: a parameter value holds at most
4,096 bytes, some 40 ARNs. The template goes through S3 above 51,200 bytes (deploy_stack).
Every reference the template keeps is checked: a resource of resources.yaml that names a
removed one fails here, before anything is deployed.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cfn_yaml  # noqa: E402

# The managed template's resources that attach mode does not create.
MANAGED_ONLY = {
    "SourceQueue", "DeadLetterQueue", "IdempotencyTable", "ConsumerLogGroup", "ConsumerRole",
    "DlqNotEmptyAlarm", "DlqOldestMessageAgeAlarm", "DlqFinalAgeAlarm", "SourceOldestMessageAgeAlarm",
    "DlqNotEmptyDailyAlarm", "DlqArchiverAgeAlarm", "RedriveFailuresAlarm", "DlqReceiveFailuresAlarm",
    "UnplaceableMessagesAlarm", "ConsumerErrorsAlarm", "ConsumerThrottlesAlarm", "CircuitOpenAlarm",
    "CircuitHeldOpenAlarm", "ArchiveFailuresAlarm", "Dashboard",
}
MANAGED_ONLY_OUTPUTS = {
    "SourceQueueUrl", "SourceQueueArn", "DeadLetterQueueUrl", "DeadLetterQueueName",
    "IdempotencyTableName", "ConsumerRoleArn", "ConsumerFunctionName", "TriggerAlarmName",
    "DefaultGuardAlarmNames", "WorkflowTriggerAlarmName",
}
# At most this many resources per template (CloudFormation quota).
TEMPLATE_RESOURCE_LIMIT = 500
PER_DLQ_RESOURCES = 4
# The per-DLQ alarms live in nested stacks (AWS::CloudFormation::Stack resources of the
# resources stack, `AlarmStackNNN`), each holding the alarms of at most this many DLQs: 400
# resources of CloudFormation's 500 per stack, and some 450 KB of the 1 MB a template may have
# through S3 at 80-character queue names (infra/quotas.py checks both).
DLQS_PER_ALARM_STACK = 100
ALARM_STACK_PREFIX = "AlarmStack"
# The parent template's Metadata: which DLQ's alarms each nested stack holds, read back by the
# next deploy so that every DLQ keeps its stack (adding or removing one touches no other's alarms).
ASSIGNMENT_KEY = "RedriveAlarmStacks"
# Where the nested templates are when deploy does not say (quota checks, tests): the longest
# URL the template bucket gets (infra/lib.sh template_bucket).
DEFAULT_CHILD_URL_PREFIX = ("https://redrive-templates-123456789012-ap-southeast-14.s3.ap-southeast-14.amazonaws.com/"
                            + "S" * 40 + "/alarms/")
# What a nested stack's alarms name in the parent, passed as its parameters: the parent's topics
# (a topic's Ref is its ARN) under these names, and the install's name for the alarms' names
# (`${AWS::StackName}` in a nested stack is the nested stack's own name).
CHILD_REF_PARAMETERS = {"TriggerTopic": "TriggerTopicArn", "AlertsTopic": "AlertsTopicArn",
                        "RecoveryTopic": "RecoveryTopicArn"}
INSTALL_NAME_PARAMETER = "InstallName"


def read_dlqs(path: Path) -> list[dict]:
    dlqs = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        name, arn, sources, key, source_keys = (line.split("\t") + ["", "", "", ""])[:5]
        dlqs.append({"name": name, "arn": arn, "sources": [s for s in sources.split(",") if s],
                     "key": key, "source_keys": [k for k in source_keys.split(",") if k]})
    if not dlqs:
        raise SystemExit("attach_template.py: no DLQ to protect")
    return dlqs


def logical_id(name: str, kind: str) -> str:
    """A stable logical id per queue name (the name's letters and digits, plus a hash, so that
    `orders-dlq` and `orders_dlq` differ): adding or removing a DLQ leaves the others' alarms
    in place."""
    letters = re.sub(r"[^A-Za-z0-9]", "", name)[:60]
    digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:8]
    return f"Dlq{letters}{digest}{kind}"


def alarm_name(kind: str, queue: str) -> dict:
    """STACK-kind-queue, STACK the install's name (the parent stack's; a nested stack gets it as
    its parameter InstallName, see `child_template`)."""
    return {"Fn::Sub": ["${AWS::StackName}-" + kind + "-${Queue}", {"Queue": queue}]}


def alarm_arn(kind: str, queue: str) -> dict:
    return {"Fn::Sub": [
        "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:${AWS::StackName}-" + kind + "-${Queue}",
        {"Queue": queue},
    ]}


# ---------------------------------------------------------------- roles
def _is_getatt(node, logical: str) -> bool:
    return isinstance(node, dict) and node.get("Fn::GetAtt") == [logical, "Arn"]


# Attach mode grants on the protected queues by tag, not by ARN, so that no policy grows with
# the fleet: deploy tags each protected DLQ and each of its sources with this install's key
# (redrive-install:STACK_NAME; outside the redrive: prefix, whose tags configure a DLQ), and the
# roles grant on any queue of the account and region that carries it. IAM evaluates
# aws:ResourceTag for SQS's queue resource operations in identity policies (SQS Developer Guide,
# "ABAC condition keys for Amazon SQS"); ListQueues has no resource and is never tag-conditioned.
TAG_KEY_PREFIX = "redrive-install:"
DLQ = "dlq"
SOURCE = "source"
DLQ_AND_SOURCE = "dlq+source"  # a protected DLQ that is also a protected DLQ's source
DLQ_VALUES = [DLQ, DLQ_AND_SOURCE]
SOURCE_VALUES = [SOURCE, DLQ_AND_SOURCE]
# The actions of the queue resource type (Service Authorization Reference, Amazon SQS), the
# operations aws:ResourceTag applies to. CreateQueue is left out: a queue not created yet has no tag.
QUEUE_RESOURCE_ACTIONS = frozenset("sqs:" + a for a in (
    "AddPermission", "CancelMessageMoveTask", "ChangeMessageVisibility", "DeleteMessage", "DeleteQueue",
    "GetQueueAttributes", "GetQueueUrl", "ListDeadLetterSourceQueues", "ListMessageMoveTasks",
    "ListQueueTags", "PurgeQueue", "ReceiveMessage", "RemovePermission", "SendMessage",
    "SetQueueAttributes", "StartMessageMoveTask", "TagQueue", "UntagQueue"))
METADATA_KEY = "RedriveProtectedQueues"
ANY_QUEUE = {"Fn::Sub": "arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:*"}


def tag_key(stack: str) -> str:
    """The tag that makes a queue one of this install's protected queues."""
    return TAG_KEY_PREFIX + stack


def queue_tags(dlqs: list[dict]) -> dict[str, str]:
    """Queue ARN -> the value of this install's tag deploy gives it."""
    roles: dict[str, set] = {}
    for dlq in dlqs:
        roles.setdefault(dlq["arn"], set()).add(DLQ)
        for source in dlq["sources"]:
            roles.setdefault(source, set()).add(SOURCE)
    return {arn: DLQ_AND_SOURCE if len(r) == 2 else next(iter(r)) for arn, r in sorted(roles.items())}


def tagged_statement(statement: dict, sid_suffix: str, key: str, values: list[str]) -> dict:
    """`statement` on every queue of the account and region that carries `key` with one of `values`."""
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    unsupported = [a for a in actions if a not in QUEUE_RESOURCE_ACTIONS]
    if unsupported or "Condition" in statement:
        raise SystemExit(f"attach_template.py: statement {statement.get('Sid', actions)} cannot be granted by tag "
                         f"({'a condition of its own' if not unsupported else sorted(unsupported)}: "
                         "aws:ResourceTag applies to SQS queue resource operations only)")
    out = dict(statement)
    if "Sid" in out and sid_suffix:
        out["Sid"] += sid_suffix
    out["Resource"] = ANY_QUEUE
    out["Condition"] = {"StringEquals": {f"aws:ResourceTag/{key}": values}}
    return out


def rewrite_statement(statement: dict, key: str, any_sources: bool) -> list[dict]:
    """A statement that names our DLQ or our source queue becomes the same grant on the queues
    tagged as protected DLQs or as their sources (none for sources when no DLQ has one), and
    its other resources as they were; any other resource attach mode does not create is left
    out. A statement that names none of them stays as it is."""
    value = statement.get("Resource")
    items = value if isinstance(value, list) else [value]
    gone = [i for i in items if any(_is_getatt(i, logical) for logical in MANAGED_ONLY)]
    if not gone:
        return [statement]
    names_dlq = any(_is_getatt(i, "DeadLetterQueue") for i in items)
    names_source = any(_is_getatt(i, "SourceQueue") for i in items)
    # Else a resource of managed mode only (the consumer's idempotency table): attach mode
    # deploys no consumer, so the grant goes (with its statement, when it was alone).
    rest = [i for i in items if i not in gone]
    out = []
    if rest:
        out.append({**statement, "Resource": rest})
    alone = not rest and not (names_dlq and names_source)
    if names_dlq:
        out.append(tagged_statement(statement, "" if alone else "ProtectedDlqs", key, DLQ_VALUES))
    if names_source and any_sources:
        out.append(tagged_statement(statement, "" if alone else "ProtectedSources", key, SOURCE_VALUES))
    return out


def kms_statements(dlqs: list[dict], send_to_dlqs: bool, send_to_sources: bool) -> list[dict]:
    """The customer managed keys of the protected queues (deploy.sh resolved each queue's
    KmsMasterKeyId to its key ARN): receiving from a DLQ needs kms:Decrypt; sending (to a
    source, or a hop back to the DLQ) kms:GenerateDataKey as well. Exactly those keys."""
    dlq_keys = sorted({d.get("key") for d in dlqs if d.get("key")})
    source_keys = sorted({k for d in dlqs for k in d.get("source_keys", [])})
    statements = []
    decrypt_only = [] if send_to_dlqs else dlq_keys
    send_keys = sorted(set(dlq_keys if send_to_dlqs else []) | set(source_keys if send_to_sources else []))
    if decrypt_only:
        statements.append({"Sid": "DecryptProtectedDlqs", "Effect": "Allow", "Action": "kms:Decrypt",
                           "Resource": decrypt_only})
    if send_keys:
        statements.append({"Sid": "EncryptProtectedQueues", "Effect": "Allow",
                           "Action": ["kms:Decrypt", "kms:GenerateDataKey"], "Resource": send_keys})
    return statements


# The triage console's roles name the books of our DLQ and poison queue (the circuit table's
# items `triage#<queue ARN>`, and `triage#<queue URL>` where books were kept before). Attach
# mode names the books of this account and region's queues instead (no policy grows with the
# fleet), and grants each function a read of the protected DLQs' list item, which it reads at
# init (DLQ_LIST_TABLE); their queue calls are granted by tag like every role's.
CONSOLE_BOOK_STATEMENTS = {"TriageWidgetRole": "ReadTriageBooks", "TriageActionRole": "ChangeTriageBooks"}
CONSOLE_BOOK_KEYS = [
    {"Fn::Sub": "triage#arn:${AWS::Partition}:sqs:${AWS::Region}:${AWS::AccountId}:*"},
    {"Fn::Sub": "triage#https://*/${AWS::AccountId}/*"},
]
DLQ_LIST_KEY = "redrive:fleet:dlq-urls"


def rewrite_console_books(resources: dict) -> None:
    for logical, sid in CONSOLE_BOOK_STATEMENTS.items():
        role = resources.get(logical)
        if not role:
            continue
        statements = role["Properties"]["Policies"][0]["PolicyDocument"]["Statement"]
        for statement in statements:
            if statement.get("Sid") == sid:
                statement["Condition"] = {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": CONSOLE_BOOK_KEYS}}
        statements.append({"Sid": "ReadProtectedDlqList", "Effect": "Allow", "Action": "dynamodb:GetItem",
                           "Resource": {"Fn::GetAtt": ["CircuitTable", "Arn"]},
                           "Condition": {"ForAllValues:StringEquals": {"dynamodb:LeadingKeys": [DLQ_LIST_KEY]}}})


def rewrite_policies(resources: dict, dlqs: list[dict], stack: str, sources: bool | None = None) -> None:
    key = tag_key(stack)
    rewrite_console_books(resources)
    any_sources = any(d["sources"] for d in dlqs) if sources is None else sources
    # Every per-DLQ trigger alarm of this stack (STACK-dlq-not-empty-<queue name>): one pattern,
    # whatever the number of DLQs; the stack creates every alarm of that prefix.
    trigger_arns = [alarm_arn("dlq-not-empty", "*")]
    for resource in resources.values():
        props = resource.get("Properties", {})
        documents = [p["PolicyDocument"] for p in props.get("Policies", [])]
        if "PolicyDocument" in props and resource["Type"].startswith("AWS::IAM::"):
            documents.append(props["PolicyDocument"])
        for document in documents:
            kept = []
            for statement in document["Statement"]:
                if statement.get("Sid") in ("RearmTriggerAlarm",):
                    statement["Resource"] = trigger_arns
                    kept.append(statement)
                elif "Resource" in statement:
                    kept.extend(rewrite_statement(statement, key, any_sources))
                else:
                    kept.append(statement)
            document["Statement"] = kept
    # The archiver reads each protected DLQ's redrive:archive-after-days tag at init.
    archiver = resources.get("ArchiverRole")
    if archiver:
        archiver["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].append(tagged_statement(
            {"Sid": "ReadProtectedDlqTags", "Effect": "Allow", "Action": "sqs:ListQueueTags"}, "", key, DLQ_VALUES))
    # Queues under a customer managed KMS key: the re-driver and the operator send to sources
    # and back to the DLQs; the archiver only receives from the DLQs; the triage console's
    # action receives from the DLQs and sends a replay's canary to the sources.
    for logical, to_dlqs, to_sources in (("RedriverRole", True, True), ("ArchiverRole", False, False),
                                         ("OperatorPolicy", True, True), ("TriageActionRole", False, True)):
        resource = resources.get(logical)
        statements = kms_statements(dlqs, send_to_dlqs=to_dlqs, send_to_sources=to_sources)
        if resource and statements:
            props = resource["Properties"]
            document = props["Policies"][0]["PolicyDocument"] if "Policies" in props else props["PolicyDocument"]
            document["Statement"].extend(statements)
    # X-Ray writes: the roles that exist.
    xray = resources.get("XRayWrites")
    if xray:
        roles = xray["Properties"]["Roles"]

        def drop_consumer(lst):
            return [r for r in lst if r != {"Ref": "ConsumerRole"}]

        xray["Properties"]["Roles"] = drop_consumer(roles)


# ---------------------------------------------------------------- alarms
def per_dlq_alarms(dlq: dict) -> dict:
    name = dlq["name"]
    dims = [{"Name": "QueueName", "Value": name}]
    common = {"Namespace": "AWS/SQS", "Dimensions": dims, "EvaluationPeriods": 1,
              "TreatMissingData": "notBreaching"}

    def alarm(kind: str, description: str, properties: dict) -> dict:
        """The DLQ's alarm `kind`: its name and description (where ${Queue} is the DLQ's name),
        then `properties`."""
        return {"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmName": alarm_name(kind, name),
            "AlarmDescription": {"Fn::Sub": [description, {"Queue": name}]},
            **properties}}

    def age_alarm(kind: str, threshold: str, description: str) -> dict:
        """An alarm on the age of the DLQ's oldest message reaching the parameter `threshold`
        (seconds), to the alerts topic, and to the recovery topic when it is over."""
        return alarm(kind, description, {
            **common, "MetricName": "ApproximateAgeOfOldestMessage", "Statistic": "Maximum",
            "Period": 300, "Threshold": {"Ref": threshold},
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "AlarmActions": [{"Ref": "AlertsTopic"}], "OKActions": [{"Ref": "RecoveryTopic"}]})

    return {
        logical_id(name, "NotEmpty"): alarm(
            "dlq-not-empty",
            "redrive trigger: the protected DLQ ${Queue} holds messages. Notifies the re-driver "
            "(trigger topic), which drains the DLQ this alarm's QueueName names and sets the "
            "alarm back to OK.", {
                **common, "MetricName": "ApproximateNumberOfMessagesVisible", "Statistic": "Maximum",
                "Period": 60, "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold",
                "AlarmActions": [{"Ref": "TriggerTopic"}]}),
        logical_id(name, "Age"): age_alarm(
            "dlq-oldest-message-age", "DlqAgeAlarmSeconds",
            "First stage: a message has waited in the protected DLQ ${Queue} for "
            "${DlqAgeAlarmSeconds} s and nothing has drained it. Check the re-driver, its "
            "guards and the circuit (redrive status)."),
        # Count-based, as managed mode's dlq-not-empty-daily: visible or in flight, so that no
        # receive (the archiver's hourly sweep, an operator's peek) hides the backlog it holds.
        logical_id(name, "Daily"): alarm(
            "dlq-not-empty-daily",
            "Daily reminder: the protected DLQ ${Queue} held messages through the hour starting "
            "${PoisonReminderHourUtc}:00 UTC (visible or in flight). Nothing drained them: check the "
            "re-driver, its guards, the circuit and the DLQ's redrive: tags (redrive status).", {
            "Metrics": [
                {"Id": "visible", "ReturnData": False, "MetricStat": {"Metric": {
                    "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesVisible", "Dimensions": dims},
                    "Period": 3600, "Stat": "Minimum"}},
                {"Id": "inflight", "ReturnData": False, "MetricStat": {"Metric": {
                    "Namespace": "AWS/SQS", "MetricName": "ApproximateNumberOfMessagesNotVisible", "Dimensions": dims},
                    "Period": 3600, "Stat": "Minimum"}},
                {"Id": "reminder", "Label": "DLQ not empty through the reminder hour", "ReturnData": True,
                 "Expression": {"Fn::Sub": "IF(HOUR(visible) == ${PoisonReminderHourUtc} AND visible + FILL(inflight, 0) > 0, 1, 0)"}},
            ],
            "EvaluationPeriods": 1, "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold",
            "TreatMissingData": "notBreaching", "AlarmActions": [{"Ref": "AlertsTopic"}]}),
        logical_id(name, "FinalAge"): age_alarm(
            "dlq-oldest-message-age-final", "DlqFinalAgeAlarmSeconds",
            "Last call: a message has waited in the protected DLQ ${Queue} for "
            "${DlqFinalAgeAlarmSeconds} s; SQS deletes it when the DLQ's retention runs out. "
            "Drain it (redrive drain) or move it to the poison queue now."),
    }


def fleet_alarm(metric: str, stat: str, description: str) -> dict:
    """One Metrics Insights alarm over every QueueName of our namespace: the re-driver and the
    archiver publish these metrics for the protected DLQs and the poison queue only. Its name
    is the metric's in kebab case (`RedriveFailures`: `STACK-redrive-failures`)."""
    kind = re.sub(r"(?<!^)(?=[A-Z])", "-", metric).lower()
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "AlarmName": {"Fn::Sub": "${AWS::StackName}-" + kind},
        "AlarmDescription": description,
        "Metrics": [{
            "Id": "fleet", "ReturnData": True, "Period": 300,
            "Expression": {"Fn::Sub": f'SELECT {stat}({metric}) FROM SCHEMA("${{MetricNamespace}}", QueueName)'},
        }],
        "EvaluationPeriods": 1, "Threshold": 0, "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": "AlertsTopic"}], "OKActions": [{"Ref": "RecoveryTopic"}]}}


# The fleet alarms, one a line: metric (the resource is `FleetMETRICAlarm`), statistic over
# the fleet, description.
FLEET_ALARMS = {
    "RedriveFailures": ("SUM", "SQS refused copies the re-driver sent, on some protected DLQ. The messages stayed on their DLQ; the re-driver's log names the DLQ and the SQS error codes."),
    "DlqReceiveFailures": ("SUM", "A drain could not read a protected DLQ at all (AccessDenied, KMS, deleted queue). Was the queue re-created or its key changed? Run make deploy; see the re-driver's log."),
    "UnplaceableMessages": ("SUM", "Neither a message's source nor the poison queue accepts it: it stays on its DLQ, where retention will delete it. See the re-driver's ERROR log."),
    "CircuitOpen": ("MAX", "The adaptive circuit of a protected DLQ is open: its copies kept bouncing back, so its replays stopped. redrive status names the DLQ; redrive circuit close|auto overrides it."),
    "DlqLeftAlone": ("SUM", "A protected DLQ is left alone: its redrive: tags are invalid, a source may not be sent to (added after the deploy: run make deploy), or its retention cannot be read or is not above the archive threshold. Its messages are neither drained nor archived; the re-driver's or the archiver's ERROR log (action left-alone:...) names the DLQ and why."),
    "ArchiveFailures": ("SUM", "The archiver could not move old messages to S3 (poison queue or a protected DLQ). They are still on their queue; see the archiver's log."),
}


def archiver_errors_alarm() -> dict:
    return {"Type": "AWS::CloudWatch::Alarm", "Properties": {
        "AlarmName": {"Fn::Sub": "${AWS::StackName}-archiver-errors"},
        "AlarmDescription": "The archiver failed (init error, crash, timeout); see its log group.",
        "Namespace": "AWS/Lambda", "MetricName": "Errors",
        "Dimensions": [{"Name": "FunctionName", "Value": {"Fn::Sub": "${AWS::StackName}-archiver"}}],
        "Statistic": "Sum", "Period": 300, "EvaluationPeriods": 1, "Threshold": 0,
        "ComparisonOperator": "GreaterThanThreshold", "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": "AlertsTopic"}], "OKActions": [{"Ref": "RecoveryTopic"}]}}


# ---------------------------------------------------------------- dashboard
# The triage widget function's alias live, as the dashboard's custom widgets name it (deploy
# creates it after the resources stack; its name is the stack's output TriageWidgetFunctionName).
TRIAGE_WIDGET_ENDPOINT = ("arn:${AWS::Partition}:lambda:${AWS::Region}:${AWS::AccountId}:function:"
                          "${AWS::StackName}-triage-widget:live")


def triage_widget(x: int, y: int, width: int, queue: str) -> dict:
    """The triage console's custom widget of `queue` (its name): the widget function renders
    the queue's triage book on every refresh, resize and change of the time range."""
    return {"type": "custom", "x": x, "y": y, "width": width, "height": 8, "properties": {
        "title": f"Triage: {queue}", "endpoint": TRIAGE_WIDGET_ENDPOINT, "params": {"queue": queue},
        "updateOn": {"refresh": True, "resize": True, "timeRange": True}}}


# CloudWatch's limits on a dashboard (infra/quotas.py checks them): 500 widgets, 500 metrics in
# one widget.
DASHBOARD_WIDGETS = 500
WIDGET_METRICS = 500


def _chunks(items: list, size: int) -> list[list]:
    """`items` in ceil(len/size) runs of sizes that differ by one at most."""
    count = max(1, -(-len(items) // size))
    base, extra = divmod(len(items), count)
    out, at = [], 0
    for i in range(count):
        n = base + (1 if i < extra else 0)
        out.append(items[at:at + n])
        at += n
    return out


def fleet_dashboard(dlqs: list[dict]) -> dict:
    """One view of the fleet: depth and oldest age of every protected DLQ (one line each) and
    the poison queue, the re-driver's counts per QueueName (Metrics Insights), and the triage
    console's widget of each protected DLQ and the poison queue. Returned as resources: the
    dashboard `Dashboard` (STACK_NAME) and, where the triage widgets pass CloudWatch's 500
    widgets per dashboard, `TriageDashboard2`, `3`... (STACK_NAME-triage-2...) with the rest. A
    line widget holds at most 500 queues: above, the lines are split over several widgets."""
    queues = [["QueueName", d["name"]] for d in dlqs] + [["QueueName", "${Poison}", {"label": "poison"}]]

    def lines(metric: str, rows: list) -> list:
        return [["AWS/SQS", metric, *row] for row in rows]

    def insights(metric: str, stat: str) -> list:
        return [[{"expression": f'SELECT {stat}({metric}) FROM SCHEMA("${{MetricNamespace}}", QueueName) '
                                f"GROUP BY QueueName ORDER BY {stat}() DESC LIMIT 100",
                  "id": metric.lower(), "label": metric}]]

    def widget(x: int, y: int, title: str, metrics: list, stat: str, period: int) -> dict:
        return {"type": "metric", "x": x, "y": y, "width": 12, "height": 6, "properties": {
            "title": title, "region": "${AWS::Region}", "view": "timeSeries", "stat": stat,
            "period": period, "metrics": metrics}}

    groups = _chunks(queues, WIDGET_METRICS)
    widgets = []
    for i, group in enumerate(groups):
        part = f" ({i + 1} of {len(groups)})" if len(groups) > 1 else ""
        widgets.append(widget(0, 6 * i, "Depth of every protected DLQ, and the poison queue" + part,
                              lines("ApproximateNumberOfMessagesVisible", group), "Maximum", 60))
        widgets.append(widget(12, 6 * i, "Age of oldest message (s)" + part,
                              lines("ApproximateAgeOfOldestMessage", group), "Maximum", 300))
    y = 6 * len(groups)
    widgets += [
        widget(0, y, "Redriven per DLQ", insights("SuccessfulRedrives", "SUM"), "Sum", 300),
        widget(12, y, "Isolated per DLQ (poison queue)", insights("PoisonPillsIsolated", "SUM"), "Sum", 300),
        widget(0, y + 6, "Circuit open per DLQ", insights("CircuitOpen", "MAX"), "Maximum", 300),
        widget(12, y + 6, "Redrive failures per DLQ", insights("RedriveFailures", "SUM"), "Sum", 300),
    ]
    # The triage console: one widget per protected DLQ and the poison queue, two a row; those
    # the first dashboard has no room for go on the next ones.
    triage = [d["name"] for d in dlqs] + ["${Poison}"]
    room = DASHBOARD_WIDGETS - len(widgets)
    pages = [triage[:room]] + [triage[at:at + DASHBOARD_WIDGETS] for at in range(room, len(triage), DASHBOARD_WIDGETS)]
    bodies = []
    for page, names in enumerate(pages):
        top = y + 12 if page == 0 else 0
        body = widgets if page == 0 else []
        for i, queue in enumerate(names):
            body.append(triage_widget(12 * (i % 2), top + 8 * (i // 2), 12, queue))
        bodies.append(body)

    def dashboard(name: dict, body: list) -> dict:
        text = json.dumps({"widgets": body}, separators=(",", ":"))
        # Queue names hold letters, digits, - and _ only: nothing Fn::Sub would read as a variable.
        return {"Type": "AWS::CloudWatch::Dashboard", "Properties": {
            "DashboardName": name,
            "DashboardBody": {"Fn::Sub": [text, {"Poison": {"Fn::GetAtt": ["PoisonQueue", "QueueName"]}}]}}}

    out = {"Dashboard": dashboard({"Fn::Sub": "${AWS::StackName}"}, bodies[0])}
    for page, body in enumerate(bodies[1:], start=2):
        out[f"TriageDashboard{page}"] = dashboard({"Fn::Sub": "${AWS::StackName}-triage-" + str(page)}, body)
    return out


# ---------------------------------------------------------------- nested stacks of alarms
def _template_body(template_path: Path) -> dict:
    """A template as deploy sent it, or as `aws cloudformation get-template` returns it (a body
    sent as a string comes back as a JSON string); {} for none."""
    text = Path(template_path).read_text(encoding="utf-8").strip()
    body = json.loads(text) if text else {}
    if isinstance(body, str):
        body = json.loads(body) if body.lstrip().startswith("{") else {}
    return body if isinstance(body, dict) else {}


def previous_assignment(template_path: Path | None) -> dict[str, list[str]]:
    """Which DLQs' alarms each nested stack of the deployed template holds ({} for none)."""
    if not template_path:
        return {}
    record = (_template_body(template_path).get("Metadata") or {}).get(ASSIGNMENT_KEY)
    return {k: list(v) for k, v in record.items()} if isinstance(record, dict) else {}


def assign(names: list[str], previous: dict[str, list[str]], per_stack: int = DLQS_PER_ALARM_STACK) -> dict[str, list[str]]:
    """Nested stack -> the DLQs whose alarms it holds. Every DLQ still protected stays in the
    stack it was in; those no longer protected leave theirs (a stack left empty goes); a new DLQ
    fills the first stack (in name order) with room, else a new stack with the lowest free
    number. Adding or removing a DLQ changes one stack, and no other DLQ's alarms."""
    wanted, placed, stacks = set(names), set(), {}
    for logical in sorted(previous):
        kept = [n for n in previous[logical] if n in wanted and n not in placed]
        placed.update(kept)
        if kept:
            stacks[logical] = kept
    for name in names:
        if name in placed:
            continue
        target = next((k for k in sorted(stacks) if len(stacks[k]) < per_stack), None)
        if target is None:
            number = 1
            while f"{ALARM_STACK_PREFIX}{number:03d}" in stacks:
                number += 1
            target = f"{ALARM_STACK_PREFIX}{number:03d}"
            stacks[target] = []
        stacks[target].append(name)
        placed.add(name)
    return {k: stacks[k] for k in sorted(stacks)}


def _in_child(node):
    """A node of the parent's per-DLQ alarms as a nested stack states it: the parent's topics
    through their parameters, the install's name where the parent said its own stack name."""
    if isinstance(node, list):
        return [_in_child(i) for i in node]
    if not isinstance(node, dict):
        return node
    if list(node) == ["Ref"] and node["Ref"] in CHILD_REF_PARAMETERS:
        return {"Ref": CHILD_REF_PARAMETERS[node["Ref"]]}
    out = {}
    for key, value in node.items():
        if key == "Fn::Sub":
            text = value if isinstance(value, str) else value[0]
            text = text.replace("${AWS::StackName}", "${" + INSTALL_NAME_PARAMETER + "}")
            value = text if isinstance(value, str) else [text, _in_child(value[1])]
            out[key] = value
        else:
            out[key] = _in_child(value)
    return out


def child_template(dlqs: list[dict], parameters: dict) -> dict:
    """The nested stack of `dlqs`' alarms: `per_dlq_alarms` of each, with what they name in
    the parent as parameters (`parameters`: the parent's, whose definitions they keep)."""
    resources = {}
    for dlq in dlqs:
        resources.update(per_dlq_alarms(dlq))
    resources = _in_child(resources)
    params = {}
    for name in sorted({r for r in references(resources) if not r.startswith("AWS::")}):
        if name == INSTALL_NAME_PARAMETER:
            params[name] = {"Type": "String", "Description": "The install's STACK_NAME (the alarms' names start with it)."}
        elif name in CHILD_REF_PARAMETERS.values():
            params[name] = {"Type": "String", "Description": "The ARN of the install's topic of that name."}
        else:
            params[name] = {k: v for k, v in parameters[name].items() if k != "Default"}
    child = {"AWSTemplateFormatVersion": "2010-09-09",
             "Description": "redrive, attach mode: the alarms of some of the protected DLQs (a nested stack "
                            "of the resources stack; infra/attach_template.py).",
             "Parameters": params, "Resources": resources}
    check_references(child)
    return child


def child_key(body: str) -> str:
    """The S3 key of a nested template under the URL prefix: its content's digest, so that a
    changed template gets a new URL and CloudFormation updates that nested stack (and only it)."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:32] + ".json"


def alarm_stack(child: dict, url: str) -> dict:
    """The parent's resource of a nested stack: its template's URL and its parameters."""
    parent_of = {v: k for k, v in CHILD_REF_PARAMETERS.items()}
    params = {}
    for name in child["Parameters"]:
        if name == INSTALL_NAME_PARAMETER:
            params[name] = {"Ref": "AWS::StackName"}
        else:
            params[name] = {"Ref": parent_of.get(name, name)}
    return {"Type": "AWS::CloudFormation::Stack", "Properties": {"TemplateURL": url, "Parameters": params}}


# ---------------------------------------------------------------- checks
_SUB_VAR = re.compile(r"\$\{([A-Za-z0-9]+)(?:\.[A-Za-z]+)?\}")


def references(node):
    """Every logical id a node names (Ref, GetAtt, the variables of Sub strings)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "Ref" and isinstance(value, str):
                yield value
            elif key == "Fn::GetAtt":
                yield value[0] if isinstance(value, list) else value.split(".")[0]
            elif key == "Fn::Sub":
                text = value if isinstance(value, str) else value[0]
                local = set() if isinstance(value, str) else set(value[1])
                for match in _SUB_VAR.finditer(text):
                    if match.group(1) not in local:
                        yield match.group(1)
                if not isinstance(value, str):
                    yield from references(value[1])
            else:
                yield from references(value)
    elif isinstance(node, list):
        for item in node:
            yield from references(item)


def drop_unused(template: dict) -> None:
    """Parameters, mappings and conditions that only the removed resources used."""
    while True:
        used = set(references({k: v for k, v in template.items() if k not in ("Parameters", "Mappings")}))
        text = json.dumps({k: v for k, v in template.items() if k != "Conditions"})
        unused_conditions = [c for c in template.get("Conditions", {})
                             if f'"Condition": "{c}"' not in text and f'"Fn::If": ["{c}"' not in text
                             and f'{{"Condition": "{c}"}}' not in json.dumps(template.get("Conditions", {}))]
        unused_params = [p for p in template.get("Parameters", {}) if p not in used]
        unused_maps = [m for m in template.get("Mappings", {}) if f'"Fn::FindInMap": ["{m}"' not in json.dumps(template)]
        if not (unused_conditions or unused_params or unused_maps):
            return
        for c in unused_conditions:
            del template["Conditions"][c]
        for p in unused_params:
            del template["Parameters"][p]
        for m in unused_maps:
            del template["Mappings"][m]


def filter_params(params_path: Path, template: dict) -> None:
    """deploy.sh's parameters file without those the attach template no longer declares."""
    params = json.loads(params_path.read_text(encoding="utf-8"))
    kept = [p for p in params if p["ParameterKey"] in template.get("Parameters", {})]
    params_path.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")


def check_references(template: dict) -> None:
    known = set(template.get("Resources", {})) | set(template.get("Parameters", {}))
    for section in ("Resources", "Outputs"):
        for key, node in template.get(section, {}).items():
            missing = {r for r in references(node) if not r.startswith("AWS::") and r not in known}
            if missing:
                raise SystemExit(f"attach_template.py: {section}.{key} names {sorted(missing)}, "
                                 "which attach mode does not create")


def build_stacks(template: dict, dlqs: list[dict], stack: str = "redrive", resource_limit: bool = True,
                 previous: dict[str, list[str]] | None = None,
                 url_prefix: str = DEFAULT_CHILD_URL_PREFIX, alarms: bool = True,
                 sources: bool | None = None) -> tuple[dict, dict[str, str]]:
    """The attach template for `dlqs`, and its nested templates of per-DLQ alarms (S3 key under
    `url_prefix` -> compact JSON body, as deploy uploads them). `previous` is the deployed
    template's assignment of DLQs to nested stacks (`previous_assignment`), kept.
    `resource_limit=False` (deploy's quota check, which names every quota exceeded itself)
    renders above CloudFormation's 500 resources per template too. `alarms=False`: without the
    per-DLQ alarms (the first of the two updates that move them out of a stack from before the
    nested stacks, see `has_inline_alarms`). `sources`: whether the roles grant on the protected
    DLQs' sources (default: whether some DLQ of `dlqs` has one; the standalone template, which
    knows no DLQ, grants on them: infra/standalone_template.py)."""
    resources = template["Resources"]
    for logical in MANAGED_ONLY:
        resources.pop(logical, None)
    for key in MANAGED_ONLY_OUTPUTS:
        template["Outputs"].pop(key, None)
    # The Step Functions orchestrator drains one DLQ: not in attach mode (deploy.sh refuses it).
    for section in ("Resources", "Outputs"):
        for key in [k for k, v in template[section].items() if v.get("Condition") == "UseStepFunctions"]:
            del template[section][key]
    xray = resources.get("XRayWrites")
    if xray and isinstance(xray["Properties"]["Roles"], dict):
        xray["Properties"]["Roles"] = xray["Properties"]["Roles"]["Fn::If"][2]
    rewrite_policies(resources, dlqs, stack, sources)
    for metric, (stat, description) in FLEET_ALARMS.items():
        resources["Fleet" + metric + "Alarm"] = fleet_alarm(metric, stat, description)
    resources["ArchiverErrorsAlarm"] = archiver_errors_alarm()
    resources.update(fleet_dashboard(dlqs))
    # The alarms of each DLQ: in a nested stack (see DLQS_PER_ALARM_STACK), the same one at
    # every deploy.
    by_name = {d["name"]: d for d in dlqs}
    assignment = assign([d["name"] for d in dlqs], previous or {}) if alarms else {}
    children: dict[str, str] = {}
    child_templates: dict[str, dict] = {}
    for logical, names in assignment.items():
        child = child_template([by_name[n] for n in names], template["Parameters"])
        body = cfn_yaml.compact(child)
        key = child_key(body)
        children[key] = body
        child_templates[logical] = child
        resources[logical] = alarm_stack(child, url_prefix + key)
    template["Description"] = ("redrive, part 1 of 2, attach mode: poison queue, circuit table, topics, "
                               "fleet alarms, nested stacks of alarms per protected DLQ, log groups and roles; "
                               "none of the protected queues.")
    template["Outputs"]["ProtectedDlqCount"] = {"Value": str(len(dlqs))}
    # The queues deploy tags for this stack, read back by the next deploy (to untag those no
    # longer protected) and by make destroy (to untag them all).
    metadata = template.setdefault("Metadata", {})
    metadata[METADATA_KEY] = {
        "TagKey": tag_key(stack), "Queues": {arn.rsplit(":", 1)[1]: v for arn, v in queue_tags(dlqs).items()}}
    if alarms:
        metadata[ASSIGNMENT_KEY] = assignment
    drop_unused(template)
    check_references(template)
    if resource_limit:
        for what, count in [("the resources stack", len(resources))] + [
                (f"nested stack {k}", len(c["Resources"])) for k, c in child_templates.items()]:
            if count > TEMPLATE_RESOURCE_LIMIT:
                raise SystemExit(
                    f"attach_template.py: {len(dlqs)} DLQs make {count} resources in {what}, above "
                    f"CloudFormation's {TEMPLATE_RESOURCE_LIMIT} per stack. Split them over two installs "
                    "(two STACK_NAMEs, each with its own PROTECT_DLQS or PROTECT_TAG).")
    return template, children


def build(template: dict, dlqs: list[dict], stack: str = "redrive", resource_limit: bool = True,
          previous: dict[str, list[str]] | None = None, alarms: bool = True, sources: bool | None = None) -> dict:
    """The attach template for `dlqs` (its nested templates: `build_stacks`)."""
    return build_stacks(template, dlqs, stack, resource_limit, previous, alarms=alarms, sources=sources)[0]


def children_of(template: dict, children: dict[str, str]) -> dict[str, dict]:
    """Nested stack's logical id -> its template, for a parent and the bodies `build_stacks` made."""
    out = {}
    for logical, resource in template.get("Resources", {}).items():
        if resource.get("Type") == "AWS::CloudFormation::Stack":
            key = resource["Properties"]["TemplateURL"].rsplit("/", 1)[1]
            out[logical] = json.loads(children[key])
    return out


_PER_DLQ_ALARM_ID = re.compile(r"^Dlq[A-Za-z0-9]*[0-9a-f]{8}(NotEmpty|Age|FinalAge|Daily)$")


def has_inline_alarms(template_path: Path) -> bool:
    """Whether a deployed attach template holds per-DLQ alarms itself (an install from before the
    nested stacks). Moving them into nested stacks in one update would create each alarm in its
    nested stack, under its name, while the parent still has it: deploy first updates the stack
    without them, then with the nested stacks."""
    resources = _template_body(template_path).get("Resources") or {}
    return any(_PER_DLQ_ALARM_ID.match(k) and r.get("Type") == "AWS::CloudWatch::Alarm"
               for k, r in resources.items())


def tagged_queues(template_path: Path) -> list[tuple[str, str, str]]:
    """(tag key, queue name, value) of every queue a rendered attach template (as deploy sent it,
    or as `aws cloudformation get-template` returns it) has deploy tag; none for another template."""
    record = (_template_body(template_path).get("Metadata") or {}).get(METADATA_KEY)
    if not record:
        return []
    return [(record["TagKey"], name, value) for name, value in sorted(record["Queues"].items())]


USAGE = ("usage: attach_template.py RESOURCES_YAML DLQS_TSV OUT_JSON [PARAMS_JSON] --stack STACK_NAME\n"
         "           [--children DIR] [--child-url-prefix URL] [--previous PREVIOUS_TEMPLATE_JSON] [--quota-check]\n"
         "           [--without-alarms]\n"
         "       attach_template.py has-inline-alarms PREVIOUS_TEMPLATE_JSON   (exit 0: it has)")


def _option(argv: list[str], name: str) -> tuple[list[str], str | None]:
    if name not in argv:
        return argv, None
    at = argv.index(name)
    if at + 1 >= len(argv):
        raise SystemExit(USAGE)
    return argv[:at] + argv[at + 2:], argv[at + 1]


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "has-inline-alarms":
        return 0 if has_inline_alarms(Path(argv[1])) else 1
    alarms = "--without-alarms" not in argv
    argv = [a for a in argv if a != "--without-alarms"]
    # --quota-check: the rendering deploy checks with quotas.py, which names the resources quota.
    resource_limit = "--quota-check" not in argv
    argv = [a for a in argv if a != "--quota-check"]
    # --children DIR: the nested templates, one file a key (deploy uploads each under
    # --child-url-prefix, the URL the parent names them by); --previous: the deployed template,
    # whose assignment of DLQs to nested stacks is kept.
    argv, stack = _option(argv, "--stack")
    argv, children_dir = _option(argv, "--children")
    argv, url_prefix = _option(argv, "--child-url-prefix")
    argv, previous = _option(argv, "--previous")
    if len(argv) not in (3, 4):
        print(USAGE, file=sys.stderr)
        return 2
    template, children = build_stacks(cfn_yaml.load(Path(argv[0])), read_dlqs(Path(argv[1])), stack or "redrive",
                                      resource_limit, previous_assignment(Path(previous) if previous else None),
                                      url_prefix or DEFAULT_CHILD_URL_PREFIX, alarms)
    Path(argv[2]).write_bytes(cfn_yaml.compact(template).encode("utf-8"))
    if children_dir:
        Path(children_dir).mkdir(parents=True, exist_ok=True)
        for key, body in children.items():
            (Path(children_dir) / key).write_bytes(body.encode("utf-8"))
    if len(argv) == 4:
        filter_params(Path(argv[3]), template)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

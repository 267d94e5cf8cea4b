"""The AWS quotas a deploy can hit, checked on what deploy.sh sends, before anything is changed.

`python infra/quotas.py check TEMPLATE_JSON [--children DIR] [ENV_FILE ...] [DLQS.list]`
    Checks one template as deploy_stack sends it (compact JSON) and, with --children, every
    nested stack's template it names (attach mode's alarms: DIR holds each under the last part
    of its TemplateURL, as deploy uploads it), the functions' environment files as deploy.sh
    writes them and attach mode's list of protected DLQs. Prints each figure against its
    quota; exits 1 naming every quota exceeded.
`python infra/quotas.py ceiling RESOURCES_YAML [--name-length N] [--sources K]`
    The largest number of protected DLQs one attach-mode install deploys within every quota,
    for DLQ and source names of N characters (80, SQS's longest, by default) and K sources per
    DLQ (3 by default), the resources stack and each of its nested stacks checked. The README's
    ceiling is this figure.

The quotas (IAM counts policy characters without whitespace):
- a managed policy's document: 6,144 characters;
- a role's inline policies together (its Policies and every AWS::IAM::Policy attached to it):
  10,240 characters;
- a Lambda function's environment variables together (keys and values): 4 KB (deploy.sh's
  environment files, and the functions a template creates);
- a template: 51,200 bytes as a TemplateBody, 1 MB through S3 (deploy_stack switches to S3
  above the first; the check is the second; a nested stack's template is always read from S3);
  500 resources, 200 outputs, 200 parameters, each nested stack's template too;
- an alarm's actions: 5 per state;
- a dashboard: 500 widgets (custom widgets too), 500 metrics in one widget, 2,500 metrics in
  all its widgets; a custom widget's endpoint is a Lambda function's ARN in its region;
- a Metrics Insights query: it returns at most 500 time series and matches at most 10,000
  metrics (above either, an alarm on it evaluates `PARTIAL_DATA`). The fleet alarms query one
  metric of every QueueName (one per protected DLQ and the poison queue: the template's output
  `ProtectedDlqCount`, plus one) and return one series (no GROUP BY); a query with GROUP BY
  returns one series per queue, at most its LIMIT;
- attach mode's list of protected DLQs, one DynamoDB item in the circuit table: 400 KB
  (`check` takes it as a file ending in `.list`, the comma-separated URLs deploy writes).

A template names ARNs through intrinsic functions; each is measured at its longest value
(partition aws-iso-b, a 14-character region, STACK_NAME's 40 characters), so that a template
that passes here passes in every account and region.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import attach_template  # noqa: E402
import cfn_yaml  # noqa: E402

MANAGED_POLICY_CHARS = 6_144
ROLE_INLINE_CHARS = 10_240
LAMBDA_ENV_BYTES = 4_096
TEMPLATE_BODY_BYTES = 51_200
TEMPLATE_URL_BYTES = 1_000_000
RESOURCES = 500
OUTPUTS = 200
PARAMETERS = 200
ALARM_ACTIONS = 5
DASHBOARD_WIDGETS = 500
WIDGET_METRICS = 500
DASHBOARD_METRICS = 2_500
INSIGHTS_SERIES = 500
INSIGHTS_METRICS = 10_000
DYNAMODB_ITEM_BYTES = 400 * 1024
# The item deploy writes (infra/lib.sh write_dlq_list; redrive_engine::fleet_list).
DLQ_LIST_ITEM_KEY = ("queue", "redrive:fleet:dlq-urls")
DLQ_LIST_ATTRIBUTE = "dlq_urls"

# The longest value of each pseudo parameter and of what the templates name through them.
LONGEST = {
    "AWS::Partition": "aws-iso-b",
    "AWS::Region": "ap-southeast-14",
    "AWS::AccountId": "123456789012",
    "AWS::StackName": "S" * 40,
    "AWS::URLSuffix": "amazonaws.com",
    "AWS::StackId": "arn:aws-iso-b:cloudformation:ap-southeast-14:123456789012:stack/" + "S" * 40 + "/" + "0" * 36,
}
SQS_NAME = 80
ARN_PREFIX = "arn:aws-iso-b:sqs:ap-southeast-14:123456789012:"
QUEUE_URL_PREFIX = "https://sqs.ap-southeast-14.amazonaws.com/123456789012/"


def _getatt_value(logical: str, attribute: str, resources: dict) -> str:
    """The longest a resource's attribute can be: an ARN of its type with a 64-character name."""
    kind = resources.get(logical, {}).get("Type", "")
    service = {"AWS::SQS::Queue": "sqs", "AWS::SNS::Topic": "sns", "AWS::DynamoDB::Table": "dynamodb",
               "AWS::IAM::Role": "iam", "AWS::Logs::LogGroup": "logs", "AWS::S3::Bucket": "s3",
               "AWS::StepFunctions::StateMachine": "states", "AWS::Lambda::Function": "lambda"}.get(kind, "x")
    if attribute in ("QueueName", "TopicName"):
        return "N" * 80
    return f"arn:aws-iso-b:{service}:ap-southeast-14:123456789012:{'table/' if service == 'dynamodb' else ''}" + "N" * 64


def resolve(node, template: dict):
    """The template node with every intrinsic function replaced by its longest value."""
    resources = template.get("Resources", {})
    parameters = template.get("Parameters", {})
    if isinstance(node, list):
        return [resolve(item, template) for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        (key, value), = node.items()
        if key == "Ref":
            if value in LONGEST:
                return LONGEST[value]
            if value in parameters:
                default = parameters[value].get("Default")
                return str(default) if default not in (None, "") else "P" * 64
            return "R" * 64
        if key == "Fn::GetAtt":
            logical, attribute = value if isinstance(value, list) else value.split(".", 1)
            return _getatt_value(logical, attribute, resources)
        if key == "Fn::Sub":
            text, local = (value, {}) if isinstance(value, str) else (value[0], value[1])
            local = {k: resolve(v, template) for k, v in local.items()}

            def sub(match: re.Match) -> str:
                name = match.group(1)
                if name in local:
                    return str(local[name])
                if name in LONGEST:
                    return LONGEST[name]
                if "." in name:
                    logical, attribute = name.split(".", 1)
                    return _getatt_value(logical, attribute, resources)
                return str(resolve({"Ref": name}, template))

            return re.sub(r"\$\{([A-Za-z0-9:._]+)\}", sub, text)
        if key == "Fn::Join":
            separator, items = value
            return separator.join(str(resolve(i, template)) for i in resolve(items, template))
        if key == "Fn::If":
            # Both branches exist in some deploy: the longer one counts.
            options = [resolve(v, template) for v in value[1:]]
            return max(options, key=lambda o: len(json.dumps(o)))
        if key in ("Fn::Select", "Fn::Split", "Fn::ImportValue", "Fn::GetAZs", "Fn::Base64", "Fn::FindInMap"):
            return "V" * 64
    return {k: resolve(v, template) for k, v in node.items() if k != "AWS::NoValue"}


def policy_chars(document) -> int:
    """IAM's measure of a policy document: its JSON without whitespace."""
    return len(re.sub(r"\s", "", json.dumps(document, separators=(",", ":"))))


def _document(node, template: dict):
    """A policy document at its longest: a document written as Fn::Sub text (the standalone
    template's, infra/standalone_template.py) is the JSON that text resolves to."""
    document = resolve(node, template)
    return json.loads(document) if isinstance(document, str) else document


def _role_names(value) -> list[str]:
    roles = value
    if isinstance(roles, dict) and "Fn::If" in roles:
        roles = roles["Fn::If"][1] + roles["Fn::If"][2]
    return [r["Ref"] for r in roles if isinstance(r, dict) and "Ref" in r]


def check_template(template: dict, body_bytes: int) -> list[tuple[str, int, int]]:
    """(what, figure, quota) for every quota the template is subject to."""
    figures = [
        ("template size through S3 (bytes)", body_bytes, TEMPLATE_URL_BYTES),
        ("resources", len(template.get("Resources", {})), RESOURCES),
        ("outputs", len(template.get("Outputs", {})), OUTPUTS),
        ("parameters", len(template.get("Parameters", {})), PARAMETERS),
    ]
    inline: dict[str, int] = {}
    for logical, resource in template.get("Resources", {}).items():
        props = resource.get("Properties", {})
        kind = resource.get("Type")
        if kind == "AWS::IAM::ManagedPolicy":
            figures.append((f"managed policy {logical} (characters)",
                            policy_chars(_document(props["PolicyDocument"], template)), MANAGED_POLICY_CHARS))
        elif kind == "AWS::IAM::Role":
            inline[logical] = inline.get(logical, 0) + sum(
                policy_chars(_document(p["PolicyDocument"], template)) for p in props.get("Policies", []))
        elif kind == "AWS::IAM::Policy":
            size = policy_chars(_document(props["PolicyDocument"], template))
            for role in _role_names(props.get("Roles", [])):
                inline[role] = inline.get(role, 0) + size
        elif kind == "AWS::CloudWatch::Alarm":
            for key in ("AlarmActions", "OKActions", "InsufficientDataActions"):
                figures.append((f"alarm {logical} {key}", len(props.get(key, [])), ALARM_ACTIONS))
            for metric in props.get("Metrics", []):
                query = json.dumps(metric.get("Expression", ""))
                if "SELECT" in query:
                    figures.append((f"alarm {logical} Metrics Insights series", insights_series(template, query),
                                    INSIGHTS_SERIES))
                    figures.append((f"alarm {logical} Metrics Insights metrics", insights_metrics(template),
                                    INSIGHTS_METRICS))
        elif kind == "AWS::CloudWatch::Dashboard":
            figures.extend(check_dashboard(logical, resolve(props["DashboardBody"], template)))
        elif kind == "AWS::Lambda::Function":
            # A function the template creates (the standalone template's): its environment.
            variables = resolve(props.get("Environment", {}).get("Variables", {}), template)
            figures.append(check_env(f"function {logical}", {k: str(v) for k, v in variables.items()}))
    for role, size in sorted(inline.items()):
        if role in template.get("Resources", {}):
            figures.append((f"role {role} inline policies (characters)", size, ROLE_INLINE_CHARS))
    return figures


def check_stacks(template: dict, body_bytes: int,
                 children: dict[str, tuple[dict, int]] | None = None) -> list[tuple[str, int, int]]:
    """`check_template` of a template and of each nested stack it names: `children` maps the
    last part of a nested stack's TemplateURL (the S3 key deploy uploads it under) to its
    template and size in bytes. A nested template not given, or whose parameters differ from
    those the parent passes (CloudFormation refuses the stack), is a figure of 1 above a quota of 0."""
    figures = check_template(template, body_bytes)
    for logical, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::CloudFormation::Stack":
            continue
        props = resource.get("Properties", {})
        key = str(resolve(props.get("TemplateURL", ""), template)).rsplit("/", 1)[-1]
        if key not in (children or {}):
            figures.append((f"nested stack {logical}: its template {key} was not given", 1, 0))
            continue
        child, size = children[key]
        figures.extend((f"nested stack {logical}: {what}", figure, quota)
                       for what, figure, quota in check_template(child, size))
        declared = child.get("Parameters", {})
        passed = set(props.get("Parameters", {}))
        needed = {k for k, v in declared.items() if "Default" not in v}
        wrong = sorted((passed - set(declared)) | (needed - passed))
        figures.append((f"nested stack {logical}: parameters passed but not declared, or needed but not passed "
                        f"{wrong}", len(wrong), 0))
    return figures


def read_children(directory: Path) -> dict[str, tuple[dict, int]]:
    """The nested templates deploy uploads: each file of `directory`, by its name."""
    out = {}
    for path in sorted(Path(directory).iterdir()):
        body = path.read_bytes()
        out[path.name] = (json.loads(body), len(body))
    return out


def insights_metrics(template: dict) -> int:
    """The metrics a fleet Metrics Insights query (one metric FROM SCHEMA(namespace, QueueName))
    matches: one per protected DLQ and one for the poison queue."""
    count = template.get("Outputs", {}).get("ProtectedDlqCount", {}).get("Value", "1")
    return int(count) + 1


def insights_series(template: dict, query: str) -> int:
    """The time series a fleet Metrics Insights query returns: one without GROUP BY (the
    metrics it matches aggregated), else one per queue it matches, at most its LIMIT."""
    if "GROUP BY" not in query.upper():
        return 1
    limit = re.search(r"LIMIT\s+(\d+)", query, re.IGNORECASE)
    matched = insights_metrics(template)
    return min(matched, int(limit.group(1))) if limit else matched


# A custom widget's endpoint: a Lambda function's ARN (with its alias or version), in the
# dashboard's region (CloudWatch calls a custom widget's function in the dashboard's region).
CUSTOM_WIDGET_ENDPOINT = re.compile(
    r"arn:aws[a-z-]*:lambda:(?P<region>[a-z0-9-]+):[0-9]{12}:function:[A-Za-z0-9_-]{1,64}(:[A-Za-z0-9_$-]{1,128})?")


def check_dashboard(logical: str, body: str, region: str = LONGEST["AWS::Region"]) -> list[tuple[str, int, int]]:
    """CloudWatch's limits on one dashboard: its widgets (custom ones count too), each widget's
    metrics (a metric or an expression row) and all its metrics together; and each custom
    widget's endpoint, which must be a Lambda function's ARN in the dashboard's `region` (a
    figure of 1 above a quota of 0 when it is not)."""
    widgets = json.loads(body).get("widgets", [])
    figures = [(f"dashboard {logical} widgets", len(widgets), DASHBOARD_WIDGETS)]
    total = 0
    for i, widget in enumerate(widgets):
        rows = len(widget.get("properties", {}).get("metrics", []))
        total += rows
        title = widget.get("properties", {}).get("title", f"#{i}")
        figures.append((f"dashboard {logical} widget '{title}' metrics", rows, WIDGET_METRICS))
        if widget.get("type") == "custom":
            endpoint = str(widget.get("properties", {}).get("endpoint", ""))
            match = CUSTOM_WIDGET_ENDPOINT.fullmatch(endpoint)
            figures.append((f"dashboard {logical} custom widget '{title}' endpoint not a Lambda ARN of region {region}",
                            0 if match and match["region"] == region else 1, 0))
    figures.append((f"dashboard {logical} metrics", total, DASHBOARD_METRICS))
    return figures


def read_env_file(path: Path) -> dict[str, str]:
    """An environment file as deploy.sh writes it: KEY='value' lines."""
    variables = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        if len(value) >= 2 and value[0] == value[-1] == "'":
            value = value[1:-1]
        variables[key] = value
    return variables


def env_bytes(variables: dict[str, str]) -> int:
    """Lambda's measure of an environment: every key and value, in bytes."""
    return sum(len(k.encode("utf-8")) + len(v.encode("utf-8")) for k, v in variables.items())


def check_env(name: str, variables: dict[str, str]) -> tuple[str, int, int]:
    return (f"environment of {name} (bytes)", env_bytes(variables), LAMBDA_ENV_BYTES)


def dlq_list_item_bytes(urls: str) -> int:
    """DynamoDB's measure of the list's item: every attribute's name and value, in bytes."""
    return sum(len(s.encode("utf-8")) for s in (*DLQ_LIST_ITEM_KEY, DLQ_LIST_ATTRIBUTE, urls))


def check_dlq_list(urls: str) -> tuple[str, int, int]:
    return ("protected DLQs' list item (bytes)", dlq_list_item_bytes(urls), DYNAMODB_ITEM_BYTES)


def over(figures: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    return [f for f in figures if f[1] > f[2]]


# ---------------------------------------------------------------- the ceiling
def synthetic_dlqs(count: int, name_length: int, sources: int, arn_prefix: str = ARN_PREFIX) -> list[dict]:
    """`count` DLQs with names of `name_length` characters and `sources` sources each."""
    def name(kind: str, i: int, j: int = 0) -> str:
        stem = f"{kind}{i:04d}{j}-"
        return stem + "q" * (name_length - len(stem))

    return [{"name": name("d", i), "arn": arn_prefix + name("d", i),
             "sources": [arn_prefix + name("s", i, j) for j in range(sources)]} for i in range(count)]


def attach_env_files(dlqs: list[dict], workdir: Path, url_prefix: str = QUEUE_URL_PREFIX) -> list[Path]:
    """The re-driver's and the archiver's environment files as deploy.sh writes them (its own
    functions in infra/lib.sh) for these DLQs, with every stack output at its longest."""
    # Through a file: at thousands of DLQs the list passes the kernel's limit on one argument.
    (workdir / "dlq-urls.list").write_text(",".join(url_prefix + d["name"] for d in dlqs), encoding="utf-8")
    script = (
        f'source "{HERE}/lib.sh" && load_config && STACK_NAME={LONGEST["AWS::StackName"]} && '
        f'PROTECTED_DLQ_URLS=$(cat "{workdir}/dlq-urls.list") && longest_outputs && '
        f'write_redriver_env "{workdir}/redriver.env" && write_archiver_env "{workdir}/archiver.env"'
    )
    subprocess.run(["bash", "-c", script], check=True, env={"PATH": "/usr/bin:/bin", "PROTECT_DLQS": "x"})
    return [workdir / "redriver.env", workdir / "archiver.env"]


def figures_for(resources_yaml: Path, dlqs: list[dict], workdir: Path,
                url_prefix: str = QUEUE_URL_PREFIX) -> list[tuple[str, int, int]]:
    try:
        template, bodies = attach_template.build_stacks(cfn_yaml.load(resources_yaml), dlqs, LONGEST["AWS::StackName"])
    except SystemExit as refused:  # the resource limit: its own message
        return [(str(refused), 1, 0)]
    children = {key: (json.loads(body), len(body.encode("utf-8"))) for key, body in bodies.items()}
    figures = check_stacks(template, len(cfn_yaml.compact(template).encode("utf-8")), children)
    for path in attach_env_files(dlqs, workdir, url_prefix):
        figures.append(check_env(path.stem, read_env_file(path)))
    figures.append(check_dlq_list(",".join(url_prefix + d["name"] for d in dlqs)))
    return figures


def ceiling(resources_yaml: Path, name_length: int, sources: int, workdir: Path,
            arn_prefix: str = ARN_PREFIX, url_prefix: str = QUEUE_URL_PREFIX) -> tuple[int, list]:
    """The largest count within every quota, and what the next one exceeds. The prefixes are
    the queues' ARN and URL up to the name: by default the longest any account and region has."""
    def exceeded(count: int) -> list:
        return over(figures_for(resources_yaml, synthetic_dlqs(count, name_length, sources, arn_prefix),
                                workdir, url_prefix))

    low, high = 0, 1
    while not exceeded(high):
        low, high = high, high * 2
        if high > 4096:
            return high, []
    while high - low > 1:
        mid = (low + high) // 2
        if exceeded(mid):
            high = mid
        else:
            low = mid
    return low, exceeded(high)


def report(figures: list[tuple[str, int, int]], quiet: bool = False) -> int:
    exceeded = over(figures)
    if not quiet:
        for what, figure, quota in figures:
            if quota and not re.match(r"(nested stack \w+: )?alarm ", what):
                print(f"  {what}: {figure} of {quota}")
    for what, figure, quota in exceeded:
        print(f"quota exceeded: {what}: {figure}, above AWS's {quota}", file=sys.stderr)
    return 1 if exceeded else 0


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "check":
        template_path = Path(argv[1])
        body = template_path.read_bytes()
        template = json.loads(body)
        rest = argv[2:]
        children = None
        if "--children" in rest:
            at = rest.index("--children")
            children = read_children(Path(rest[at + 1]))
            rest = rest[:at] + rest[at + 2:]
        figures = check_stacks(template, len(body), children)
        for env_path in rest:
            if env_path.endswith(".list"):
                figures.append(check_dlq_list(Path(env_path).read_text(encoding="utf-8").strip()))
            else:
                figures.append(check_env(Path(env_path).stem, read_env_file(Path(env_path))))
        return report(figures, quiet="QUOTAS_QUIET" in __import__("os").environ)
    if len(argv) >= 2 and argv[0] == "ceiling":
        import argparse
        import tempfile

        parser = argparse.ArgumentParser(prog="quotas.py ceiling")
        parser.add_argument("resources_yaml", type=Path)
        parser.add_argument("--name-length", type=int, default=SQS_NAME)
        parser.add_argument("--sources", type=int, default=3)
        args = parser.parse_args(argv[1:])
        with tempfile.TemporaryDirectory() as work:
            count, exceeded = ceiling(args.resources_yaml, args.name_length, args.sources, Path(work))
        print(count)
        for what, figure, quota in exceeded:
            print(f"  at {count + 1} DLQs: {what}: {figure}, above {quota}", file=sys.stderr)
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

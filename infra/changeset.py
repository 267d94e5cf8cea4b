#!/usr/bin/env python3
"""CloudFormation change sets as make deploy and make plan show them (infra/lib.sh).

    changeset.py status DESCRIBED.json
        One line: STATUS<TAB>EXECUTION_STATUS<TAB>REASON of a DescribeChangeSet answer
        (the AWS CLI's JSON), and then the ARNs of the nested stacks' change sets, one a line.
    changeset.py show STACK DESCRIBED.json [NESTED.json...]
        Prints the change set readably on stdout: one line a change (action, logical id, type,
        whether CloudFormation replaces the resource), the nested stacks' changes indented under
        their stack. Exits 3 when a change replaces or removes a resource that holds data (a
        queue, a table, a bucket): each is named on a line `!! replaces ID (TYPE)` or
        `!! removes ID (TYPE)`.
    changeset.py resources TEMPLATE.json
        The resources a template would add, as `show` prints them (a stack that cannot have a
        change set yet: the wiring stack before the resources stack exists).
"""

from __future__ import annotations

import json
import sys

# Resources that hold messages, records or objects: replacing one moves the system to a new,
# empty one (the templates retain the old one, with whatever it held, outside the stack).
STATEFUL_TYPES = ("AWS::SQS::Queue", "AWS::DynamoDB::Table", "AWS::S3::Bucket")
RISKY = 3


def load(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def nested_change_sets(described: dict) -> list[str]:
    return [
        change["ResourceChange"]["ChangeSetId"]
        for change in described.get("Changes", [])
        if change.get("ResourceChange", {}).get("ChangeSetId")
    ]


def status(path: str) -> int:
    described = load(path)
    reason = " ".join(str(described.get("StatusReason") or "").split())
    print("\t".join((str(described.get("Status")), str(described.get("ExecutionStatus")), reason)))
    for arn in nested_change_sets(described):
        print(arn)
    return 0


def replacement(change: dict) -> str:
    """True, False or Conditional for a Modify (CloudFormation's answer); '' otherwise."""
    if change.get("Action") != "Modify":
        return ""
    return str(change.get("Replacement") or "?")


def lines(described: dict, nested: dict[str, dict], indent: str, risky: list[str], inside: str | None) -> list[str]:
    """The changes, one line each, nested stacks' under theirs; the `!!` lines into risky
    (naming the nested stack a change is INSIDE)."""
    out = []
    for entry in described.get("Changes", []):
        change = entry.get("ResourceChange") or {}
        action = change.get("Action", "?")
        logical = change.get("LogicalResourceId", "?")
        kind = change.get("ResourceType", "?")
        replaces = replacement(change)
        text = f"{indent}{action:<8}{logical:<40} {kind}"
        if replaces:
            text += f"  replacement {replaces}"
        out.append(text.rstrip())
        where = f"{logical} in {inside}" if inside else logical
        if kind in STATEFUL_TYPES:
            if action == "Remove":
                risky.append(f"!! removes {where} ({kind})")
            elif action == "Modify" and replaces in ("True", "Conditional"):
                risky.append(f"!! replaces {where} ({kind})"
                             + (" (conditionally)" if replaces == "Conditional" else ""))
        child = nested.get(change.get("ChangeSetId") or "")
        if child is not None:
            out.extend(lines(child, nested, indent + "    ", risky, child.get("StackName") or logical))
    return out


def show(stack: str, path: str, nested_paths: list[str]) -> int:
    described = load(path)
    nested = {}
    for nested_path in nested_paths:
        child = load(nested_path)
        nested[child.get("ChangeSetId", nested_path)] = child
    risky: list[str] = []
    body = lines(described, nested, "      ", risky, None)
    count = len(described.get("Changes", []))
    print(f"stack {stack}: {count} change{'' if count == 1 else 's'}")
    for line in body:
        print(line)
    for line in risky:
        print(line)
    return RISKY if risky else 0


def resources(path: str) -> int:
    template = load(path)
    for logical, resource in template.get("Resources", {}).items():
        text = f"      {'Add':<8}{logical:<40} {resource.get('Type', '?')}"
        if resource.get("Condition"):
            text += f"  (when {resource['Condition']})"
        print(text)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "status":
        return status(argv[1])
    if len(argv) >= 3 and argv[0] == "show":
        return show(argv[1], argv[2], argv[3:])
    if len(argv) == 2 and argv[0] == "resources":
        return resources(argv[1])
    sys.stderr.write(__doc__ or "")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

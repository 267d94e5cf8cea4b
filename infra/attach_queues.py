"""Attach mode's calls on the user's queues, made in one process for the whole fleet.

`python infra/attach_queues.py resolve FILE`
    Resolves the protected DLQs (PROTECT_DLQS, PROTECT_TAG) before anything is changed: writes
    NAME<TAB>ARN<TAB>SOURCE_ARNS<TAB>DLQ_KEY<TAB>SOURCE_KEYS lines to FILE and prints the DLQs'
    URLs, comma separated. Stops (exit 1) naming a queue that does not exist, an ARN of another
    region or account, a tag that selects nothing, this install's own poison queue, a KMS key the
    deploy cannot read. Warns about a retention that the archive threshold or an age alarm does
    not stay below.
`python infra/attach_queues.py tag TEMPLATE_JSON URL_PREFIX`
    Tags every queue the rendered attach template lists with this install's tag.
`python infra/attach_queues.py untag OLD_TEMPLATE_JSON [NEW_TEMPLATE_JSON]`
    Removes the tag from the queues OLD lists and NEW does not (all of them without NEW); a
    queue that is gone is skipped.

Settings come from the environment deploy.sh has loaded (AWS_REGION, ACCOUNT_ID, STACK_NAME,
ARCHIVE_AFTER_DAYS, DLQ_AGE_ALARM_SECONDS, DLQ_FINAL_AGE_ALARM_SECONDS). Why one process: each of
these was one AWS CLI call per queue, and each AWS CLI call starts a Python interpreter (about
half a second). At the ceiling (116 DLQs with three sources each) that was some 1,300 calls, ten
minutes before the first change; here the same calls share one client. The calls, their order and
the messages are the ones the AWS CLI made; the client is botocore, which the AWS CLI is built
on, so credentials, region, profiles and `AWS_ENDPOINT_URL`/`AWS_ENDPOINT_URL_SQS` resolve as
they do for the AWS CLI.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import botocore.session
from botocore.exceptions import BotoCoreError, ClientError

sys.path.insert(0, str(Path(__file__).resolve().parent))
import attach_template  # noqa: E402


class Refused(Exception):
    """A stop before any change: its lines are printed as deploy.sh's `die` prints them."""

    def __init__(self, *lines: str) -> None:
        super().__init__(lines[0])
        self.lines = lines


def say(text: str) -> None:
    print(f"==> {text}", file=sys.stderr)


def client(service: str):
    return botocore.session.get_session().create_client(service, region_name=os.environ["AWS_REGION"])


def said(error: Exception) -> str:
    return str(error).replace("\n", " ")


# ---------------------------------------------------------------- resolve
def key_arn(kms, queue: str, key: str | None) -> str:
    """The ARN of the customer managed KMS key that encrypts a queue (its KmsMasterKeyId: a key
    id, an alias or an ARN), which the roles must be granted; "" for a queue without SSE-KMS or
    under the AWS managed key alias/aws/sqs, whose key policy lets the account's principals use
    it through SQS."""
    if key in (None, "", "None", "alias/aws/sqs"):
        return ""
    try:
        meta = kms.describe_key(KeyId=key)["KeyMetadata"]
    except (ClientError, BotoCoreError) as e:
        raise Refused(
            f"queue {queue} is encrypted with the KMS key {key}, which this deploy cannot read (kms:DescribeKey).",
            "The re-driver needs that key (kms:Decrypt to receive, kms:GenerateDataKey to send) and would fail every drain.",
            "Let the deploying identity describe the key, or protect the queue from the key's account. Nothing was changed.",
            f"AWS CLI said: {said(e)}") from e
    return "" if meta.get("KeyManager") == "AWS" else meta["Arn"]


def warn_short_retention(sqs, name: str, url: str, retention: str | None) -> None:
    """A protected DLQ keeps each message for its MessageRetentionPeriod: an archive threshold or
    an age alarm not below it can never act before SQS deletes the message."""
    if not (retention or "").isdigit():
        return
    seconds = int(retention)
    try:
        tagged = sqs.list_queue_tags(QueueUrl=url).get("Tags", {}).get("redrive:archive-after-days")
    except (ClientError, BotoCoreError):
        tagged = None
    days = float(tagged) if tagged is not None and re.fullmatch(r"[0-9]+(\.[0-9]+)?", tagged) else None
    if days is not None:
        source = f"its tag redrive:archive-after-days={tagged}"
    else:
        days = float(os.environ["ARCHIVE_AFTER_DAYS"])
        source = f"ARCHIVE_AFTER_DAYS={os.environ['ARCHIVE_AFTER_DAYS']}"
    threshold = int(days * 86400)
    if threshold >= seconds:
        print(f"\nWARNING: {name} keeps messages {seconds} s (MessageRetentionPeriod), not above the archive "
              f"threshold of {threshold} s ({source}):", file=sys.stderr)
        print("         the archiver leaves this DLQ alone (its DlqLeftAlone metric pages) and SQS deletes its "
              "messages", file=sys.stderr)
        print("         unarchived. Raise its retention (aws sqs set-queue-attributes --attributes "
              "MessageRetentionPeriod=1209600)", file=sys.stderr)
        print(f"         or tag it redrive:archive-after-days below {'%g' % (seconds / 86400)} days.", file=sys.stderr)
    for alarm in ("DLQ_AGE_ALARM_SECONDS", "DLQ_FINAL_AGE_ALARM_SECONDS"):
        if int(os.environ[alarm]) >= seconds:
            print(f"\nWARNING: {name} keeps messages {seconds} s (MessageRetentionPeriod), not above "
                  f"{alarm}={os.environ[alarm]}:", file=sys.stderr)
            print("         that age alarm can only fire after SQS has deleted the message. Raise the queue's "
                  "retention.", file=sys.stderr)


def selected_names(sqs) -> list[str]:
    """The queue names PROTECT_DLQS lists and PROTECT_TAG selects, in that order."""
    region, account = os.environ["AWS_REGION"], os.environ["ACCOUNT_ID"]
    names = []
    for item in filter(None, os.environ.get("PROTECT_DLQS", "").split(",")):
        if item.startswith("arn:"):
            _, _, _, item_region, item_account, name = item.split(":", 5)
            if item_region != region or item_account != account:
                raise Refused(f"PROTECT_DLQS names {item}, a queue of {item_account} in {item_region}; this deploy is "
                              f"{account} in {region}.",
                              "One install protects the queues of its own account and region. Nothing was changed.")
        else:
            name = item
        names.append(name)
    tag = os.environ.get("PROTECT_TAG", "")
    if tag:
        key, _, value = tag.partition("=")
        try:
            urls = [u for page in sqs.get_paginator("list_queues").paginate() for u in page.get("QueueUrls", [])]
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"could not list the queues of {region} (sqs:ListQueues) for PROTECT_TAG. "
                          "Nothing was changed.", f"AWS CLI said: {said(e)}") from e
        tagged = 0
        for url in urls:
            try:
                tags = sqs.list_queue_tags(QueueUrl=url).get("Tags", {})
            except (ClientError, BotoCoreError) as e:
                raise Refused(f"could not read the tags of {url} (sqs:ListQueueTags) for PROTECT_TAG. "
                              "Nothing was changed.", f"AWS CLI said: {said(e)}") from e
            if tags.get(key) == value:
                names.append(url.rsplit("/", 1)[1])
                tagged += 1
        if not tagged:
            raise Refused(f"PROTECT_TAG={tag} selects no queue in {region}.",
                          f"Tag your DLQs first, e.g. aws sqs tag-queue --queue-url URL --tags "
                          f"'{{\"{key}\":\"{value}\"}}'. Nothing was changed.")
    return names


def resolve(out: Path) -> str:
    sqs, kms = client("sqs"), client("kms")
    region, account, stack = os.environ["AWS_REGION"], os.environ["ACCOUNT_ID"], os.environ["STACK_NAME"]
    lines, urls, seen = [], [], set()
    for name in selected_names(sqs):
        if name in seen:
            continue
        seen.add(name)
        if name == f"{stack}-poison":
            raise Refused(f"PROTECT_DLQS/PROTECT_TAG selects {name}, this install's own poison queue; it cannot "
                          "protect itself.", "Nothing was changed.")
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"queue {name} does not exist in {region} (account {account}): PROTECT_DLQS/PROTECT_TAG "
                          "names it.",
                          f"Check the name (aws sqs list-queues --queue-name-prefix {name[:20]}). Nothing was changed.") from e
        try:
            attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
                "QueueArn", "KmsMasterKeyId", "MessageRetentionPeriod"])["Attributes"]
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"could not read the ARN of {url}. Nothing was changed.", f"AWS CLI said: {said(e)}") from e
        arn = attrs["QueueArn"]
        dlq_key = key_arn(kms, name, attrs.get("KmsMasterKeyId"))
        warn_short_retention(sqs, name, url, attrs.get("MessageRetentionPeriod"))
        try:
            sources_urls = [u for page in sqs.get_paginator("list_dead_letter_source_queues").paginate(QueueUrl=url)
                            for u in page.get("queueUrls", [])]
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"could not list the source queues of {name} (sqs:ListDeadLetterSourceQueues). "
                          "Nothing was changed.", f"AWS CLI said: {said(e)}") from e
        sources, source_keys = [], []
        for src in sources_urls:
            try:
                src_attrs = sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["QueueArn", "KmsMasterKeyId"])
            except (ClientError, BotoCoreError) as e:
                raise Refused(f"could not read the ARN of {src}. Nothing was changed.", f"AWS CLI said: {said(e)}") from e
            src_arn = src_attrs.get("Attributes", {}).get("QueueArn")
            if not src_arn:
                raise Refused(f"could not read the ARN of {src}. Nothing was changed.")
            sources.append(src_arn)
            src_key = key_arn(kms, src.rsplit("/", 1)[1], src_attrs["Attributes"].get("KmsMasterKeyId"))
            if src_key:
                source_keys.append(src_key)
        if not sources:
            print(f"\nWARNING: {name} is no queue's DLQ (ListDeadLetterSourceQueues is empty): protected, but a "
                  "message", file=sys.stderr)
            print("         with no known source is isolated in the poison queue (reason unknown-source), never "
                  "guessed.", file=sys.stderr)
        lines.append("\t".join([name, arn, ",".join(sources), dlq_key, ",".join(source_keys)]))
        urls.append(url)
        say(f"protecting {name} ({arn})" + (f", sources {', '.join(sources)}" if sources else ""))
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    say(f"{len(urls)} DLQs protected")
    return ",".join(urls)


# ---------------------------------------------------------------- the install's tag
def tag(template: Path, url_prefix: str) -> None:
    """Tags every queue the template lists; the roles grant on this tag only."""
    sqs = client("sqs")
    listed = attach_template.tagged_queues(template)
    for key, name, value in listed:
        try:
            sqs.tag_queue(QueueUrl=f"{url_prefix}/{name}", Tags={key: value})
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"could not tag {name} with {key}={value} (sqs:TagQueue): the roles grant on this tag only.",
                          "Grant sqs:TagQueue to the deploying identity and run make deploy again.",
                          f"AWS CLI said: {said(e)}") from e
    if listed:
        say(f"tagged {len(listed)} queues {listed[0][0]} (dlq, source or dlq+source): the roles grant on it")


def untag(old: Path, new: Path | None) -> None:
    """Removes this install's tag from the queues OLD lists and NEW does not."""
    sqs = client("sqs")
    kept = {name for _, name, _ in attach_template.tagged_queues(new)} if new else set()
    for key, name, _ in attach_template.tagged_queues(old):
        if name in kept:
            continue
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except (ClientError, BotoCoreError):
            continue  # gone: nothing carries the tag
        try:
            sqs.untag_queue(QueueUrl=url, TagKeys=[key])
        except (ClientError, BotoCoreError) as e:
            raise Refused(f"could not remove the tag {key} from {name} (sqs:UntagQueue): this install's roles still "
                          "grant on it.", f"Remove it by hand: aws sqs untag-queue --queue-url {url} --tag-keys {key}",
                          f"AWS CLI said: {said(e)}") from e
        say(f"{name}: no longer protected, tag {key} removed")


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "resolve":
            print(resolve(Path(argv[1])))
        elif len(argv) == 3 and argv[0] == "tag":
            tag(Path(argv[1]), argv[2])
        elif len(argv) in (2, 3) and argv[0] == "untag":
            untag(Path(argv[1]), Path(argv[2]) if len(argv) == 3 else None)
        else:
            print(__doc__.split("\n\n")[1], file=sys.stderr)
            return 2
    except Refused as refused:
        print(f"\nERROR: {refused.lines[0]}", file=sys.stderr)
        for line in refused.lines[1:]:
            print(f"       {line}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

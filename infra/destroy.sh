#!/usr/bin/env bash
# make destroy: removes everything make deploy created, in the reverse order:
# the wiring stack, both functions (cargo lambda deploy made them, so CloudFormation does not
# know them), the resources stack (topics, alarms, dashboard, log groups, roles), then the
# queues and the tables, which that stack retains (DeletionPolicy Retain). Refuses, before
# changing anything, while the source queue (unconsumed messages), the DLQ or the poison queue
# (parked messages) holds messages, or the circuit table an operator's override, unless
# FORCE=1. Keeps the archive bucket. Turns the stacks' termination protection off first.
# Attach mode (PROTECT_DLQS / PROTECT_TAG): the queues are those the resources stack created
# (the poison queue); the protected DLQs and their sources are the user's: never read, checked
# or deleted here; only this install's tag (redrive-install:STACK_NAME) is removed from them.
# Re-runnable: what is already gone is skipped.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

prepare_aws
RESOURCES=$(RESOURCES_STACK)
WIRING=$(WIRING_STACK)
check_stack_usable "$WIRING" destroy WIRING_STATUS
check_stack_usable "$RESOURCES" destroy RESOURCES_STATUS

# ---------------------------------------------------------------- parked messages
queue_url() { # NAME: its URL, or nothing when it does not exist
    aws_ sqs get-queue-url --queue-name "$1" --query QueueUrl --output text 2>/dev/null || true
}
queue_depth() { # URL: visible + in flight + delayed
    aws_ sqs get-queue-attributes --queue-url "$1" --attribute-names ApproximateNumberOfMessages \
        ApproximateNumberOfMessagesNotVisible ApproximateNumberOfMessagesDelayed \
        --query 'Attributes.[ApproximateNumberOfMessages,ApproximateNumberOfMessagesNotVisible,ApproximateNumberOfMessagesDelayed]' \
        --output text | awk '{ print $1 + $2 + $3 }'
}
# The queues this install created: those the resources stack lists (it retains them), found
# again by name in case one is gone already. Without the stack (a destroy run again after it was
# deleted), the names the template gives them: the poison queue only in attach mode.
stack_queue() { # LOGICAL_ID: from STACK_QUEUES (LOGICAL_ID PHYSICAL_ID lines)
    local physical
    physical=$(awk -v id="$1" '$1 == id { print $2; exit }' <<<"$STACK_QUEUES")
    case $physical in '' | None) return 0 ;; esac
    queue_url "${physical##*/}"
}
if [ "$RESOURCES_STATUS" != NONE ]; then
    STACK_QUEUES=$(aws_ cloudformation list-stack-resources --stack-name "$RESOURCES" \
        --query "StackResourceSummaries[?ResourceType=='AWS::SQS::Queue'].[LogicalResourceId,PhysicalResourceId]" \
        --output text 2>/dev/null) || STACK_QUEUES=
    SOURCE_URL=$(stack_queue SourceQueue)
    DLQ_URL=$(stack_queue DeadLetterQueue)
    POISON_URL=$(stack_queue PoisonQueue)
elif attach_mode; then
    SOURCE_URL=
    DLQ_URL=
    POISON_URL=$(queue_url "$STACK_NAME-poison")
else
    SOURCE_URL=$(queue_url "$STACK_NAME-source")
    DLQ_URL=$(queue_url "$STACK_NAME-dlq")
    POISON_URL=$(queue_url "$STACK_NAME-poison")
fi
CIRCUIT_TABLE=$STACK_NAME-circuit
# Items without an operator (the protected DLQs' list of attach mode) are no override.
circuit_overrides() { # the circuit records whose operator override is not auto (0 when no table)
    if aws_ dynamodb describe-table --table-name "$CIRCUIT_TABLE" >/dev/null 2>&1; then
        aws_ dynamodb scan --table-name "$CIRCUIT_TABLE" --select COUNT --filter-expression "attribute_exists(#o) AND #o <> :auto" \
            --expression-attribute-names '{"#o":"operator"}' --expression-attribute-values '{":auto":{"S":"auto"}}' \
            --query Count --output text
    else
        echo 0
    fi
}
parked=''
unconsumed=''
for url in $DLQ_URL $POISON_URL; do
    depth=$(queue_depth "$url") || die "could not read the depth of $url. Nothing was changed."
    if [ "$depth" != 0 ]; then parked+="${parked:+, }$url holds $depth"; fi
done
if [ -n "$SOURCE_URL" ]; then
    depth=$(queue_depth "$SOURCE_URL") || die "could not read the depth of $SOURCE_URL. Nothing was changed."
    if [ "$depth" != 0 ]; then unconsumed="$SOURCE_URL holds $depth"; fi
fi
overrides=$(circuit_overrides) || die "could not read the circuit table $CIRCUIT_TABLE. Nothing was changed."
held=${parked:+parked messages ($parked); }${unconsumed:+unconsumed messages ($unconsumed); }
if [ "$overrides" != 0 ]; then held+="operator circuit overrides ($overrides in $CIRCUIT_TABLE); "; fi
if [ -n "$held" ]; then
    if [ "${FORCE-}" = 1 ]; then
        say "FORCE=1: deleting ${held%; }"
    else
        die "refusing to destroy: ${held%; }." \
            "Parked messages are failed deliveries nobody has handled: inspect them with 'redrive peek', replay" \
            "('redrive replay') or discard ('redrive discard') them. Unconsumed messages are still on their way" \
            "to the consumer: let it finish. An override is a person's decision: 'redrive circuit status --dlq URL'." \
            "To delete them by hand: aws sqs purge-queue --queue-url URL; aws dynamodb delete-item --table-name" \
            "$CIRCUIT_TABLE --key '{\"queue\":{\"S\":\"DLQ_URL\"}}'. Or FORCE=1 make destroy deletes them" \
            "with everything else. Nothing was changed."
    fi
fi

delete_stack() { # STACK STATUS (as check_stack_usable read it)
    local stack=$1
    if [ "$2" = NONE ]; then
        say "stack $stack does not exist"
        return 0
    fi
    # A stack that deploy created is protected: turning protection off is one idempotent call. A
    # stack in another state (a failed creation, which deploy never protected) is asked first.
    case $2 in
        CREATE_COMPLETE | UPDATE_COMPLETE | UPDATE_ROLLBACK_COMPLETE | IMPORT_COMPLETE | IMPORT_ROLLBACK_COMPLETE)
            aws_ cloudformation update-termination-protection --no-enable-termination-protection --stack-name "$stack" >/dev/null
            ;;
        *)
            if [ "$(aws_ cloudformation describe-stacks --stack-name "$stack" --query 'Stacks[0].EnableTerminationProtection' --output text)" = True ]; then
                aws_ cloudformation update-termination-protection --no-enable-termination-protection --stack-name "$stack" >/dev/null
            fi
            ;;
    esac
    say "deleting stack $stack"
    aws_ cloudformation delete-stack --stack-name "$stack"
    aws_ cloudformation wait stack-delete-complete --stack-name "$stack" || {
        explain_delete_failure "$stack"
    }
}

explain_delete_failure() {
    local events
    events=$(aws_ cloudformation describe-stack-events --stack-name "$1" \
        --query "StackEvents[?ResourceStatus=='DELETE_FAILED'].[LogicalResourceId,ResourceStatusReason]" \
        --output text 2>/dev/null | head -n 10 || true)
    printf '\nCloudFormation reported:\n%s\n' "${events:-  (no failed events)}" >&2
    die "deleting stack $1 failed." \
        "Remove or fix what is listed above (e.g. a resource changed by hand), then run make destroy again."
}

delete_function() {
    local name=$1 out
    if out=$(aws_ lambda delete-function --function-name "$name" 2>&1); then
        say "deleted function $name"
    elif grep -q 'ResourceNotFoundException' <<<"$out"; then
        say "function $name does not exist"
    else
        die "could not delete function $name." "AWS CLI said: $(tr '\n' ' ' <<<"$out")"
    fi
}

delete_stack "$WIRING" "$WIRING_STATUS"
# The names are those the resources template gives (Outputs RedriverFunctionName and
# ConsumerFunctionName); derived here too so that a half-created stack is still cleaned up.
delete_function "$STACK_NAME-redriver"
delete_function "$STACK_NAME-consumer"
delete_function "$STACK_NAME-archiver"
delete_function "$STACK_NAME-triage-widget"
delete_function "$STACK_NAME-triage-action"
delete_function "$STACK_NAME-workflow-tasks" # the Step Functions task function, when deployed
# Attach mode: this install's tag comes off the protected queues (the stack's template lists
# them), before the stack that lists them goes; the queues themselves are left as they are.
if [ "$RESOURCES_STATUS" != NONE ]; then
    PREVIOUS_TEMPLATE=$(mktemp)
    trap 'rm -f "$PREVIOUS_TEMPLATE"' EXIT
    stack_template "$RESOURCES" "$PREVIOUS_TEMPLATE"
    untag_queues "$PREVIOUS_TEMPLATE"
fi
delete_stack "$RESOURCES" "$RESOURCES_STATUS"
# Retained by the stack (DeletionPolicy Retain): deleted here, after the checks above.
for url in $SOURCE_URL $DLQ_URL $POISON_URL; do
    aws_ sqs delete-queue --queue-url "$url"
    say "deleted queue $url"
done
for table in "$STACK_NAME-idempotency" "$CIRCUIT_TABLE"; do
    if aws_ dynamodb describe-table --table-name "$table" >/dev/null 2>&1; then
        aws_ dynamodb delete-table --table-name "$table" >/dev/null
        aws_ dynamodb wait table-not-exists --table-name "$table"
        say "deleted table $table"
    fi
done
say "redrive stack $STACK_NAME is removed from $AWS_REGION"
# The archive bucket (DeletionPolicy Retain) is kept: archived messages are deleted by a person.
say "the archive bucket, if any, is kept (its name starts with $(tr '[:upper:]' '[:lower:]' <<<"$STACK_NAME")-archivebucket); empty and delete it by hand once its messages are no longer needed"
if [ -n "$SOURCE_URL$DLQ_URL$POISON_URL" ]; then
    say "SQS refuses these queue names for 60 s; make deploy waits and retries if it meets that."
fi

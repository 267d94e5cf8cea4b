#!/usr/bin/env bash
# make destroy: removes everything make deploy created, in the reverse order:
# the wiring stack, both functions (cargo lambda deploy made them, so CloudFormation does not
# know them), then the resources stack (queues with any messages still in them, the table,
# topics, alarms, log groups, roles). Re-runnable: what is already gone is skipped.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

load_config
find_tools
validate_common_config
resolve_region
check_credentials
RESOURCES=$(RESOURCES_STACK)
WIRING=$(WIRING_STACK)
check_stack_usable "$WIRING" destroy
check_stack_usable "$RESOURCES" destroy

delete_stack() {
    local stack=$1
    if [ "$(stack_status "$stack")" = NONE ]; then
        say "stack $stack does not exist"
        return 0
    fi
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

delete_stack "$WIRING"
# The names are those the resources template gives (Outputs RedriverFunctionName and
# ConsumerFunctionName); derived here too so that a half-created stack is still cleaned up.
delete_function "$STACK_NAME-redriver"
delete_function "$STACK_NAME-consumer"
delete_stack "$RESOURCES"
say "redrive stack $STACK_NAME is removed from $AWS_REGION"

#!/usr/bin/env bash
# make rollback: undoes the last make deploy of the functions. Every deploy publishes a version
# of each function and moves its alias `live` to it, recording the version it left in the
# alias's description (previous=N); the SNS subscription, the schedule and the SQS event source
# mapping all invoke `live`. This points `live` back at that previous version, for each function
# whose version the last deploy changed. Stacks, queues and settings outside the functions are
# left as they are. A second rollback in a row has nothing recorded to go back to and says so.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

prepare_aws

rolled_back=0
rollback_function() { # FUNCTION_NAME
    local name=$1 current description previous
    if ! current=$(aws_ lambda get-alias --function-name "$name" --name live --query FunctionVersion --output text 2>/dev/null); then
        say "function $name has no alias live (not deployed by make deploy?): skipped"
        return 0
    fi
    description=$(aws_ lambda get-alias --function-name "$name" --name live --query Description --output text)
    case $description in
        previous=[0-9]*) previous=${description#previous=} ;;
        *)
            say "function $name: live -> version $current; no earlier version recorded ($description)"
            return 0
            ;;
    esac
    if [ "$previous" = "$current" ]; then
        say "function $name: the last deploy did not change it (version $current): left as is"
        return 0
    fi
    aws_ lambda update-alias --function-name "$name" --name live --function-version "$previous" \
        --description "rolled-back-from=$current" >/dev/null
    say "function $name: alias live -> version $previous (was $current)"
    rolled_back=$((rolled_back + 1))
}

rollback_function "$STACK_NAME-redriver"
rollback_function "$STACK_NAME-consumer"
rollback_function "$STACK_NAME-archiver"
rollback_function "$STACK_NAME-triage-widget"
rollback_function "$STACK_NAME-triage-action"
rollback_function "$STACK_NAME-workflow-tasks" # the Step Functions task function, when deployed
if [ "$rolled_back" = 0 ]; then
    die "nothing to roll back: no function has a previous version recorded by the last make deploy." \
        "To point an alias at a version by hand:" \
        "  aws lambda list-versions-by-function --region $AWS_REGION --function-name $STACK_NAME-redriver" \
        "  aws lambda update-alias --region $AWS_REGION --function-name $STACK_NAME-redriver --name live --function-version N"
fi
say "rolled back $rolled_back function(s); make deploy publishes the code of this checkout again"

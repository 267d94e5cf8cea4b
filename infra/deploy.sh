#!/usr/bin/env bash
# OUT_* variables are set by read_outputs (printf -v), which shellcheck cannot follow.
# shellcheck disable=SC2154
# make deploy: everything from a clone to a running system, re-runnable.
#
#   1. checks (nothing is changed if one fails): settings, tools, region, credentials, stacks'
#      states
#   2. cargo lambda build of the functions, --profile BUILD_PROFILE for LAMBDA_ARCH
#      (release, arm64 by default; unless SKIP_BUILD=true)
#   3. stack STACK_NAME (infra/templates/resources.yaml): queues, table, topics, alarms, log
#      groups, roles
#   4. cargo lambda deploy of the functions (re-driver, consumer, archiver, the triage console's
#      widget and action functions), with the roles, names and environment read from
#      that stack's outputs and infra/redrive.env (the only place function settings live),
#      X-Ray tracing mode TRACING (the stack grants the roles X-Ray writes when it is Active);
#      each gets a new version and its alias `live` moves to it (make rollback moves it back);
#      the re-driver gets reserved concurrency 1; the dashboard's triage widgets (one per DLQ
#      and the poison queue) call the widget function's alias `live`, their buttons the action
#      function's
#   5. stack STACK_NAME-wiring (infra/templates/wiring.yaml): SNS subscription and permission,
#      SQS event source mapping, safety-net schedule, all on the `live` aliases
#
# ORCHESTRATOR=stepfunctions adds the task function STACK_NAME-workflow-tasks (binary
# redrive-workflow, alias live) in step 4, and in step 5 the state machine (definition
# infra/statemachine/redrive.asl.json) with the EventBridge rule on the DLQ alarm instead of the
# SNS subscription; ORCHESTRATOR=lambda (the default) removes them again.
#
# Attach mode (PROTECT_DLQS or PROTECT_TAG set): step 1 also resolves the DLQs to protect (names,
# ARNs or a tag; each DLQ's sources from ListDeadLetterSourceQueues) and stops naming a queue
# that does not exist; step 3 deploys infra/attach_template.py's rendering of resources.yaml
# (none of the user's queues; roles naming exactly those DLQs and sources; alarms per DLQ);
# step 4 deploys the re-driver (DLQ_URLS, no SOURCE_QUEUE_URL) and the archiver, not the
# consumer (CONSUMER=none); step 5 wires no event source mapping.
#
# Each stack changes through a CloudFormation change set that is printed before it is executed
# (a stack already up to date prints "no changes"); one that would replace or remove a queue, a
# table or a bucket stops the deploy unless ALLOW_REPLACEMENT=true.
#
# make plan (infra/deploy.sh --plan): step 1, then both stacks' change sets printed and deleted
# again, and which functions step 4 would create or update; nothing is built or changed.
#
# Settings: infra/redrive.env, overridable from the environment. See infra/README.md.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PLAN=false
case ${1-} in
    --plan) PLAN=true ;;
    '') ;;
    *) die "usage: infra/deploy.sh [--plan]" ;;
esac

# ---------------------------------------------------------------- 1. checks
load_config
find_tools
validate_deploy_config
ALLOW_REPLACEMENT=${ALLOW_REPLACEMENT:-false}
need_bool ALLOW_REPLACEMENT
# make plan builds nothing: it needs no cargo-lambda.
if [ "$PLAN" = false ]; then find_cargo_lambda; fi
resolve_region
check_credentials
RESOURCES=$(RESOURCES_STACK)
WIRING=$(WIRING_STACK)
check_stack_usable "$RESOURCES" deploy RESOURCES_STATUS
check_stack_usable "$WIRING" deploy WIRING_STATUS

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# ---- attach mode: the protected DLQs, resolved before anything is changed.
if attach_mode; then
    # An install that created its own queues keeps them: its stack's queues are retained, and
    # switching would orphan them with their messages.
    if [ "$RESOURCES_STATUS" != NONE ] &&
        aws_ cloudformation describe-stacks --stack-name "$RESOURCES" \
            --query "Stacks[0].Outputs[?OutputKey=='SourceQueueUrl'].OutputValue" --output text | grep -q .; then
        die "stack $RESOURCES created its own source queue and DLQ; it cannot switch to PROTECT_DLQS/PROTECT_TAG in place." \
            "Deploy attach mode under another STACK_NAME, or make destroy this one first. Nothing was changed."
    fi
    resolve_protected_dlqs "$WORK/dlqs.tsv"
    # The template the stack was deployed with: the queues its roles grant on by tag (untagged
    # once this deploy is done when no longer protected) and which nested stack holds each
    # DLQ's alarms (kept).
    stack_template "$RESOURCES" "$WORK/resources.previous.json"
fi

# ---- quotas: both templates and the functions' environments as this deploy will send them,
# every stack output at its longest, checked against AWS's quotas before anything is changed
# (infra/quotas.py; IAM's policy sizes, Lambda's 4 KB of environment, CloudFormation's limits).
mkdir -p "$WORK/precheck"
if attach_mode; then
    "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_template.py" "$INFRA_DIR/templates/resources.yaml" \
        "$WORK/dlqs.tsv" "$WORK/precheck/resources.json" --stack "$STACK_NAME" --quota-check \
        --previous "$WORK/resources.previous.json" --children "$WORK/precheck/alarm-stacks" ||
        die "could not render the attach-mode template (see above). Nothing was changed."
else
    template_body "$INFRA_DIR/templates/resources.yaml" "$WORK/precheck/resources.json"
fi
render_wiring_template "$INFRA_DIR/templates/wiring.yaml" "$INFRA_DIR/statemachine/redrive.asl.json" "$WORK/precheck/wiring.yaml"
template_body "$WORK/precheck/wiring.yaml" "$WORK/precheck/wiring.json"
(
    longest_outputs
    write_redriver_env "$WORK/precheck/redriver.env"
    write_archiver_env "$WORK/precheck/archiver.env"
    write_triage_console_env "$WORK/precheck/triage-console.env"
)
for template in resources wiring; do
    envs=()
    [ "$template" = resources ] && envs=("$WORK/precheck/redriver.env" "$WORK/precheck/archiver.env"
        "$WORK/precheck/triage-console.env")
    if [ "$template" = resources ] && attach_mode; then
        printf '%s' "$PROTECTED_DLQ_URLS" >"$WORK/precheck/dlq-urls.list"
        envs+=("$WORK/precheck/dlq-urls.list" --children "$WORK/precheck/alarm-stacks")
    fi
    QUOTAS_QUIET=1 "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/quotas.py" check \
        "$WORK/precheck/$template.json" ${envs[@]+"${envs[@]}"} ||
        die "this deploy would exceed an AWS quota (above)." \
            "$(if attach_mode; then printf '%s' "Protect fewer DLQs per install (split PROTECT_DLQS or PROTECT_TAG over two STACK_NAMEs); infra/README.md, 'How many DLQs'."; fi)" \
            "Nothing was changed."
done

# The resources stack's parameters (step 3).
write_params "$WORK/resources.json" \
    "MaxReceiveCount=$MAX_RECEIVE_COUNT" \
    "ConsumerTimeoutSeconds=$CONSUMER_TIMEOUT_SECONDS" \
    "SourceQueueRetentionSeconds=$SOURCE_QUEUE_RETENTION_SECONDS" \
    "SourceMaximumMessageSize=$SOURCE_MAXIMUM_MESSAGE_SIZE" \
    "SourceAgeAlarmSeconds=$SOURCE_AGE_ALARM_SECONDS" \
    "DlqAgeAlarmSeconds=$DLQ_AGE_ALARM_SECONDS" \
    "DlqFinalAgeAlarmSeconds=$DLQ_FINAL_AGE_ALARM_SECONDS" \
    "PoisonAgeAlarmSeconds=$POISON_AGE_ALARM_SECONDS" \
    "PoisonReminderHourUtc=$POISON_REMINDER_HOUR_UTC" \
    "MetricNamespace=$METRIC_NAMESPACE" \
    "AlertEmail=$ALERT_EMAIL" \
    "LogRetentionDays=$LOG_RETENTION_DAYS" \
    "ArchivePrefix=$ARCHIVE_PREFIX" \
    "ArchiveNoncurrentVersionDays=$ARCHIVE_NONCURRENT_VERSION_DAYS" \
    "ArchiveInfrequentAccessDays=$ARCHIVE_INFREQUENT_ACCESS_DAYS" \
    "ArchiveDlq=$ARCHIVE_DLQ" \
    "ArchiveAgeAlarmSeconds=$(archive_age_alarm_seconds)" \
    "ArchiveReaderArns=$ARCHIVE_READER_ARNS" \
    "ArchiveKmsKeyArn=$ARCHIVE_KMS_KEY_ARN" \
    "Tracing=$TRACING" \
    "Orchestrator=$ORCHESTRATOR"

# The wiring stack's parameters (step 5), from the resources stack's outputs (OUT_*).
write_wiring_params() { # FILE
    write_params "$1" \
        "RedriverFunctionName=$OUT_RedriverFunctionName" \
        "ConsumerFunctionName=${OUT_ConsumerFunctionName-}" \
        "TriggerTopicArn=$OUT_TriggerTopicArn" \
        "SourceQueueArn=${OUT_SourceQueueArn-}" \
        "BatchSize=$BATCH_SIZE" \
        "MaximumBatchingWindowSeconds=$MAX_BATCHING_WINDOW_SECONDS" \
        "MaximumConcurrency=$MAX_CONCURRENCY" \
        "EnableSchedule=$ENABLE_SCHEDULE" \
        "ScheduleExpression=$SCHEDULE_EXPRESSION" \
        "ArchiverFunctionName=$OUT_ArchiverFunctionName" \
        "ArchiveScheduleExpression=$ARCHIVE_SCHEDULE_EXPRESSION" \
        "Orchestrator=$ORCHESTRATOR" \
        "WorkflowFunctionName=${OUT_WorkflowFunctionName-}" \
        "StateMachineName=${OUT_StateMachineName-}" \
        "StateMachineLogGroupArn=${OUT_StateMachineLogGroupArn-}" \
        "TriggerAlarmName=${OUT_WorkflowTriggerAlarmName-}" \
        "WorkflowLogLevel=${WORKFLOW_LOG_LEVEL:-ALL}"
}

# Attach mode's resources template as step 3 deploys it ($WORK/resources.attach.json), each
# nested stack's template of per-DLQ alarms in $WORK/alarm-stacks, their URLs under
# NESTED_TEMPLATE_PREFIX in the template bucket (set here); make plan renders the same.
render_attach_stacks() {
    NESTED_TEMPLATE_PREFIX=$(nested_template_prefix "$RESOURCES")
    "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_template.py" "$INFRA_DIR/templates/resources.yaml" \
        "$WORK/dlqs.tsv" "$WORK/resources.attach.json" "$WORK/resources.json" --stack "$STACK_NAME" \
        --previous "$WORK/resources.previous.json" --children "$WORK/alarm-stacks" \
        --child-url-prefix "$NESTED_TEMPLATE_PREFIX" ||
        die "could not render the attach-mode template (see above). Nothing was changed."
}

# ---------------------------------------------------------------- make plan
# Both stacks' change sets, shown and deleted again, and the functions deploy would create or
# update (read with GetFunction). Nothing is built, tagged, created or changed; a template above
# the TemplateBody limit passes through the template bucket as in a deploy, and is deleted again.
if [ "$PLAN" = true ]; then
    say "planning stacks $RESOURCES and $WIRING in $AWS_REGION (account $ACCOUNT_ID): change sets shown, then deleted; nothing is changed"
    if attach_mode; then
        # As step 3 renders it, with the nested stacks' templates in the template bucket for the
        # change set to read (and deleted again).
        render_attach_stacks
        if "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_template.py" has-inline-alarms \
            "$WORK/resources.previous.json"; then
            printf '%s\n' "(stack $RESOURCES holds the per-DLQ alarms itself: deploy first removes them, then adds the nested stacks; below, both as one change set)"
        fi
        upload_nested_templates "$WORK/alarm-stacks" "$NESTED_TEMPLATE_PREFIX"
        plan_stack "$RESOURCES" "$WORK/resources.attach.json" "$WORK/resources.json" "$RESOURCES_STATUS"
        discard_nested_templates "$WORK/alarm-stacks" "$NESTED_TEMPLATE_PREFIX"
    else
        plan_stack "$RESOURCES" "$INFRA_DIR/templates/resources.yaml" "$WORK/resources.json" "$RESOURCES_STATUS"
    fi
    resources_outcome=$CHANGE_SET_OUTCOME
    if [ "$RESOURCES_STATUS" != NONE ]; then read_outputs "$RESOURCES"; fi
    # The functions, by the names the resources stack gives them (STACK_NAME-<function>).
    functions=("${OUT_RedriverFunctionName:-$STACK_NAME-redriver}")
    if [ "$CONSUMER" = http ]; then functions+=("${OUT_ConsumerFunctionName:-$STACK_NAME-consumer}"); fi
    functions+=("${OUT_ArchiverFunctionName:-$STACK_NAME-archiver}" "${OUT_TriageActionFunctionName:-$STACK_NAME-triage-action}"
        "${OUT_TriageWidgetFunctionName:-$STACK_NAME-triage-widget}")
    if [ "$ORCHESTRATOR" = stepfunctions ]; then functions+=("${OUT_WorkflowFunctionName:-$STACK_NAME-workflow-tasks}"); fi
    printf 'functions:\n'
    for name in ${functions[@]+"${functions[@]}"}; do
        if aws_ lambda get-function --function-name "$name" >/dev/null 2>&1; then
            printf '      %-8s%s  (code and configuration; alias live moves to a new version)\n' update "$name"
        else
            printf '      %-8s%s\n' create "$name"
        fi
    done
    if [ "$ORCHESTRATOR" = lambda ] && aws_ lambda get-function --function-name "$STACK_NAME-workflow-tasks" >/dev/null 2>&1; then
        printf '      %-8s%s  (ORCHESTRATOR=lambda)\n' delete "$STACK_NAME-workflow-tasks"
    fi
    if [ "$RESOURCES_STATUS" = NONE ] || [ -z "${OUT_RedriverFunctionName-}" ]; then
        printf 'stack %s: created after stack %s and the functions (its parameters are their names and outputs); its template adds:\n' \
            "$WIRING" "$RESOURCES"
        changeset_py resources "$WORK/precheck/wiring.json"
    else
        if [ "$resources_outcome" != none ]; then
            printf '%s\n' "(stack $WIRING's parameters below are stack $RESOURCES's outputs as they are now, before the change above)"
        fi
        write_wiring_params "$WORK/wiring.json"
        render_wiring_template "$INFRA_DIR/templates/wiring.yaml" "$INFRA_DIR/statemachine/redrive.asl.json" "$WORK/wiring.yaml"
        plan_stack "$WIRING" "$WORK/wiring.yaml" "$WORK/wiring.json" "$WIRING_STATUS"
    fi
    say "make plan changed nothing; make deploy applies these change sets (and builds and deploys the functions)"
    exit 0
fi

case $LAMBDA_DIR in /*) ;; *) LAMBDA_DIR=$REPO_DIR/$LAMBDA_DIR ;; esac
say "deploying stack $RESOURCES to $AWS_REGION (account $ACCOUNT_ID)"

# ---------------------------------------------------------------- 2. build
lambda_bins=(redriver archiver triage-widget triage-action)
if [ "$CONSUMER" = http ]; then lambda_bins+=(consumer); fi
if [ "$ORCHESTRATOR" = stepfunctions ]; then lambda_bins+=(redrive-workflow); fi
if [ -n "${ARTIFACTS-}" ]; then
    use_artifacts "$LAMBDA_DIR" ${lambda_bins[@]+"${lambda_bins[@]}"}
elif [ "$SKIP_BUILD" = true ]; then
    say "SKIP_BUILD=true: deploying the binaries in $LAMBDA_DIR as they are"
else
    build_lambdas "$LAMBDA_DIR" || die "cargo lambda build failed (see above). Nothing in AWS was changed."
fi
for bin in ${lambda_bins[@]+"${lambda_bins[@]}"}; do
    [ -f "$LAMBDA_DIR/$bin/bootstrap" ] || die "$LAMBDA_DIR/$bin/bootstrap is missing (SKIP_BUILD=true deploys what is there)." \
        "Build it with SKIP_BUILD=false (the default), or copy a built bootstrap there. Nothing in AWS was changed."
    check_bootstrap_arch "$LAMBDA_DIR/$bin/bootstrap"
done

# ---------------------------------------------------------------- 3. resources stack
if attach_mode; then
    # resources.yaml without the user's queues, with the protected ones in the roles and alarms.
    PROTECTED_QUEUE_URL_PREFIX=${PROTECTED_DLQ_URLS%%,*}
    # A stack from before the nested stacks holds the per-DLQ alarms itself: they leave it in
    # an update of their own first (created in a nested stack while the parent still has them,
    # each would meet its own name). Meanwhile the safety-net schedule drains every DLQ.
    if "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_template.py" has-inline-alarms \
        "$WORK/resources.previous.json"; then
        cp "$WORK/resources.json" "$WORK/resources.interim.params.json"
        "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_template.py" "$INFRA_DIR/templates/resources.yaml" \
            "$WORK/dlqs.tsv" "$WORK/resources.interim.json" "$WORK/resources.interim.params.json" \
            --stack "$STACK_NAME" --without-alarms ||
            die "could not render the attach-mode template (see above). Nothing was changed."
        say "moving the per-DLQ alarms of $RESOURCES into nested stacks: removing them from the stack first" \
            "(the safety-net schedule drains every DLQ until the nested stacks have them)"
        tag_protected_queues "$WORK/resources.interim.json" "${PROTECTED_QUEUE_URL_PREFIX%/*}"
        deploy_stack "$RESOURCES" "$WORK/resources.interim.json" "$WORK/resources.interim.params.json" "$RESOURCES_STATUS"
    fi
    # The per-DLQ alarms go in nested stacks, whose templates are uploaded first.
    render_attach_stacks
    # The roles grant on this install's tag: the protected DLQs and their sources get it before
    # the roles change, so that an upgrade from roles that named each queue's ARN has no moment
    # in which the new roles grant on a tag no queue carries yet. Those no longer protected lose
    # it once the deploy is done.
    tag_protected_queues "$WORK/resources.attach.json" "${PROTECTED_QUEUE_URL_PREFIX%/*}"
    upload_nested_templates "$WORK/alarm-stacks" "$NESTED_TEMPLATE_PREFIX"
    deploy_stack "$RESOURCES" "$WORK/resources.attach.json" "$WORK/resources.json" "$RESOURCES_STATUS"
    discard_nested_templates "$WORK/alarm-stacks" "$NESTED_TEMPLATE_PREFIX"
    required_outputs=(PoisonQueueUrl TriggerTopicArn MetricNamespace RedriverFunctionName RedriverRoleArn
        DashboardUrl CircuitTableName ArchiveBucketName ArchivePrefix ArchiverFunctionName ArchiverRoleArn
        TriageWidgetFunctionName TriageWidgetRoleArn TriageActionFunctionName TriageActionRoleArn)
else
    deploy_stack "$RESOURCES" "$INFRA_DIR/templates/resources.yaml" "$WORK/resources.json" "$RESOURCES_STATUS"
    required_outputs=(SourceQueueUrl SourceQueueArn DeadLetterQueueUrl PoisonQueueUrl IdempotencyTableName
        TriggerTopicArn MetricNamespace ConsumerTimeoutSeconds RedriverFunctionName ConsumerFunctionName
        RedriverRoleArn ConsumerRoleArn DefaultGuardAlarmNames DashboardUrl CircuitTableName
        ArchiveBucketName ArchivePrefix ArchiverFunctionName ArchiverRoleArn
        TriageWidgetFunctionName TriageWidgetRoleArn TriageActionFunctionName TriageActionRoleArn)
fi
read_outputs "$RESOURCES"
for key in ${required_outputs[@]+"${required_outputs[@]}"}; do
    var=OUT_$key
    [ -n "${!var-}" ] || die "stack $RESOURCES has no output $key; was it created from another template?"
done
# ---- Step Functions orchestrator ----
if [ "$ORCHESTRATOR" = stepfunctions ]; then
    for key in WorkflowFunctionName WorkflowRoleArn StateMachineName StateMachineLogGroupArn WorkflowTriggerAlarmName; do
        var=OUT_$key
        [ -n "${!var-}" ] || die "stack $RESOURCES has no output $key (ORCHESTRATOR=stepfunctions); was it created from another template?"
    done
fi

# ---------------------------------------------------------------- 4. functions
# Attach mode: the functions read the protected DLQs' list at init, from the circuit table.
if attach_mode; then write_dlq_list "$OUT_CircuitTableName" "$WORK/dlq-list.json"; fi
write_redriver_env "$WORK/redriver.env"
consumer_env=(
    "IDEMPOTENCY_TABLE=${OUT_IdempotencyTableName-}"
    "IDEMPOTENCY_KEY=$IDEMPOTENCY_KEY"
    "DOWNSTREAM_URL=$DOWNSTREAM_URL"
    "DOWNSTREAM_TIMEOUT_SECONDS=$DOWNSTREAM_TIMEOUT_SECONDS"
    "RETRY_BASE_SECONDS=$RETRY_BASE_SECONDS"
    "RETRY_MULTIPLIER=$RETRY_MULTIPLIER"
    "RETRY_MAX_SECONDS=$RETRY_MAX_SECONDS"
    "RETRY_JITTER=$RETRY_JITTER"
    "RUST_LOG=$RUST_LOG"
)
if [ -n "$IDEMPOTENCY_TTL_SECONDS" ]; then consumer_env+=("IDEMPOTENCY_TTL_SECONDS=$IDEMPOTENCY_TTL_SECONDS"); fi
if [ "$FAST_TRACK_PERMANENT_FAILURES" = true ]; then consumer_env+=("DLQ_URL=${OUT_DeadLetterQueueUrl-}"); fi
write_env_file "$WORK/consumer.env" ${consumer_env[@]+"${consumer_env[@]}"}

write_archiver_env "$WORK/archiver.env"
write_triage_console_env "$WORK/triage-console.env"
# What the functions get, checked against Lambda's 4 KB of environment before any is changed.
nested=()
if attach_mode; then nested=(--children "$WORK/alarm-stacks"); fi
QUOTAS_QUIET=1 "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/quotas.py" check "$WORK/resources.template.json" \
    ${nested[@]+"${nested[@]}"} "$WORK/redriver.env" "$WORK/archiver.env" "$WORK/triage-console.env" ||
    die "the functions' settings exceed a Lambda quota (above). The stack $RESOURCES is updated; no function was changed."

# A role created seconds ago is often not assumable by Lambda yet (IAM is eventually
# consistent): CreateFunction fails with InvalidParameterValueException "The role defined for
# the function cannot be assumed by Lambda". cargo-lambda's --retry-attempts does not retry it,
# so this does, for about IAM_PROPAGATION_WAIT_SECONDS x IAM_PROPAGATION_ATTEMPTS at most.
IAM_PROPAGATION_WAIT_SECONDS=${IAM_PROPAGATION_WAIT_SECONDS:-10}
IAM_PROPAGATION_ATTEMPTS=${IAM_PROPAGATION_ATTEMPTS:-9}

deploy_function() { # BINARY FUNCTION_NAME ROLE_ARN MEMORY TIMEOUT ENV_FILE
    local attempt=1
    say "deploying function $2 (binary $1, ${4} MB, ${5} s)"
    while :; do
        if [ -n "${ARTIFACTS-}" ]; then
            # A release: the AWS CLI uploads its zip as it is (cargo lambda deploy would need cargo).
            if upload_artifact ${@+"$@"} >"$WORK/$1.out" 2>"$WORK/$1.err"; then return 0; fi
        elif (cd "$REPO_DIR" && "$CARGO_LAMBDA" lambda deploy "$2" \
            --binary-name "$1" --lambda-dir "$LAMBDA_DIR" \
            --iam-role "$3" --memory "$4" --timeout "$5" --env-file "$6" --tracing "$TRACING" \
            --region "$AWS_REGION" --retry-attempts 5 \
            --tag "project=redrive,redrive:stack=$STACK_NAME" --output-format json \
            >"$WORK/$1.out" 2>"$WORK/$1.err"); then
            return 0
        fi
        cat "$WORK/$1.err" >&2
        if grep -q 'cannot be assumed by Lambda' "$WORK/$1.err" && ((attempt < IAM_PROPAGATION_ATTEMPTS)); then
            say "IAM has not propagated role $3 to Lambda yet; retrying in ${IAM_PROPAGATION_WAIT_SECONDS} s" \
                "(attempt $((attempt + 1)) of $IAM_PROPAGATION_ATTEMPTS)"
            sleep "$IAM_PROPAGATION_WAIT_SECONDS"
            attempt=$((attempt + 1))
            continue
        fi
        die "$(if [ -n "${ARTIFACTS-}" ]; then printf 'uploading %s from ARTIFACTS' "$2"; else printf 'cargo lambda deploy of %s' "$2"; fi) failed (see above)." \
            "The stack $RESOURCES is in place; fix the cause and run make deploy again."
    done
}

# ARTIFACTS: the release's zip for BINARY and LAMBDA_ARCH uploaded with the AWS CLI, with the
# settings cargo lambda deploy gives a function (runtime provided.al2023, handler bootstrap,
# role, memory, timeout, environment, tracing, tags) and the JSON log format publish_live
# would set: created, or its code and configuration
# updated. Fails (with the AWS CLI's message on stderr) like cargo lambda deploy does.
upload_artifact() { # BINARY FUNCTION_NAME ROLE_ARN MEMORY TIMEOUT ENV_FILE
    local zip environment
    zip=$(artifact_zip "$1")
    environment=$WORK/$1.environment.json
    "${PYTHON:-$REPO_DIR/.venv/bin/python}" -c 'import json, sys
variables = {}
for line in open(sys.argv[1], encoding="utf-8"):
    key, _, value = line.rstrip("\n").partition("=")
    if key:
        variables[key] = value[1:-1] if value[:1] == value[-1:] == "\x27" else value
print(json.dumps({"Variables": variables}))' "$6" >"$environment"
    local settings=(--role "$3" --memory-size "$4" --timeout "$5" --environment "file://$environment"
        --tracing-config "Mode=$TRACING" --runtime provided.al2023 --handler bootstrap
        --logging-config LogFormat=JSON)
    local arn
    if arn=$(aws_ lambda get-function --function-name "$2" --query Configuration.FunctionArn --output text 2>/dev/null); then
        aws_ lambda update-function-code --function-name "$2" --zip-file "fileb://$zip" \
            --architectures "$LAMBDA_ARCH" >/dev/null &&
            aws_ lambda wait function-updated-v2 --function-name "$2" &&
            aws_ lambda update-function-configuration --function-name "$2" ${settings[@]+"${settings[@]}"} >/dev/null &&
            aws_ lambda tag-resource --resource "$arn" --tags "project=redrive,redrive:stack=$STACK_NAME"
    else
        aws_ lambda create-function --function-name "$2" --zip-file "fileb://$zip" \
            --architectures "$LAMBDA_ARCH" ${settings[@]+"${settings[@]}"} \
            --tags "project=redrive,redrive:stack=$STACK_NAME" >/dev/null
    fi
}

# Waits until Lambda has finished creating (State Pending -> Active) and updating
# (LastUpdateStatus InProgress -> Successful) the function, as the AWS CLI's waiters
# function-active-v2 and function-updated-v2 do (one call a second, at most
# FUNCTION_READY_SECONDS, 300), but with one GetFunctionConfiguration a poll that also reads the
# log format: prints it (JSON, Text, or None when Lambda reports none). Fails with Lambda's
# reason when the function is Failed.
FUNCTION_READY_SECONDS=${FUNCTION_READY_SECONDS:-300}
function_ready() { # FUNCTION_NAME
    local name=$1 tries=0 out state update format reason
    while :; do
        out=$(aws_ lambda get-function-configuration --function-name "$name" \
            --query '[State,LastUpdateStatus,LoggingConfig.LogFormat,StateReason,LastUpdateStatusReason]' \
            --output text) || return 1
        IFS=$'\t' read -r state update format reason <<<"$out"
        case "$state/$update" in
            Active/Successful | Active/None)
                printf '%s' "$format"
                return 0
                ;;
            Failed/* | */Failed)
                say "function $name is $state (last update $update): $reason"
                return 1
                ;;
        esac
        tries=$((tries + 1))
        ((tries < FUNCTION_READY_SECONDS)) || return 1
        sleep 1
    done
}

# Publishes the function's current code and configuration as a version (Lambda returns the
# latest version when nothing changed) and points the alias `live` at it. The alias's
# description records the version it pointed at before, which is what make rollback restores.
publish_live() { # FUNCTION_NAME
    local name=$1 version previous format
    # cargo lambda deploy returns while Lambda still creates (State Pending) or updates
    # (LastUpdateStatus InProgress) the function; PublishVersion then fails with
    # ResourceConflictException. Wait for both.
    format=$(function_ready "$name") ||
        die "function $name did not become ready (State Active, LastUpdateStatus Successful)." \
            "See: aws lambda get-function-configuration --function-name $name. Run make deploy again once it is."
    # JSON logs, whatever the account's default (Lambda's is Text): the metric filters read the
    # functions' JSON fields, and the functions honour AWS_LAMBDA_LOG_FORMAT (docs/contract.md).
    if [ "$format" != JSON ]; then
        aws_ lambda update-function-configuration --function-name "$name" --logging-config LogFormat=JSON >/dev/null ||
            die "could not set the JSON log format of $name (lambda:UpdateFunctionConfiguration)."
        function_ready "$name" >/dev/null ||
            die "function $name did not become ready after its log format was set."
    fi
    version=$(aws_ lambda publish-version --function-name "$name" --description "make deploy" \
        --query Version --output text) || die "could not publish a version of $name."
    if previous=$(aws_ lambda get-alias --function-name "$name" --name live --query FunctionVersion --output text 2>/dev/null); then
        aws_ lambda update-alias --function-name "$name" --name live --function-version "$version" \
            --description "previous=$previous" >/dev/null
    else
        previous=none
        aws_ lambda create-alias --function-name "$name" --name live --function-version "$version" \
            --description "previous=none" >/dev/null
    fi
    say "function $name: alias live -> version $version (was $previous)"
}

deploy_function redriver "$OUT_RedriverFunctionName" "$OUT_RedriverRoleArn" \
    "$REDRIVER_MEMORY_MB" "$REDRIVER_TIMEOUT_SECONDS" "$WORK/redriver.env"
publish_live "$OUT_RedriverFunctionName"
# One re-driver at a time: alarm, schedule and manual invocations never add their velocity
# caps together. Reserved concurrency is taken from the account's pool, which must keep 100
# unreserved (see infra/README.md).
if [ "$REDRIVER_RESERVED_CONCURRENCY" = none ]; then
    aws_ lambda delete-function-concurrency --function-name "$OUT_RedriverFunctionName" >/dev/null 2>&1 || true
    say "REDRIVER_RESERVED_CONCURRENCY=none: re-driver runs may overlap"
elif ! out=$(aws_ lambda put-function-concurrency --function-name "$OUT_RedriverFunctionName" \
    --reserved-concurrent-executions "$REDRIVER_RESERVED_CONCURRENCY" 2>&1); then
    die "could not reserve concurrency 1 for $OUT_RedriverFunctionName." \
        "AWS CLI said: $(tr '\n' ' ' <<<"$out")" \
        "An account must keep 100 concurrent executions unreserved; new accounts often have a quota of 10." \
        "Ask for a higher 'Concurrent executions' quota (Service Quotas, AWS Lambda), or set" \
        "REDRIVER_RESERVED_CONCURRENCY=none to deploy without it (runs may then overlap)." \
        "The functions are deployed but not wired; run make deploy again after the fix."
fi
if [ "$CONSUMER" = http ]; then
    deploy_function consumer "$OUT_ConsumerFunctionName" "$OUT_ConsumerRoleArn" \
        "$CONSUMER_MEMORY_MB" "$OUT_ConsumerTimeoutSeconds" "$WORK/consumer.env"
    publish_live "$OUT_ConsumerFunctionName"
else
    say "CONSUMER=none: your own consumers keep reading your queues; no consumer deployed"
fi
deploy_function archiver "$OUT_ArchiverFunctionName" "$OUT_ArchiverRoleArn" \
    "$ARCHIVER_MEMORY_MB" "$ARCHIVER_TIMEOUT_SECONDS" "$WORK/archiver.env"
publish_live "$OUT_ArchiverFunctionName"
# The triage console: each function under its own role (the widget's only reads), one
# environment; the dashboard's widgets call the widget's alias live, their buttons the action's.
deploy_function triage-action "$OUT_TriageActionFunctionName" "$OUT_TriageActionRoleArn" \
    "$TRIAGE_CONSOLE_MEMORY_MB" "$TRIAGE_CONSOLE_TIMEOUT_SECONDS" "$WORK/triage-console.env"
publish_live "$OUT_TriageActionFunctionName"
deploy_function triage-widget "$OUT_TriageWidgetFunctionName" "$OUT_TriageWidgetRoleArn" \
    "$TRIAGE_CONSOLE_MEMORY_MB" "$TRIAGE_CONSOLE_TIMEOUT_SECONDS" "$WORK/triage-console.env"
publish_live "$OUT_TriageWidgetFunctionName"

# ---- Step Functions orchestrator: the task function, the re-driver's settings plus
# its own; the state machine (step 5) invokes its alias live.
WORKFLOW_FUNCTION_NAME=$STACK_NAME-workflow-tasks
if [ "$ORCHESTRATOR" = stepfunctions ]; then
    # The re-driver's environment (same queues, guards, table, velocity), its backoff cap raised
    # to WORKFLOW_BACKOFF_MAX_SECONDS when set (up to 12 h here).
    grep -v '^BACKOFF_MAX_SECONDS=' "$WORK/redriver.env" >"$WORK/redrive-workflow.env"
    printf "%s='%s'\n" BACKOFF_MAX_SECONDS "${WORKFLOW_BACKOFF_MAX_SECONDS:-$BACKOFF_MAX_SECONDS}" >>"$WORK/redrive-workflow.env"
    for name in WORKFLOW_MAX_DELAY_SECONDS WORKFLOW_BATCH_SIZE WORKFLOW_HOPS_PER_ROUND; do
        if [ -n "${!name-}" ]; then printf "%s='%s'\n" "$name" "${!name}" >>"$WORK/redrive-workflow.env"; fi
    done
    deploy_function redrive-workflow "$OUT_WorkflowFunctionName" "$OUT_WorkflowRoleArn" \
        "$WORKFLOW_MEMORY_MB" "$WORKFLOW_TIMEOUT_SECONDS" "$WORK/redrive-workflow.env"
    publish_live "$OUT_WorkflowFunctionName"
fi

# ---------------------------------------------------------------- 5. wiring stack
write_wiring_params "$WORK/wiring.json"
# The state machine's definition goes into the template here.
render_wiring_template "$INFRA_DIR/templates/wiring.yaml" "$INFRA_DIR/statemachine/redrive.asl.json" "$WORK/wiring.yaml"
deploy_stack "$WIRING" "$WORK/wiring.yaml" "$WORK/wiring.json" "$WIRING_STATUS"

# ---- Step Functions orchestrator: back to the Lambda, the state machine is gone
# with the wiring stack's update; its task function, left by an earlier stepfunctions deploy,
# goes too (its role went with the resources stack).
if [ "$ORCHESTRATOR" = lambda ] &&
    aws_ lambda get-function --function-name "$WORKFLOW_FUNCTION_NAME" >/dev/null 2>&1; then
    aws_ lambda delete-function --function-name "$WORKFLOW_FUNCTION_NAME" >/dev/null ||
        die "could not delete the task function $WORKFLOW_FUNCTION_NAME (ORCHESTRATOR=lambda)." \
            "The Lambda orchestrator is wired; delete it by hand: aws lambda delete-function --function-name $WORKFLOW_FUNCTION_NAME"
    say "ORCHESTRATOR=lambda: deleted the task function $WORKFLOW_FUNCTION_NAME of the state machine"
fi

if attach_mode; then
    untag_queues "$WORK/resources.previous.json" "$WORK/resources.attach.json"
    cat <<EOF

redrive protects ${OUT_ProtectedDlqCount:-?} DLQs (stacks $RESOURCES and $WIRING, region $AWS_REGION); none of your queues was created or changed.
  DLQs           ${PROTECTED_DLQ_URLS//,/ }
  poison queue   $OUT_PoisonQueueUrl   <- every protected DLQ's isolated messages (x-redrive names the DLQ and source)
  alerts topic   ${OUT_AlertsTopicArn:-?}   <- subscribe people here (or set ALERT_EMAIL)
  functions      $OUT_RedriverFunctionName, $OUT_ArchiverFunctionName, $OUT_TriageWidgetFunctionName, $OUT_TriageActionFunctionName (alias live; undo with make rollback)
  archive        s3://$OUT_ArchiveBucketName/$OUT_ArchivePrefix/<queue name>/
  dashboard      $OUT_DashboardUrl
A queue tagged or listed later is protected by the next make deploy.
Remove:  make destroy (removes what this install created; none of your queues)
EOF
    exit 0
fi
cat <<EOF

redrive is deployed (stacks $RESOURCES and $WIRING, region $AWS_REGION).
  source queue   $OUT_SourceQueueUrl
  DLQ            $OUT_DeadLetterQueueUrl
  poison queue   $OUT_PoisonQueueUrl
  alerts topic   ${OUT_AlertsTopicArn:-?}   <- subscribe people here (or set ALERT_EMAIL)
  recoveries     ${OUT_RecoveryTopicArn:-?}   <- OK notifications (a chat channel, or nothing)
  functions      $OUT_RedriverFunctionName, $OUT_ConsumerFunctionName, $OUT_ArchiverFunctionName, $OUT_TriageWidgetFunctionName, $OUT_TriageActionFunctionName (alias live; undo with make rollback)
  archive        s3://$OUT_ArchiveBucketName/$OUT_ArchivePrefix/ (messages older than $ARCHIVE_AFTER_DAYS days, $ARCHIVE_SCHEDULE_EXPRESSION)
  dashboard      $OUT_DashboardUrl
  orchestrator   $ORCHESTRATOR$([ "$ORCHESTRATOR" = stepfunctions ] && printf ' (state machine %s, task function %s)' "$OUT_StateMachineName" "$OUT_WorkflowFunctionName")
Try it:  aws sqs send-message --region $AWS_REGION --queue-url $OUT_SourceQueueUrl --message-body '{"hello":"redrive"}'
Remove:  make destroy
EOF

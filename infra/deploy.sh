#!/usr/bin/env bash
# OUT_* variables are set by read_outputs (printf -v), which shellcheck cannot follow.
# shellcheck disable=SC2154
# make deploy: everything from a clone to a running system, re-runnable.
#
#   1. checks (nothing is changed if one fails): settings, tools, region, credentials, stacks'
#      states
#   2. cargo lambda build --release --arm64 (unless SKIP_BUILD=true)
#   3. stack STACK_NAME (infra/templates/resources.yaml): queues, table, topics, alarms, log
#      groups, roles
#   4. cargo lambda deploy of both functions, with the roles, names and environment read from
#      that stack's outputs and infra/redrive.env (the only place function settings live)
#   5. stack STACK_NAME-wiring (infra/templates/wiring.yaml): SNS subscription and permission,
#      SQS event source mapping, optional schedule, which need the functions to exist
#
# Settings: infra/redrive.env, overridable from the environment. See infra/README.md.
set -euo pipefail
# shellcheck source=infra/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---------------------------------------------------------------- 1. checks
load_config
find_tools
validate_deploy_config
find_cargo_lambda
resolve_region
check_credentials
RESOURCES=$(RESOURCES_STACK)
WIRING=$(WIRING_STACK)
check_stack_usable "$RESOURCES" deploy
check_stack_usable "$WIRING" deploy

case $LAMBDA_DIR in /*) ;; *) LAMBDA_DIR=$REPO_DIR/$LAMBDA_DIR ;; esac
say "deploying stack $RESOURCES to $AWS_REGION (account $ACCOUNT_ID)"

# ---------------------------------------------------------------- 2. build
if [ "$SKIP_BUILD" = true ]; then
    say "SKIP_BUILD=true: deploying the binaries in $LAMBDA_DIR as they are"
else
    say "building both functions for arm64 (cargo lambda build --release --arm64)"
    (cd "$REPO_DIR" && "$CARGO_LAMBDA" lambda build --release --arm64 --lambda-dir "$LAMBDA_DIR" \
        --package redriver --package consumer) ||
        die "cargo lambda build failed (see above). Nothing in AWS was changed."
fi
for bin in redriver consumer; do
    [ -f "$LAMBDA_DIR/$bin/bootstrap" ] || die "$LAMBDA_DIR/$bin/bootstrap is missing." \
        "Build it with: cargo lambda build --release --arm64 (or set SKIP_BUILD=false). Nothing in AWS was changed."
done

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# ---------------------------------------------------------------- 3. resources stack
guard_alarm_arns=
IFS=',' read -r -a guard_names <<<"$GUARD_ALARM_NAMES"
for name in "${guard_names[@]}"; do
    guard_alarm_arns+="${guard_alarm_arns:+,}arn:$PARTITION:cloudwatch:$AWS_REGION:$ACCOUNT_ID:alarm:$name"
done

write_params "$WORK/resources.json" \
    "MaxReceiveCount=$MAX_RECEIVE_COUNT" \
    "ConsumerTimeoutSeconds=$CONSUMER_TIMEOUT_SECONDS" \
    "SourceQueueRetentionSeconds=$SOURCE_QUEUE_RETENTION_SECONDS" \
    "DlqAgeAlarmSeconds=$DLQ_AGE_ALARM_SECONDS" \
    "PoisonReminderHourUtc=$POISON_REMINDER_HOUR_UTC" \
    "MetricNamespace=$METRIC_NAMESPACE" \
    "GuardAlarmArns=$guard_alarm_arns" \
    "AlertEmail=$ALERT_EMAIL" \
    "LogRetentionDays=$LOG_RETENTION_DAYS"
deploy_stack "$RESOURCES" "$INFRA_DIR/templates/resources.yaml" "$WORK/resources.json"
read_outputs "$RESOURCES"
for key in SourceQueueUrl SourceQueueArn DeadLetterQueueUrl PoisonQueueUrl IdempotencyTableName \
    TriggerTopicArn MetricNamespace ConsumerTimeoutSeconds RedriverFunctionName ConsumerFunctionName \
    RedriverRoleArn ConsumerRoleArn; do
    var=OUT_$key
    [ -n "${!var-}" ] || die "stack $RESOURCES has no output $key; was it created from another template?"
done

# ---------------------------------------------------------------- 4. functions
# Values are single-quoted: cargo-lambda reads the file dotenv-style, and GUARD_ALARM_NAMES
# holds commas that --env-var would split.
write_env_file() {
    local file=$1 kv
    shift
    for kv in "$@"; do printf "%s='%s'\n" "${kv%%=*}" "${kv#*=}"; done >"$file"
}

write_env_file "$WORK/redriver.env" \
    "DLQ_URL=$OUT_DeadLetterQueueUrl" \
    "SOURCE_QUEUE_URL=$OUT_SourceQueueUrl" \
    "POISON_QUEUE_URL=$OUT_PoisonQueueUrl" \
    "MAX_REDRIVE_ATTEMPTS=$MAX_REDRIVE_ATTEMPTS" \
    "BACKOFF_BASE_SECONDS=$BACKOFF_BASE_SECONDS" \
    "BACKOFF_MULTIPLIER=$BACKOFF_MULTIPLIER" \
    "BACKOFF_MAX_SECONDS=$BACKOFF_MAX_SECONDS" \
    "BACKOFF_JITTER=$BACKOFF_JITTER" \
    "MAX_MESSAGES_PER_INVOCATION=$MAX_MESSAGES_PER_INVOCATION" \
    "MAX_MESSAGES_PER_SECOND=$MAX_MESSAGES_PER_SECOND" \
    "GUARD_ALARM_NAMES=$GUARD_ALARM_NAMES" \
    "REARM_ALARM=$REARM_ALARM" \
    "METRIC_NAMESPACE=$OUT_MetricNamespace" \
    "DRY_RUN=$DRY_RUN" \
    "RUST_LOG=$RUST_LOG"

consumer_env=(
    "IDEMPOTENCY_TABLE=$OUT_IdempotencyTableName"
    "IDEMPOTENCY_KEY=$IDEMPOTENCY_KEY"
    "IDEMPOTENCY_TTL_SECONDS=$IDEMPOTENCY_TTL_SECONDS"
    "DOWNSTREAM_URL=$DOWNSTREAM_URL"
    "DOWNSTREAM_TIMEOUT_SECONDS=$DOWNSTREAM_TIMEOUT_SECONDS"
    "RETRY_BASE_SECONDS=$RETRY_BASE_SECONDS"
    "RETRY_MULTIPLIER=$RETRY_MULTIPLIER"
    "RETRY_MAX_SECONDS=$RETRY_MAX_SECONDS"
    "RETRY_JITTER=$RETRY_JITTER"
    "RUST_LOG=$RUST_LOG"
)
if [ "$FAST_TRACK_PERMANENT_FAILURES" = true ]; then consumer_env+=("DLQ_URL=$OUT_DeadLetterQueueUrl"); fi
write_env_file "$WORK/consumer.env" "${consumer_env[@]}"

deploy_function() { # BINARY FUNCTION_NAME ROLE_ARN MEMORY TIMEOUT ENV_FILE
    say "deploying function $2 (binary $1, ${4} MB, ${5} s)"
    # --retry-attempts: a role created seconds ago may not be assumable by Lambda yet.
    (cd "$REPO_DIR" && "$CARGO_LAMBDA" lambda deploy "$2" \
        --binary-name "$1" --lambda-dir "$LAMBDA_DIR" \
        --iam-role "$3" --memory "$4" --timeout "$5" --env-file "$6" \
        --region "$AWS_REGION" --retry-attempts 5 \
        --tag "project=redrive,redrive:stack=$STACK_NAME" --output-format json >"$WORK/$1.out") ||
        die "cargo lambda deploy of $2 failed (see above)." \
            "The stack $RESOURCES is in place; fix the cause and run make deploy again."
}
deploy_function redriver "$OUT_RedriverFunctionName" "$OUT_RedriverRoleArn" \
    "$REDRIVER_MEMORY_MB" "$REDRIVER_TIMEOUT_SECONDS" "$WORK/redriver.env"
deploy_function consumer "$OUT_ConsumerFunctionName" "$OUT_ConsumerRoleArn" \
    "$CONSUMER_MEMORY_MB" "$OUT_ConsumerTimeoutSeconds" "$WORK/consumer.env"

# ---------------------------------------------------------------- 5. wiring stack
write_params "$WORK/wiring.json" \
    "RedriverFunctionName=$OUT_RedriverFunctionName" \
    "ConsumerFunctionName=$OUT_ConsumerFunctionName" \
    "TriggerTopicArn=$OUT_TriggerTopicArn" \
    "SourceQueueArn=$OUT_SourceQueueArn" \
    "BatchSize=$BATCH_SIZE" \
    "MaximumBatchingWindowSeconds=$MAX_BATCHING_WINDOW_SECONDS" \
    "MaximumConcurrency=$MAX_CONCURRENCY" \
    "EnableSchedule=$ENABLE_SCHEDULE" \
    "ScheduleExpression=$SCHEDULE_EXPRESSION"
deploy_stack "$WIRING" "$INFRA_DIR/templates/wiring.yaml" "$WORK/wiring.json"

cat <<EOF

redrive is deployed (stacks $RESOURCES and $WIRING, region $AWS_REGION).
  source queue   $OUT_SourceQueueUrl
  DLQ            $OUT_DeadLetterQueueUrl
  poison queue   $OUT_PoisonQueueUrl
  alerts topic   ${OUT_AlertsTopicArn:-?}   <- subscribe people here (or set ALERT_EMAIL)
  functions      $OUT_RedriverFunctionName, $OUT_ConsumerFunctionName
Try it:  aws sqs send-message --region $AWS_REGION --queue-url $OUT_SourceQueueUrl --message-body '{"hello":"redrive"}'
Remove:  make destroy
EOF

# shellcheck shell=bash
# Shared by infra/deploy.sh and infra/destroy.sh: configuration, tools, preflight checks and
# CloudFormation helpers. Every check here runs before anything in AWS is changed.

INFRA_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$INFRA_DIR/.." && pwd)

say() { printf '==> %s\n' "$*" >&2; }
die() {
    printf '\nERROR: %s\n' "$1" >&2
    shift
    local line
    for line in ${@+"$@"}; do printf '       %s\n' "$line" >&2; done
    exit 1
}

# ---------------------------------------------------------------- configuration
# KEY=VALUE lines, taken literally; a variable already set in the environment wins.
load_config() {
    local file=${REDRIVE_CONFIG:-$INFRA_DIR/redrive.env} line key value
    [ -f "$file" ] || die "configuration file $file not found" "Set REDRIVE_CONFIG to your settings file, or restore infra/redrive.env."
    while IFS= read -r line || [ -n "$line" ]; do
        line=${line%$'\r'}
        case $line in '' | '#'*) continue ;; esac
        [[ $line =~ ^([A-Z][A-Z0-9_]*)=(.*)$ ]] || die "$file: cannot read the line '$line'" "Lines are KEY=VALUE or # comments."
        key=${BASH_REMATCH[1]}
        value=${BASH_REMATCH[2]}
        if [ -z "${!key+set}" ]; then export "$key=$value"; fi
    done <"$file"
}

# ---------------------------------------------------------------- validation
need_match() { # NAME REGEX EXPLANATION
    [[ ${!1-} =~ $2 ]] || die "$1='${!1-}' is invalid: $3" "Set it in infra/redrive.env or the environment."
}
need_int() { # NAME MIN MAX
    need_match "$1" '^[0-9]+$' "must be a whole number between $2 and $3"
    if ((10#${!1} < $2 || 10#${!1} > $3)); then
        die "$1=${!1} is invalid: must be between $2 and $3" "Set it in infra/redrive.env or the environment."
    fi
}
need_bool() { need_match "$1" '^(true|false)$' "must be true or false"; }
need_env_safe() { # a value that goes into a function's environment
    case ${!1-} in
        *"'"* | *$'\n'* | *$'\r'*) die "$1 must not contain quotes or line breaks" ;;
    esac
}

validate_common_config() {
    need_match STACK_NAME '^[A-Za-z][A-Za-z0-9-]{0,39}$' \
        "1-40 letters, digits and hyphens, starting with a letter (function names are STACK_NAME-redriver)"
}

# ---------------------------------------------------------------- attach mode
# PROTECT_DLQS or PROTECT_TAG set: the stacks protect existing DLQs and create none of the
# user's queues (infra/README.md, "Attach mode").
attach_mode() { [ -n "${PROTECT_DLQS-}${PROTECT_TAG-}" ]; }

SQS_NAME_RE='[A-Za-z0-9_-]{1,75}(\.fifo)?|[A-Za-z0-9_-]{1,80}'

validate_attach_config() {
    local item
    need_match PROTECT_DLQS '^$|^[^,[:space:]]+(,[^,[:space:]]+)*$' \
        "queue names or ARNs separated by commas, without spaces (e.g. orders-dlq,arn:aws:sqs:eu-west-1:123456789012:payments-dlq.fifo)"
    for item in ${PROTECT_DLQS//,/ }; do
        [[ $item =~ ^($SQS_NAME_RE)$ || $item =~ ^arn:aws[a-z-]*:sqs:[a-z0-9-]+:[0-9]{12}:($SQS_NAME_RE)$ ]] ||
            die "PROTECT_DLQS='$PROTECT_DLQS' is invalid: '$item' is neither a queue name nor a queue ARN." \
                "A name is 1-80 letters, digits, - and _ (a FIFO queue's ends in .fifo); an ARN is arn:aws:sqs:REGION:ACCOUNT:NAME." \
                "Set it in infra/redrive.env or the environment. Nothing was changed."
    done
    need_match PROTECT_TAG '^$|^[A-Za-z0-9 _.:/=+@-]{1,128}=[A-Za-z0-9 _.:/=+@-]{0,256}$' \
        "key=value, one queue tag (e.g. redrive:protect=true): every queue of the region with that tag is protected"
    if attach_mode; then
        CONSUMER=${CONSUMER:-none}
        need_match CONSUMER '^(none|http)$' "none (your own consumer keeps reading your queues) or http"
        if [ "$CONSUMER" = http ]; then
            die "CONSUMER=http is not supported with PROTECT_DLQS or PROTECT_TAG yet: the shipped consumer reads" \
                "a source queue this install creates, and attach mode creates none. Keep your own consumer" \
                "(CONSUMER=none, the default in attach mode), or deploy without PROTECT_DLQS/PROTECT_TAG. Nothing was changed."
        fi
        if [ "${ORCHESTRATOR:-lambda}" = stepfunctions ]; then
            die "ORCHESTRATOR=stepfunctions is not supported with PROTECT_DLQS or PROTECT_TAG yet: the state machine" \
                "drains one DLQ. Use ORCHESTRATOR=lambda (one re-driver drains every protected DLQ). Nothing was changed."
        fi
    else
        CONSUMER=${CONSUMER:-http}
        need_match CONSUMER '^http$' \
            "http without PROTECT_DLQS or PROTECT_TAG (this install creates the source queue and its consumer); CONSUMER=none is for protecting DLQs you already have"
    fi
    export CONSUMER
}

# Attach mode's calls on the user's queues (infra/attach_queues.py): one process for the whole
# fleet, where one AWS CLI call per queue (a Python start each) took minutes at the ceiling.
attach_queues() { # COMMAND ARGS...
    AWS_REGION=$AWS_REGION ACCOUNT_ID=${ACCOUNT_ID-} STACK_NAME=$STACK_NAME \
        "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/attach_queues.py" ${@+"$@"}
}

# Resolves the protected DLQs before anything is changed: writes NAME<TAB>ARN<TAB>SOURCE_ARNS
# <TAB>DLQ_KEY<TAB>SOURCE_KEYS lines to FILE and sets PROTECTED_DLQ_URLS (comma separated). Stops
# naming a queue that does not exist, an ARN of another region or account, a tag that selects
# nothing, our own poison queue, a KMS key the deploy cannot read; warns about a retention the
# archive threshold or an age alarm does not stay below (the archiver then leaves that DLQ alone).
resolve_protected_dlqs() { # FILE
    PROTECTED_DLQ_URLS=$(attach_queues resolve "$1") || exit 1
}

# ---- attach mode: this install's tag on the protected queues (infra/attach_template.py).
# The roles grant on the queues that carry redrive-install:STACK_NAME; the template's Metadata
# lists them (none for a template without the list: managed mode, or a stack from before).
# The template a stack was deployed with, as CloudFormation returns it (nothing without the stack).
stack_template() { # STACK OUT
    aws_ cloudformation get-template --stack-name "$1" --query TemplateBody --output json >"$2" 2>/dev/null || : >"$2"
}
tag_protected_queues() { # TEMPLATE_JSON URL_PREFIX: tags every queue the template lists
    attach_queues tag "$1" "$2" || exit 1
}
# Removes this install's tag from the queues OLD_TEMPLATE lists and NEW_TEMPLATE does not (all of
# them without NEW_TEMPLATE). A queue that is gone is skipped.
untag_queues() { # OLD_TEMPLATE_JSON [NEW_TEMPLATE_JSON]
    attach_queues untag ${@+"$@"} || exit 1
}

validate_deploy_config() {
    validate_common_config
    validate_attach_config
    if [ "$CONSUMER" = http ] && [ -z "${DOWNSTREAM_URL-}" ]; then
        die "DOWNSTREAM_URL is not set: the consumer needs the HTTP endpoint it delivers each message to." \
            "Set it in infra/redrive.env or on the command line, e.g." \
            "  DOWNSTREAM_URL=https://orders.example.com/ingest make deploy" \
            "Nothing was changed."
    fi
    if [ "$CONSUMER" = http ]; then
        need_match DOWNSTREAM_URL '^https?://[^/[:space:]]+' "must be an http:// or https:// URL"
    fi
    need_int MAX_RECEIVE_COUNT 1 1000
    need_match CONSUMER_TIMEOUT_SECONDS '^(10|15|20|30|45|60|90|120|180|300|600|900)$' \
        "must be one of 10 15 20 30 45 60 90 120 180 300 600 900 (the source queue's visibility timeout is six times it)"
    need_int SOURCE_QUEUE_RETENTION_SECONDS 60 1209600
    need_int SOURCE_MAXIMUM_MESSAGE_SIZE 1024 1048576
    need_int SOURCE_AGE_ALARM_SECONDS 300 1209600
    if ((SOURCE_AGE_ALARM_SECONDS >= SOURCE_QUEUE_RETENTION_SECONDS)); then
        die "SOURCE_AGE_ALARM_SECONDS must stay below SOURCE_QUEUE_RETENTION_SECONDS." \
            "Otherwise the source queue deletes an unconsumed message before its age alarm fires."
    fi
    need_int DLQ_AGE_ALARM_SECONDS 300 1036800
    need_int DLQ_FINAL_AGE_ALARM_SECONDS 300 1036800
    if ((DLQ_AGE_ALARM_SECONDS >= DLQ_FINAL_AGE_ALARM_SECONDS)); then
        die "DLQ_AGE_ALARM_SECONDS must stay below DLQ_FINAL_AGE_ALARM_SECONDS (first stage, then the last call)."
    fi
    # A standard queue's DLQ keeps each message's original enqueue time, so the DLQ deletes it
    # 14 days after it entered the SOURCE queue; the last age alarm must be able to fire before that.
    if ((SOURCE_QUEUE_RETENTION_SECONDS + DLQ_FINAL_AGE_ALARM_SECONDS >= 1209600)); then
        die "SOURCE_QUEUE_RETENTION_SECONDS + DLQ_FINAL_AGE_ALARM_SECONDS must stay below 1209600 (14 days)." \
            "SQS counts the DLQ's 14-day retention from the message's first enqueue in the source queue," \
            "so with ${SOURCE_QUEUE_RETENTION_SECONDS} + ${DLQ_FINAL_AGE_ALARM_SECONDS} s a message can be deleted before the age alarm fires."
    fi
    need_int POISON_AGE_ALARM_SECONDS 300 1123200
    need_int POISON_REMINDER_HOUR_UTC 0 23
    need_match METRIC_NAMESPACE '^[A-Za-z0-9._#/-]{1,255}$' "letters, digits and . _ # / - (at most 255)"
    case $METRIC_NAMESPACE in AWS/*) die "METRIC_NAMESPACE must not start with AWS/ (reserved for AWS)" ;; esac
    need_match GUARD_ALARM_NAMES '^[^*?,]+(,[^*?,]+)*$|^$' "comma-separated alarm names without * or ?, empty (the consumer's errors alarm) or none"
    need_match ALERT_EMAIL '^$|^[^@[:space:]]+@[^@[:space:]]+$' "an e-mail address, or empty"
    need_match LOG_RETENTION_DAYS '^(1|3|5|7|14|30|60|90|120|150|180|365|400|545|731|1096|1827|2192|2557|2922|3288|3653)$' \
        "one of CloudWatch Logs' retention values (1 3 5 7 14 30 60 90 ... 3653)"
    need_int BATCH_SIZE 1 10000
    need_int MAX_BATCHING_WINDOW_SECONDS 0 300
    if ((BATCH_SIZE > 10 && MAX_BATCHING_WINDOW_SECONDS < 1)); then
        die "BATCH_SIZE=$BATCH_SIZE needs MAX_BATCHING_WINDOW_SECONDS of at least 1 (an SQS event source rule)."
    fi
    need_int MAX_CONCURRENCY 2 1000
    need_bool ENABLE_SCHEDULE
    need_match SCHEDULE_EXPRESSION '^(rate|cron)\(.+\)$' "an EventBridge rate(...) or cron(...) expression"
    need_int REDRIVER_MEMORY_MB 128 10240
    need_int CONSUMER_MEMORY_MB 128 10240
    need_int REDRIVER_TIMEOUT_SECONDS 10 900
    need_match REDRIVER_RESERVED_CONCURRENCY '^(1|none)$' "1 (one re-driver at a time) or none (see infra/README.md)"
    need_bool REARM_ALARM
    need_bool DRY_RUN
    need_bool FAST_TRACK_PERMANENT_FAILURES
    need_match IDEMPOTENCY_TTL_SECONDS '^$|^[0-9]+$' "a number of seconds, or empty for the consumer's default"
    validate_build_config
    # ---- archive ----
    need_match ARCHIVE_AFTER_DAYS '^([0-9]|1[0-2])(\.[0-9]+)?$|^13$' \
        "a number of days above 0 and at most 13, such as 10 or 0.5 (the schedule needs room before the 14-day retention)"
    if [[ $ARCHIVE_AFTER_DAYS =~ ^0(\.0*)?$ ]]; then die "ARCHIVE_AFTER_DAYS must be above 0."; fi
    need_match ARCHIVE_SCHEDULE_EXPRESSION '^(rate|cron)\(.+\)$' "an EventBridge rate(...) or cron(...) expression"
    need_match ARCHIVE_PREFIX '^[A-Za-z0-9_-]{1,64}$' "1-64 letters, digits, _ and - (one key segment)"
    need_bool ARCHIVE_DLQ
    need_int ARCHIVE_NONCURRENT_VERSION_DAYS 1 3650
    need_int ARCHIVE_INFREQUENT_ACCESS_DAYS 30 3650
    need_int ARCHIVER_MEMORY_MB 128 10240
    need_int ARCHIVER_TIMEOUT_SECONDS 30 900
    # ---- triage console ----
    need_int TRIAGE_CONSOLE_MEMORY_MB 128 10240
    need_int TRIAGE_CONSOLE_TIMEOUT_SECONDS 3 900
    need_bool TRIAGE_SHOW_BODIES
    need_match ARCHIVE_READER_ARNS '^$|^arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+(,arn:aws[a-z-]*:iam::[0-9]{12}:(role|user)/[A-Za-z0-9+=,.@_/-]+)*$' \
        "empty, or IAM role or user ARNs separated by commas (no spaces)"
    need_match ARCHIVE_KMS_KEY_ARN '^$|^arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+$' \
        "empty (SSE-S3), or a KMS key ARN (arn:aws:kms:REGION:ACCOUNT:key/ID)"
    need_match TRACING '^(PassThrough|Active)$' \
        "PassThrough (the default: the functions pass a caller's trace on) or Active (X-Ray records every function; see infra/README.md)"
    # ---- Step Functions orchestrator ----
    need_match ORCHESTRATOR '^(lambda|stepfunctions)$' \
        "lambda (the re-driver Lambda, the default) or stepfunctions (the state machine; see infra/README.md)"
    if [ "$ORCHESTRATOR" = stepfunctions ]; then
        need_match WORKFLOW_LOG_LEVEL '^(ALL|ERROR)$' "ALL or ERROR (the state machine's execution log level)"
        need_int WORKFLOW_MEMORY_MB 128 10240
        need_int WORKFLOW_TIMEOUT_SECONDS 30 900
        # Empty: BACKOFF_MAX_SECONDS. Up to 12 h here; the task function checks the rest at init.
        need_match WORKFLOW_BACKOFF_MAX_SECONDS '^$|^[0-9]+$' "a number of seconds up to 43200, or empty for BACKOFF_MAX_SECONDS"
        local wf
        for wf in WORKFLOW_MAX_DELAY_SECONDS WORKFLOW_BATCH_SIZE WORKFLOW_HOPS_PER_ROUND; do
            need_match "$wf" '^$|^[0-9]+$' "a whole number, or empty for the task function's default"
        done
    fi
    ignore_removed_settings
    local name
    for name in MAX_REDRIVE_ATTEMPTS BACKOFF_BASE_SECONDS BACKOFF_MULTIPLIER BACKOFF_MAX_SECONDS BACKOFF_JITTER \
        MAX_MESSAGES_PER_INVOCATION MAX_MESSAGES_PER_SECOND DOWNSTREAM_URL DOWNSTREAM_TIMEOUT_SECONDS \
        IDEMPOTENCY_KEY IDEMPOTENCY_TTL_SECONDS RETRY_BASE_SECONDS RETRY_MULTIPLIER RETRY_MAX_SECONDS \
        RETRY_JITTER RUST_LOG GUARD_ALARM_NAMES; do
        need_env_safe "$name"
    done
    # The functions validate the rest of their settings at init (naming the variable); the
    # values are not second-guessed here.
}

# Settings that an earlier release read and this one does not: a settings file (or an
# environment) that still sets one deploys as before, with a warning, and the value goes
# nowhere (the task function would refuse it at init). Empty lines, as an older copy of
# redrive.env has them, pass silently.
ignore_removed_settings() {
    local name
    for name in WORKFLOW_SEARCH_RECEIVES WORKFLOW_HOLD_SLACK_SECONDS; do
        if [ -n "${!name-}" ]; then
            printf '\nWARNING: %s=%s is no longer read and is ignored: a waiting message now hops on\n' "$name" "${!name}" >&2
            printf '         the DLQ (notBefore in its x-redrive) instead of being held there and searched for.\n' >&2
            printf '         Remove it from %s or the environment.\n' "${REDRIVE_CONFIG:-infra/redrive.env}" >&2
        fi
        unset "$name"
    done
}

# ---------------------------------------------------------------- tools
find_tools() {
    # The project venv (make setup) holds awscli, cargo-lambda and zig; put it first.
    if [ -d "$REPO_DIR/.venv/bin" ]; then PATH="$REPO_DIR/.venv/bin:$PATH"; fi
    export PATH
    AWS_CLI=${AWS_CLI:-$(command -v aws || true)}
    [ -x "${AWS_CLI:-/nonexistent}" ] || die "the AWS CLI (aws) was not found." "Run 'make setup' (it installs awscli into .venv) or put aws on PATH."
}

find_cargo_lambda() {
    CARGO_LAMBDA=${CARGO_LAMBDA:-$(command -v cargo-lambda || true)}
    [ -x "${CARGO_LAMBDA:-/nonexistent}" ] || die "cargo-lambda was not found." "Run 'make setup' (it installs cargo-lambda into .venv) or put cargo-lambda on PATH."
}

# AWS CLI v1 (the venv's) replaces the SQS endpoint with its legacy queue.amazonaws.com name
# unless --endpoint-url is given, ignoring AWS_ENDPOINT_URL for SQS alone; the standard
# variables are passed on explicitly so that SQS calls reach the same endpoint as the others.
aws_() {
    local sqs_endpoint=${AWS_ENDPOINT_URL_SQS:-${AWS_ENDPOINT_URL-}}
    if [ "${1-}" = sqs ] && [ -n "$sqs_endpoint" ]; then
        "$AWS_CLI" --region "$AWS_REGION" --endpoint-url "$sqs_endpoint" ${@+"$@"}
    else
        "$AWS_CLI" --region "$AWS_REGION" ${@+"$@"}
    fi
}

# ---------------------------------------------------------------- build
# The functions' architecture and the cargo profile they are built with (infra/redrive.env).
# A settings file from before these settings existed builds as it did: release, arm64.
validate_build_config() {
    LAMBDA_ARCH=${LAMBDA_ARCH:-arm64}
    BUILD_PROFILE=${BUILD_PROFILE:-release}
    need_match LAMBDA_ARCH '^(arm64|x86_64)$' "arm64 (Graviton, the default) or x86_64: the functions' architecture"
    need_match BUILD_PROFILE '^[A-Za-z][A-Za-z0-9_-]*$' \
        "a cargo profile of the workspace's Cargo.toml: release (the default; small, quick to start) or quick (unoptimised, built in a fraction of the time)"
    need_bool SKIP_BUILD
    export LAMBDA_ARCH BUILD_PROFILE
}

lambda_arch_flag() { if [ "$LAMBDA_ARCH" = x86_64 ]; then printf -- --x86-64; else printf -- --arm64; fi; }

# The functions, always one command (one feature set, so that a second deploy, one in another
# mode, or make dist after it rebuilds nothing): the re-driver, the archiver, the shipped
# consumer (its binary needs the consumer crate's `http` feature) and the Step Functions task
# function, the triage console's widget and action functions: the ones a deploy uploads (the
# ones its mode runs); and the operator CLI `redrive`, so that make dist packs exactly the
# binaries deploy builds (LAMBDA_DIR/redrive/bootstrap is the CLI for LAMBDA_ARCH). `make build`
# runs the same.
LAMBDA_BINS=(redriver archiver consumer redrive-workflow triage-widget triage-action redrive)
build_lambdas() { # LAMBDA_DIR
    local cmd=(lambda build --profile "$BUILD_PROFILE" "$(lambda_arch_flag)" --lambda-dir "$1"
        --features redrive-consumer/http)
    local bin
    for bin in ${LAMBDA_BINS[@]+"${LAMBDA_BINS[@]}"}; do cmd+=(--bin "$bin"); done
    say "building the functions for $LAMBDA_ARCH: cargo ${cmd[*]}"
    # cargo-lambda moves each binary out of target/ once cargo has built it: two builds of one
    # clone at once (two deploys, or a deploy beside make build) would each find the other's
    # moved away. One at a time, where flock(1) exists (Linux; without it, run one at a time).
    local target=${CARGO_TARGET_DIR:-$REPO_DIR/target}
    mkdir -p "$target"
    if command -v flock >/dev/null 2>&1; then
        (cd "$REPO_DIR" && flock "$target/.lambda-build.lock" "$CARGO_LAMBDA" ${cmd[@]+"${cmd[@]}"})
    else
        (cd "$REPO_DIR" && "$CARGO_LAMBDA" ${cmd[@]+"${cmd[@]}"})
    fi
}

# ARTIFACTS=DIR: the functions of a release (make dist's directory, or its download) instead of
# a build, so that deploying needs no Rust toolchain: every file is checked against the
# release's SHA256SUMS first, then each function's zip for LAMBDA_ARCH is unpacked into
# LAMBDA_DIR/<function>/bootstrap.
use_artifacts() { # LAMBDA_DIR FUNCTION...
    local into=$1 out
    shift
    case $ARTIFACTS in /*) ;; *) ARTIFACTS=$REPO_DIR/$ARTIFACTS ;; esac
    if ! out=$("${PYTHON:-$REPO_DIR/.venv/bin/python}" "$REPO_DIR/scripts/dist_pack.py" unpack \
        --release "$ARTIFACTS" --arch "$LAMBDA_ARCH" --into "$into" ${@+"$@"}); then
        die "ARTIFACTS=$ARTIFACTS: $out" "Nothing in AWS was changed."
    fi
    say "ARTIFACTS=$ARTIFACTS: every file matches its SHA256SUMS; deploying its $LAMBDA_ARCH functions, nothing is built"
}

# The release's zip of one function for LAMBDA_ARCH (use_artifacts checked it exists).
artifact_zip() { # BINARY
    local zip
    for zip in "$ARTIFACTS"/redrive-*-"$1"-"$LAMBDA_ARCH".zip; do
        case ${zip##*/} in redrive-cli-*) continue ;; esac
        printf '%s' "$zip"
        return 0
    done
    return 1
}

# Stops before anything is changed when a bootstrap is not an ELF executable for LAMBDA_ARCH
# (Lambda would accept the upload and fail at the first invocation with Runtime.InvalidEntrypoint).
check_bootstrap_arch() { # FILE
    local magic machine want
    magic=$(od -An -tx1 -N4 "$1" | tr -d ' \n')
    machine=$(od -An -tu2 -j18 -N2 "$1" | tr -d ' \n')
    case $LAMBDA_ARCH in x86_64) want=62 ;; *) want=183 ;; esac
    if [ "$magic" != 7f454c46 ] || [ "$machine" != "$want" ]; then
        die "$1 is not a Linux $LAMBDA_ARCH executable (LAMBDA_ARCH=$LAMBDA_ARCH)." \
            "Build it for $LAMBDA_ARCH (SKIP_BUILD=false, the default, does), or set LAMBDA_ARCH to the binaries' architecture." \
            "Nothing in AWS was changed."
    fi
}

# ---------------------------------------------------------------- the functions' environment
# Values are single-quoted: cargo-lambda reads the file dotenv-style, and GUARD_ALARM_NAMES
# holds commas that --env-var would split.
write_env_file() {
    local file=$1 kv
    shift
    for kv in ${@+"$@"}; do printf "%s='%s'\n" "${kv%%=*}" "${kv#*=}"; done >"$file"
}

# The re-driver's environment from the resources stack's outputs (OUT_*) and the settings.
# Attach mode: DLQ_URLS (every protected DLQ; each message goes back to its own source) and no
# SOURCE_QUEUE_URL; each DLQ's trigger alarm is STACK-dlq-not-empty-<queue name> (the
# re-driver puts each DLQ's name for {queue}), re-armed by scheduled and manual drains too.
# Managed mode: TRIGGER_ALARM_NAME is DlqNotEmptyAlarm's name as resources.yaml and the roles
# spell it, so that scheduled and manual drains (and workflow executions) re-arm it too.
write_redriver_env() { # FILE
    local file=$1 queue_env guard name
    if attach_mode; then
        # The protected DLQs' list is in the circuit table (write_dlq_list): Lambda's 4 KB of
        # environment would hold some 25 URLs.
        queue_env=("DLQ_LIST_TABLE=$OUT_CircuitTableName" "TRIGGER_ALARM_NAME=$STACK_NAME-dlq-not-empty-{queue}")
    else
        queue_env=("DLQ_URL=$OUT_DeadLetterQueueUrl" "SOURCE_QUEUE_URL=$OUT_SourceQueueUrl"
            "TRIGGER_ALARM_NAME=$STACK_NAME-dlq-not-empty")
    fi
    # The guard: the template's default (the consumer's errors alarm) unless redrive.env names
    # others, or none. Attach mode has no consumer of ours: no default guard.
    case $GUARD_ALARM_NAMES in
        none) guard= ;;
        '') guard=${OUT_DefaultGuardAlarmNames-} ;;
        *) guard=$GUARD_ALARM_NAMES ;;
    esac
    write_env_file "$file" \
        ${queue_env[@]+"${queue_env[@]}"} \
        "POISON_QUEUE_URL=$OUT_PoisonQueueUrl" \
        "MAX_REDRIVE_ATTEMPTS=$MAX_REDRIVE_ATTEMPTS" \
        "BACKOFF_BASE_SECONDS=$BACKOFF_BASE_SECONDS" \
        "BACKOFF_MULTIPLIER=$BACKOFF_MULTIPLIER" \
        "BACKOFF_MAX_SECONDS=$BACKOFF_MAX_SECONDS" \
        "BACKOFF_JITTER=$BACKOFF_JITTER" \
        "MAX_MESSAGES_PER_INVOCATION=$MAX_MESSAGES_PER_INVOCATION" \
        "MAX_MESSAGES_PER_SECOND=$MAX_MESSAGES_PER_SECOND" \
        "GUARD_ALARM_NAMES=$guard" \
        "REARM_ALARM=$REARM_ALARM" \
        "METRIC_NAMESPACE=$OUT_MetricNamespace" \
        "DRY_RUN=$DRY_RUN" \
        "RUST_LOG=$RUST_LOG"
    # The adaptive circuit: on in every deploy (its table is in the stack); the rule's tunables
    # only where redrive.env sets them (the re-driver checks them at init, naming them).
    printf "%s='%s'\n" CIRCUIT_TABLE "$OUT_CircuitTableName" >>"$file"
    # Triage's book (group states and holds, `redrive triage`) lives in the same table, which
    # the functions read when TRIAGE_TABLE is unset: every drain keeps the holds operators set.
    for name in CIRCUIT_THRESHOLD CIRCUIT_MIN_BOUNCES CIRCUIT_WINDOW_SECONDS CIRCUIT_COOLDOWN_SECONDS \
        CIRCUIT_MAX_COOLDOWN_SECONDS CIRCUIT_CANARY_SIZE; do
        if [ -n "${!name-}" ]; then printf "%s='%s'\n" "$name" "${!name}" >>"$file"; fi
    done
}

# The archiver: its own role, the only one that may write the archive bucket. Each sweep keeps
# the queue's triage book (in the circuit table) current, reading the causes our consumer
# recorded in its idempotency table (CONSUMER=http: its key, its namespace, its function's name),
# and it sends the daily digest of the books to the alerts topic at the reminder hour.
write_archiver_env() { # FILE
    local dlqs="DLQ_URL=${OUT_DeadLetterQueueUrl-}"
    local causes=()
    if attach_mode; then dlqs="DLQ_LIST_TABLE=$OUT_CircuitTableName"; fi
    if ! attach_mode && [ "${CONSUMER-}" = http ]; then
        causes=("CAUSES_TABLE=${OUT_IdempotencyTableName-}" "CAUSES_KEY=$IDEMPOTENCY_KEY"
            "CAUSES_NAMESPACE=${OUT_ConsumerFunctionName-}")
    fi
    write_env_file "$1" ${causes[@]+"${causes[@]}"} \
        "ARCHIVE_BUCKET=$OUT_ArchiveBucketName" \
        "ARCHIVE_PREFIX=$OUT_ArchivePrefix" \
        "POISON_QUEUE_URL=$OUT_PoisonQueueUrl" \
        "$dlqs" \
        "ARCHIVE_DLQ=$ARCHIVE_DLQ" \
        "ARCHIVE_AFTER_DAYS=$ARCHIVE_AFTER_DAYS" \
        "METRIC_NAMESPACE=$OUT_MetricNamespace" \
        "ALERTS_TOPIC_ARN=$OUT_AlertsTopicArn" \
        "TRIAGE_TABLE=$OUT_CircuitTableName" \
        "REMINDER_HOUR_UTC=$POISON_REMINDER_HOUR_UTC" \
        "RUST_LOG=$RUST_LOG"
}

# The triage console's two functions (one environment): the books in the circuit table, the
# queues the widgets show and act on (attach mode: the protected DLQs of the list in the circuit
# table, DLQ_LIST_TABLE, and the poison queue), and the function the widgets' buttons call: the
# action function's alias live, an ARN built from its name (the dashboard's widgets call the
# widget's alias the same way). Both functions check it at init. The action's replay and discard
# move messages: archived to the archiver's bucket and prefix, a canary to SOURCE_QUEUE_URL (managed
# mode; attach mode: each DLQ's own sources, from SQS) judged on the DLQ and the poison queue.
write_triage_console_env() { # FILE
    local queues=("TRIAGE_QUEUE_URLS=${OUT_DeadLetterQueueUrl-},$OUT_PoisonQueueUrl" "SOURCE_QUEUE_URL=${OUT_SourceQueueUrl-}")
    if attach_mode; then
        queues=("TRIAGE_QUEUE_URLS=$OUT_PoisonQueueUrl" "DLQ_LIST_TABLE=$OUT_CircuitTableName")
    fi
    write_env_file "$1" \
        "TRIAGE_TABLE=$OUT_CircuitTableName" \
        ${queues[@]+"${queues[@]}"} \
        "TRIAGE_ACTION_FUNCTION=arn:$PARTITION:lambda:$AWS_REGION:$ACCOUNT_ID:function:$OUT_TriageActionFunctionName:live" \
        "TRIAGE_SHOW_BODIES=$TRIAGE_SHOW_BODIES" \
        "ARCHIVE_BUCKET=$OUT_ArchiveBucketName" \
        "ARCHIVE_PREFIX=$OUT_ArchivePrefix" \
        "POISON_QUEUE_URL=$OUT_PoisonQueueUrl" \
        "RUST_LOG=$RUST_LOG"
}

# Attach mode: the protected DLQs' URLs (PROTECTED_DLQ_URLS, comma separated) as the item the
# re-driver and the archiver read at init (DLQ_LIST_TABLE; redrive_engine::fleet_list): partition
# key `queue` = redrive:fleet:dlq-urls, attribute dlq_urls. DynamoDB holds 400 KB an item
# (infra/quotas.py checks it before any change).
write_dlq_list() { # TABLE FILE
    printf '{"queue":{"S":"redrive:fleet:dlq-urls"},"dlq_urls":{"S":"%s"}}' "$PROTECTED_DLQ_URLS" >"$2"
    aws_ dynamodb put-item --table-name "$1" --item "file://$2" ||
        die "could not write the protected DLQs' list to $1 (dynamodb:PutItem). No function was changed."
}

# The resources stack's outputs that the environments name, each at its longest, for the
# check before anything is changed (attach mode's DLQ_URLS is known by then; these are not).
longest_outputs() {
    local queue_prefix=https://sqs.ap-southeast-14.amazonaws.com/123456789012
    OUT_PoisonQueueUrl=$queue_prefix/$STACK_NAME-poison
    OUT_DeadLetterQueueUrl=$queue_prefix/$STACK_NAME-dlq
    OUT_SourceQueueUrl=$queue_prefix/$STACK_NAME-source
    OUT_DefaultGuardAlarmNames=$STACK_NAME-consumer-errors
    OUT_MetricNamespace=$METRIC_NAMESPACE
    OUT_CircuitTableName=$STACK_NAME-circuit
    OUT_AlertsTopicArn=arn:aws-us-gov:sns:ap-southeast-14:123456789012:$STACK_NAME-alerts
    # A bucket name CloudFormation generates: at most 63 characters.
    OUT_ArchiveBucketName=$(printf 'b%.0s' {1..63})
    OUT_ArchivePrefix=$ARCHIVE_PREFIX
    OUT_TriageActionFunctionName=$STACK_NAME-triage-action
}

# ---------------------------------------------------------------- region and credentials
# What destroy.sh and rollback.sh check before they touch anything: the settings, the tools, the
# region and the caller's credentials (deploy.sh validates its build settings too).
prepare_aws() {
    load_config
    find_tools
    validate_common_config
    resolve_region
    check_credentials
}

resolve_region() {
    if [ -z "${AWS_REGION-}" ]; then AWS_REGION=${AWS_DEFAULT_REGION-}; fi
    if [ -z "$AWS_REGION" ]; then AWS_REGION=$("$AWS_CLI" configure get region 2>/dev/null || true); fi
    [ -n "$AWS_REGION" ] || die "no AWS region configured." \
        "Set AWS_REGION in infra/redrive.env or the environment (e.g. AWS_REGION=eu-west-1 make deploy)," \
        "or configure one with 'aws configure'. Nothing was changed."
    need_match AWS_REGION '^[a-z]{2}(-[a-z]+)+-[0-9]+$' "an AWS region name such as eu-west-1"
    export AWS_REGION AWS_DEFAULT_REGION=$AWS_REGION
}

# Sets ACCOUNT_ID and PARTITION from the caller's identity.
check_credentials() {
    local out
    if ! out=$(aws_ sts get-caller-identity --query '[Account,Arn]' --output text 2>&1); then
        if grep -qiE 'Unable to locate credentials|NoCredentials|could not be found|partial credentials' <<<"$out"; then
            # The venv's AWS CLI (make setup) is v1, which has no `aws sso login`.
            die "no AWS credentials found." \
                "Configure them with 'aws configure' (access keys), or export AWS_PROFILE naming a profile" \
                "in ~/.aws/config, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN)." \
                "For IAM Identity Center (SSO), log in with an AWS CLI v2 installed separately" \
                "('aws sso login --profile NAME'; the CLI in .venv is v1 and has no 'sso login')," \
                "then export AWS_PROFILE=NAME. Run this again then. Nothing was changed."
        fi
        die "the AWS credentials were refused (aws sts get-caller-identity failed). Nothing was changed." \
            "AWS CLI said: $(tr '\n' ' ' <<<"$out")"
    fi
    ACCOUNT_ID=$(awk '{print $1}' <<<"$out")
    PARTITION=$(awk '{print $2}' <<<"$out" | cut -d: -f2)
    if [ -z "$ACCOUNT_ID" ] || [ -z "$PARTITION" ]; then die "could not read the account from: $out"; fi
}

# ---------------------------------------------------------------- CloudFormation
RESOURCES_STACK() { printf '%s' "$STACK_NAME"; }
WIRING_STACK() { printf '%s-wiring' "$STACK_NAME"; }

# Prints the stack's status and, after a tab, whether its termination protection is on (True
# or False), in one call; NONE when it does not exist.
stack_state() {
    local out
    if out=$(aws_ cloudformation describe-stacks --stack-name "$1" \
        --query 'Stacks[0].[StackStatus,EnableTerminationProtection]' --output text 2>&1); then
        printf '%s' "$out"
    elif grep -q 'does not exist' <<<"$out"; then
        printf 'NONE'
    else
        die "could not read the state of stack $1. Nothing was changed." "AWS CLI said: $(tr '\n' ' ' <<<"$out")"
    fi
}

# Prints the stack's status, or NONE when it does not exist.
stack_status() {
    local state
    state=$(stack_state "$1") || exit 1
    printf '%s' "${state%%$'\t'*}"
}

failed_events_hint() {
    printf 'aws cloudformation describe-stack-events --region %s --stack-name %s --query "StackEvents[?contains(ResourceStatus,'"'"'FAILED'"'"')].[LogicalResourceId,ResourceStatusReason]" --output text' "$AWS_REGION" "$1"
}

die_update_rollback_failed() {
    die "stack $1 is in UPDATE_ROLLBACK_FAILED: an update failed and so did its rollback." \
        "1. See why:  $(failed_events_hint "$1")" \
        "2. Fix the cause, then finish the rollback:" \
        "   aws cloudformation continue-update-rollback --region $AWS_REGION --stack-name $1" \
        "   (add --resources-to-skip LOGICAL_ID for a resource that cannot be rolled back)" \
        "3. Run make deploy again." \
        "Nothing was changed."
}

# Stops with a fix for a stack that CloudFormation cannot update, before anything is changed.
# $2 = deploy | destroy; $3, when given, names a variable that receives the status (NONE when
# the stack does not exist), so that the caller reads it once.
check_stack_usable() {
    local stack=$1 purpose=$2 status state
    state=$(stack_state "$stack")
    status=${state%%$'\t'*}
    if [ "${state#*$'\t'}" = True ]; then PROTECTED_STACKS="${PROTECTED_STACKS-} $stack "; fi
    if [ -n "${3-}" ]; then printf -v "$3" '%s' "$status"; fi
    case $status in
        NONE | CREATE_COMPLETE | UPDATE_COMPLETE | UPDATE_ROLLBACK_COMPLETE | IMPORT_COMPLETE | IMPORT_ROLLBACK_COMPLETE) ;;
        ROLLBACK_COMPLETE | ROLLBACK_FAILED | DELETE_FAILED | REVIEW_IN_PROGRESS | UPDATE_ROLLBACK_FAILED)
            [ "$purpose" = destroy ] && return 0
            [ "$status" = UPDATE_ROLLBACK_FAILED ] && die_update_rollback_failed "$stack"
            local why
            case $status in
                ROLLBACK_COMPLETE) why="its first creation failed and was rolled back" ;;
                ROLLBACK_FAILED) why="its first creation failed and so did the rollback" ;;
                DELETE_FAILED) why="a deletion of it failed half-way" ;;
                REVIEW_IN_PROGRESS) why="a change set was created for it but never executed" ;;
            esac
            die "stack $stack is in $status: $why. CloudFormation cannot update a stack in this state." \
                "1. See why:  $(failed_events_hint "$stack")" \
                "2. Fix the cause (often a name already taken, a quota or a missing permission)." \
                "3. Delete that stack:  aws cloudformation delete-stack --region $AWS_REGION --stack-name $stack" \
                "   or, better, make destroy: it also removes the queues and the table the stack retains" \
                "   (DeletionPolicy Retain), which would otherwise block the next creation's names;" \
                "   it refuses while the DLQ or the poison queue holds messages (FORCE=1 deletes them)" \
                "4. Run make deploy again." \
                "Nothing was changed."
            ;;
        *_IN_PROGRESS)
            die "stack $stack is busy ($status): another CloudFormation operation is running." \
                "Wait for it to finish (aws cloudformation describe-stacks --region $AWS_REGION --stack-name $stack)," \
                "then run make ${purpose} again. Nothing was changed."
            ;;
        *)
            die "stack $stack is in an unexpected state: $status. Nothing was changed." \
                "See: $(failed_events_hint "$stack")"
            ;;
    esac
}

explain_stack_failure() { # STACK ACTION
    local stack=$1 action=$2 status events
    status=$(stack_status "$stack")
    events=$(aws_ cloudformation describe-stack-events --stack-name "$stack" \
        --query "StackEvents[?contains(ResourceStatus,'FAILED')].[LogicalResourceId,ResourceStatus,ResourceStatusReason]" \
        --output text 2>/dev/null | head -n 10 || true)
    printf '\nCloudFormation reported:\n%s\n' "${events:-  (no failed events)}" >&2
    case $status in
        ROLLBACK_COMPLETE | ROLLBACK_FAILED)
            die "$action of stack $stack failed and it was rolled back ($status)." \
                "Fix the cause above, delete the stack and deploy again:" \
                "  aws cloudformation delete-stack --region $AWS_REGION --stack-name $stack" \
                "  make deploy" ;;
        *)
            die "$action of stack $stack failed; it is now $status." \
                "Fix the cause above and run make deploy again (see infra/README.md, 'When a deploy fails')." ;;
    esac
}

# Seconds to wait before retrying after SQS refused a queue name it deleted less than 60 s ago
# (QueueDeletedRecently), and how often. Tests set the wait to 0.
QUEUE_NAME_REUSE_WAIT_SECONDS=${QUEUE_NAME_REUSE_WAIT_SECONDS:-65}
QUEUE_NAME_REUSE_ATTEMPTS=${QUEUE_NAME_REUSE_ATTEMPTS:-3}

failed_reasons() { # STACK: the reasons of its failed events, one per line
    aws_ cloudformation describe-stack-events --stack-name "$1" \
        --query "StackEvents[?contains(ResourceStatus,'FAILED')].ResourceStatusReason" \
        --output text 2>/dev/null || true
}

# After a failed first creation: delete what the attempt created and kept (DeletionPolicy
# Retain keeps a queue or a table through the rollback too), then the stack, so that the next
# attempt starts from nothing. Only resources whose creation completed in this attempt are
# deleted; they are seconds old and nothing has written to them.
discard_failed_creation() { # STACK
    local stack=$1 logical physical status
    while IFS=$'\t' read -r logical physical status; do
        [ -n "$physical" ] && [ "$physical" != None ] || continue
        case $status in CREATE_COMPLETE | DELETE_SKIPPED) ;; *) continue ;; esac
        case $logical in
            SourceQueue | DeadLetterQueue | PoisonQueue)
                say "deleting queue $physical, created by the failed attempt"
                aws_ sqs delete-queue --queue-url "$physical" >/dev/null 2>&1 || true ;;
            IdempotencyTable | CircuitTable)
                say "deleting table $physical, created by the failed attempt"
                aws_ dynamodb delete-table --table-name "$physical" >/dev/null 2>&1 || true
                aws_ dynamodb wait table-not-exists --table-name "$physical" 2>/dev/null || true ;;
        esac
    done < <(aws_ cloudformation list-stack-resources --stack-name "$stack" \
        --query 'StackResourceSummaries[].[LogicalResourceId,PhysicalResourceId,ResourceStatus]' --output text 2>/dev/null || true)
    aws_ cloudformation delete-stack --stack-name "$stack"
    aws_ cloudformation wait stack-delete-complete --stack-name "$stack" ||
        die "could not delete the failed stack $stack before retrying." "See: $(failed_events_hint "$stack")"
}

# Termination protection on: a stack of this system is deleted by make destroy (which checks
# that no messages are parked first), not by a stray delete-stack. A stack that had it on when
# deploy started (check_stack_usable read it) or that this deploy turned it on for is left as it
# is: nothing in a deploy turns it off.
protect_stack() { # STACK
    case " ${PROTECTED_STACKS-} " in *" $1 "*) return 0 ;; esac
    aws_ cloudformation update-termination-protection --enable-termination-protection --stack-name "$1" >/dev/null
    PROTECTED_STACKS="${PROTECTED_STACKS-} $1 "
}

# The template as deploy_stack sends it: compact JSON (infra/cfn_yaml.py: no comments, no
# indentation, the short-form tags in their long form), the same template in meaning, about a
# quarter smaller than the YAML (infra/README.md, "Template size").
template_body() { # TEMPLATE OUT
    local python=${PYTHON:-$REPO_DIR/.venv/bin/python}
    [ -x "$python" ] || python=$(command -v python3 || true)
    [ -n "$python" ] || die "python3 was not found (it turns the templates into compact JSON)." "Run 'make setup'."
    "$python" "$INFRA_DIR/cfn_yaml.py" compact "$1" "$2" ||
        die "cannot read the template $1 (see above)." "Nothing more was changed."
}

# CloudFormation refuses a CreateStack/UpdateStack TemplateBody above 51,200 bytes; a larger
# template goes through S3 (TemplateURL, up to 1 MB). TEMPLATE_BODY_LIMIT lowers the switch
# point in tests.
TEMPLATE_BODY_LIMIT=${TEMPLATE_BODY_LIMIT:-51200}

# The bucket for templates above that limit: TEMPLATE_BUCKET, else
# redrive-templates-ACCOUNT-REGION, created private on first use. Each template is deleted once
# its stack operation has read it; a lifecycle rule removes what a failed deploy leaves behind.
template_bucket() {
    local bucket=${TEMPLATE_BUCKET:-redrive-templates-$ACCOUNT_ID-$AWS_REGION} out
    if ! aws_ s3api head-bucket --bucket "$bucket" >/dev/null 2>&1; then
        say "creating bucket $bucket for templates above CloudFormation's TemplateBody limit"
        if [ "$AWS_REGION" = us-east-1 ]; then
            out=$(aws_ s3api create-bucket --bucket "$bucket" 2>&1)
        else
            out=$(aws_ s3api create-bucket --bucket "$bucket" --create-bucket-configuration "LocationConstraint=$AWS_REGION" 2>&1)
        fi || die "could not create the template bucket $bucket." "AWS CLI said: $(tr '\n' ' ' <<<"$out")" \
            "Name an existing bucket of this account and region in TEMPLATE_BUCKET."
        aws_ s3api put-public-access-block --bucket "$bucket" --public-access-block-configuration \
            BlockPublicAcls=true,IgnorePublicAcls=true,BlockPublicPolicy=true,RestrictPublicBuckets=true >/dev/null
        aws_ s3api put-bucket-lifecycle-configuration --bucket "$bucket" --lifecycle-configuration \
            '{"Rules":[{"ID":"templates","Status":"Enabled","Filter":{"Prefix":""},"Expiration":{"Days":1}}]}' >/dev/null
    fi
    printf '%s' "$bucket"
}

# The archiver-read age alarms' threshold: a day after ARCHIVE_AFTER_DAYS (some 24 hourly runs
# that failed to archive the message), at most 13 days (a day before the 14-day retention).
archive_age_alarm_seconds() {
    awk -v days="$ARCHIVE_AFTER_DAYS" 'BEGIN { s = (days + 1) * 86400; if (s > 1123200) s = 1123200; printf "%d", s }'
}

# The template of STACK where a change set reads it: TEMPLATE as compact JSON (template_body,
# written next to PARAMS_JSON_FILE) in --template-body, or above TEMPLATE_BODY_LIMIT uploaded to
# the template bucket and named by --template-url. Sets TEMPLATE_SOURCE (the CLI's arguments),
# TEMPLATE_JSON (the compact file), and TEMPLATE_S3_BUCKET/TEMPLATE_S3_KEY (empty without an
# upload) for discard_template once CloudFormation has read it.
prepare_template() { # STACK TEMPLATE PARAMS_JSON_FILE
    local stack=$1 template=$2 body=${3%.json}.template.json size bucket key out
    template_body "$template" "$body"
    TEMPLATE_JSON=$body
    TEMPLATE_S3_BUCKET=''
    TEMPLATE_S3_KEY=''
    TEMPLATE_SOURCE=(--template-body "file://$body")
    size=$(wc -c <"$body" | tr -d ' ')
    if ((size > TEMPLATE_BODY_LIMIT)); then
        # The bucket is created (template_bucket) when the upload finds none.
        bucket=${TEMPLATE_BUCKET:-redrive-templates-$ACCOUNT_ID-$AWS_REGION}
        key=$stack/$(date -u +%Y%m%dT%H%M%SZ)-$(basename "$template" .yaml).json
        if ! out=$(aws_ s3api put-object --bucket "$bucket" --key "$key" --body "$body" 2>&1 >/dev/null); then
            grep -q NoSuchBucket <<<"$out" ||
                die "could not upload the template of $stack to s3://$bucket/$key." "AWS CLI said: $(tr '\n' ' ' <<<"$out")" \
                    "Nothing more was changed."
            bucket=$(template_bucket)
            aws_ s3api put-object --bucket "$bucket" --key "$key" --body "$body" >/dev/null ||
                die "could not upload the template of $stack to s3://$bucket/$key." "Nothing more was changed."
        fi
        say "template of $stack is $size bytes, above the $TEMPLATE_BODY_LIMIT of a TemplateBody: sending it through s3://$bucket/$key"
        TEMPLATE_S3_BUCKET=$bucket
        TEMPLATE_S3_KEY=$key
        TEMPLATE_SOURCE=(--template-url "https://$bucket.s3.$AWS_REGION.amazonaws.com/$key")
    fi
}

# How often and how long a change set's creation is polled (DescribeChangeSet, which also
# returns the changes once it is complete: one call where the AWS CLI's waiter polls every 30 s).
CHANGE_SET_POLL_SECONDS=${CHANGE_SET_POLL_SECONDS:-2}
CHANGE_SET_WAIT_SECONDS=${CHANGE_SET_WAIT_SECONDS:-600}

changeset_py() { "${PYTHON:-$REPO_DIR/.venv/bin/python}" "$INFRA_DIR/changeset.py" ${@+"$@"}; }

# Creates a change set of STACK (TYPE CREATE for a stack that does not exist, which
# CloudFormation then holds in REVIEW_IN_PROGRESS; UPDATE otherwise) from prepare_template's
# template and PARAMS_JSON_FILE, waits for it and prints it on stdout (infra/changeset.py show).
# Sets CHANGE_SET_ID and CHANGE_SET_OUTCOME: changes, risky (a queue, table or bucket replaced
# or removed: the `!! ...` lines) or none (CloudFormation found nothing to change: the change set
# is deleted again, CHANGE_SET_ID is empty). Stops, with nothing changed, when CloudFormation
# refuses the change set.
create_change_set() { # STACK TYPE PARAMS_JSON_FILE
    local stack=$1 type=$2 params=$3 name out described=${3%.json}.changeset.json state reason tries=0
    local extra=() nested=() files=() arn rc=0
    name=redrive-$(date -u +%Y%m%dT%H%M%S)-$RANDOM
    # Nested stacks (AWS::CloudFormation::Stack) get change sets of their own, shown under theirs.
    if grep -q '"AWS::CloudFormation::Stack"' "$TEMPLATE_JSON"; then extra=(--include-nested-stacks); fi
    CHANGE_SET_ID=''
    CHANGE_SET_OUTCOME=none
    if ! out=$(aws_ cloudformation create-change-set --stack-name "$stack" --change-set-name "$name" \
        --change-set-type "$type" ${TEMPLATE_SOURCE[@]+"${TEMPLATE_SOURCE[@]}"} --parameters "file://$params" \
        --capabilities CAPABILITY_IAM --tags "Key=project,Value=redrive" "Key=redrive:stack,Value=$STACK_NAME" \
        ${extra[@]+"${extra[@]}"} --query Id --output text 2>&1); then
        if grep -qE "No updates are to be performed|didn't contain changes" <<<"$out"; then
            printf 'stack %s: no changes\n' "$stack"
            return 0
        fi
        discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
        die "CloudFormation refused a change set for stack $stack." "AWS CLI said: $(tr '\n' ' ' <<<"$out")" \
            "Nothing more was changed."
    fi
    CHANGE_SET_ID=$out
    while :; do
        aws_ cloudformation describe-change-set --change-set-name "$CHANGE_SET_ID" --output json >"$described" ||
            die "could not read the change set $CHANGE_SET_ID of stack $stack (cloudformation:DescribeChangeSet)." \
                "Nothing more was changed; delete it with: aws cloudformation delete-change-set --region $AWS_REGION --change-set-name $CHANGE_SET_ID"
        out=$(changeset_py status "$described")
        IFS=$'\t' read -r state _ reason <<<"${out%%$'\n'*}"
        case $state in CREATE_COMPLETE | FAILED) break ;; esac
        tries=$((tries + CHANGE_SET_POLL_SECONDS))
        ((tries < CHANGE_SET_WAIT_SECONDS)) || die "the change set of stack $stack was not ready after $CHANGE_SET_WAIT_SECONDS s (status $state)." \
            "Nothing more was changed; see: aws cloudformation describe-change-set --region $AWS_REGION --change-set-name $CHANGE_SET_ID"
        sleep "$CHANGE_SET_POLL_SECONDS"
    done
    if [ "$state" = FAILED ]; then
        if grep -qE "No updates are to be performed|didn't contain changes" <<<"$reason"; then
            printf 'stack %s: no changes\n' "$stack"
            drop_change_set "$stack" "$type"
            CHANGE_SET_ID=''
            return 0
        fi
        drop_change_set "$stack" "$type"
        discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
        die "CloudFormation could not create a change set for stack $stack: $reason" "Nothing more was changed."
    fi
    # The nested stacks' change sets (their ARNs follow the status line).
    while IFS= read -r arn; do [ -n "$arn" ] && nested+=("$arn"); done < <(tail -n +2 <<<"$out")
    for arn in ${nested[@]+"${nested[@]}"}; do
        files+=("${described%.json}.nested${#files[@]}.json")
        aws_ cloudformation describe-change-set --change-set-name "$arn" --output json >"${files[${#files[@]} - 1]}" ||
            die "could not read the nested change set $arn of stack $stack." "Nothing more was changed."
    done
    changeset_py show "$stack" "$described" ${files[@]+"${files[@]}"} || rc=$?
    case $rc in
        0) CHANGE_SET_OUTCOME=changes ;;
        3) CHANGE_SET_OUTCOME=risky ;;
        *) die "could not show the change set of stack $stack (see above)." ;;
    esac
}

# Deletes the change set CHANGE_SET_ID; for a stack that did not exist (TYPE CREATE), the empty
# REVIEW_IN_PROGRESS stack that holds it, so that nothing is left behind.
drop_change_set() { # STACK TYPE
    if [ "$2" = CREATE ]; then
        if ! { aws_ cloudformation delete-stack --stack-name "$1" &&
            aws_ cloudformation wait stack-delete-complete --stack-name "$1"; }; then
            say "could not delete the empty stack $1 (REVIEW_IN_PROGRESS); delete it with: aws cloudformation delete-stack --region $AWS_REGION --stack-name $1"
        fi
    elif [ -n "$CHANGE_SET_ID" ]; then
        aws_ cloudformation delete-change-set --change-set-name "$CHANGE_SET_ID" >/dev/null ||
            say "could not delete the change set $CHANGE_SET_ID of stack $1"
    fi
}

# deploy_stack STACK TEMPLATE PARAMS_JSON_FILE [STATUS]: STATUS is the stack's status as
# check_stack_usable read it at the start (read again when not given). Goes through a change
# set that it prints before executing it; a change set that replaces or removes a queue, a table
# or a bucket (the new one would be empty, the old one kept outside the stack with what it
# holds) is not executed unless ALLOW_REPLACEMENT=true.
deploy_stack() {
    local stack=$1 template=$2 params=$3 attempt=1 status type=UPDATE
    status=${4:-$(stack_status "$1")}
    [ "$status" = NONE ] && type=CREATE
    prepare_template "$stack" "$template" "$params"
    while :; do
        if [ "$type" = CREATE ]; then say "creating stack $stack"; else say "updating stack $stack"; fi
        create_change_set "$stack" "$type" "$params"
        if [ "$CHANGE_SET_OUTCOME" = none ]; then
            discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
            say "stack $stack is up to date"
            protect_stack "$stack"
            return 0
        fi
        if [ "$CHANGE_SET_OUTCOME" = risky ] && [ "${ALLOW_REPLACEMENT:-false}" != true ]; then
            drop_change_set "$stack" "$type"
            discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
            die "the change set of stack $stack replaces or removes a queue, a table or a bucket (the !! lines above)." \
                "The stack would move to a new, empty one; the old one stays outside the stack (DeletionPolicy Retain)" \
                "with what it holds, no longer read by redrive. Drain it first (make plan shows the change set again)," \
                "then run ALLOW_REPLACEMENT=true make deploy. Stack $stack was not changed."
        fi
        say "executing change set of stack $stack"
        aws_ cloudformation execute-change-set --change-set-name "$CHANGE_SET_ID" >/dev/null ||
            die "CloudFormation refused to execute the change set of stack $stack." \
                "See: aws cloudformation describe-change-set --region $AWS_REGION --change-set-name $CHANGE_SET_ID"
        if [ "$type" = UPDATE ]; then
            aws_ cloudformation wait stack-update-complete --stack-name "$stack" || explain_stack_failure "$stack" "update"
            break
        fi
        aws_ cloudformation wait stack-create-complete --stack-name "$stack" && break
        # SQS refuses a queue name for 60 s after that queue was deleted (make destroy, then
        # make deploy): wait and create the stack again.
        if failed_reasons "$stack" | grep -qE 'QueueDeletedRecently|wait 60 seconds after deleting a queue' &&
            ((attempt < QUEUE_NAME_REUSE_ATTEMPTS)); then
            say "SQS refuses a queue name deleted less than 60 s ago (QueueDeletedRecently):" \
                "removing the failed stack, retrying in ${QUEUE_NAME_REUSE_WAIT_SECONDS} s (attempt $((attempt + 1)) of $QUEUE_NAME_REUSE_ATTEMPTS)"
            discard_failed_creation "$stack"
            sleep "$QUEUE_NAME_REUSE_WAIT_SECONDS"
            attempt=$((attempt + 1))
            continue
        fi
        explain_stack_failure "$stack" "creation"
    done
    discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
    protect_stack "$stack"
}

# plan_stack STACK TEMPLATE PARAMS_JSON_FILE STATUS: the change set deploy_stack would execute,
# printed and deleted again (with the empty stack a CREATE change set makes); nothing changes.
plan_stack() {
    local stack=$1 template=$2 params=$3 status=$4 type=UPDATE
    [ "$status" = NONE ] && type=CREATE
    prepare_template "$stack" "$template" "$params"
    create_change_set "$stack" "$type" "$params"
    if [ "$CHANGE_SET_OUTCOME" = risky ]; then
        printf '%s\n' "make deploy stops before this change set unless ALLOW_REPLACEMENT=true (see the !! lines)."
    fi
    if [ "$CHANGE_SET_OUTCOME" != none ]; then drop_change_set "$stack" "$type"; fi
    discard_template "$TEMPLATE_S3_BUCKET" "$TEMPLATE_S3_KEY"
}

# Attach mode's nested stacks (the alarms of the protected DLQs, infra/attach_template.py): their
# templates are read from S3 whatever their size, under STACK/alarms/ in the template bucket,
# each under its content's digest (so that CloudFormation updates the nested stacks whose
# template changed, and only those).
nested_template_prefix() { # STACK: the URL attach_template.py names the nested templates under
    local bucket
    bucket=$(template_bucket) || exit 1
    printf 'https://%s.s3.%s.amazonaws.com/%s/alarms/' "$bucket" "$AWS_REGION" "$1"
}
upload_nested_templates() { # DIR URL_PREFIX: uploads each file of DIR under its name
    local file bucket=${2#https://} key
    bucket=${bucket%%.s3.*}
    for file in "$1"/*; do
        [ -f "$file" ] || continue
        key=${2#https://*/}$(basename "$file")
        aws_ s3api put-object --bucket "$bucket" --key "$key" --body "$file" >/dev/null ||
            die "could not upload the nested template s3://$bucket/$key." "Nothing more was changed."
    done
}
discard_nested_templates() { # DIR URL_PREFIX: once the stack operation has read them
    local file bucket=${2#https://}
    bucket=${bucket%%.s3.*}
    for file in "$1"/*; do
        [ -f "$file" ] && discard_template "$bucket" "${2#https://*/}$(basename "$file")"
    done
    return 0
}

discard_template() { # BUCKET KEY: the copy in S3, once CloudFormation has read it (none: nothing)
    if [ -n "$2" ]; then aws_ s3api delete-object --bucket "$1" --key "$2" >/dev/null || true; fi
}

# Writes a CloudFormation parameters file from KEY=VALUE arguments (values are pre-validated:
# no quotes, backslashes or line breaks).
write_params() {
    local file=$1 first=1 kv
    shift
    {
        printf '['
        for kv in ${@+"$@"}; do
            case $kv in *'"'* | *\\*) die "stack parameter ${kv%%=*} must not contain \" or \\" ;; esac
            [ $first = 1 ] || printf ','
            first=0
            printf '\n  {"ParameterKey": "%s", "ParameterValue": "%s"}' "${kv%%=*}" "${kv#*=}"
        done
        printf '\n]\n'
    } >"$file"
}

# Reads a stack's outputs into OUT_<OutputKey> variables.
read_outputs() {
    local key value
    while IFS=$'\t' read -r key value; do
        [ -n "$key" ] && [ "$key" != None ] && printf -v "OUT_$key" '%s' "$value"
    done < <(aws_ cloudformation describe-stacks --stack-name "$1" \
        --query 'Stacks[0].Outputs[].[OutputKey,OutputValue]' --output text)
}

# ---------------------------------------------------------------- Step Functions orchestrator
# The wiring template with the state machine's definition in it: the line of TEMPLATE holding
# @REDRIVE_ASL@ (the placeholder of StateMachine's DefinitionString block) is replaced by the
# ASL file, indented as that line was. Used by deploy.sh and by make lint-infra.
render_wiring_template() { # TEMPLATE ASL_FILE OUT
    local template=$1 asl=$2 out=$3 markers
    [ -f "$asl" ] || die "the state machine definition $asl is missing."
    markers=$(grep -c '@REDRIVE_ASL@' "$template" || true)
    [ "$markers" = 1 ] || die "$template must hold exactly one @REDRIVE_ASL@ line (found $markers)."
    awk -v asl="$asl" '
        /@REDRIVE_ASL@/ {
            match($0, /^ */)
            indent = substr($0, 1, RLENGTH)
            while ((getline line < asl) > 0) print (line == "" ? "" : indent line)
            close(asl)
            next
        }
        { print }
    ' "$template" >"$out"
}

//! IAM in tests: every function and the CLI run under the policy that `infra/templates/` gives
//! them, on the test's own resources, and moto refuses what that policy does not allow, as AWS
//! would (AccessDenied, HTTP 403).
//!
//! - moto authorizes every request (`tests/moto_launcher.py`). The harness's own calls (the
//!   clients of `Moto::sdk_config`, a test's setup and checks) use the launcher's admin user.
//! - `LambdaWatch` starts a function whose binary has a role (`role_of_binary`) with the
//!   credentials of a user holding that role's policies, rendered by `tests/iam_policy.py` for
//!   the resources the function's environment names (`resources_from_env`): a grant missing
//!   from a template fails the test with AccessDenied.
//! - The `redrive` CLI runs under the operator's managed policy (`cli_env`), plus what the
//!   operator's own identity grants beyond it when a test says so (`cli_env_with`): their own
//!   export bucket (`own_bucket_statement`), which the stack's policy does not grant.
//!
//! Only against a moto of this process: an environment that points elsewhere (a proxy, another
//! emulator) is left as it is.
//!
//! ```no_run
//! # async fn demo() {
//! use redrive_tests::{QueueSet, iam, moto};
//! let queues = QueueSet::create(&moto().sqs().await, false, 3).await;
//! let mut env = moto().env();
//! env.extend(queues.redriver_env());
//! // What `LambdaWatch` gives the `redriver` binary:
//! let env = iam::env_for_binary(&env, "redriver");
//! # let _ = env;
//! # }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;
use redrive_shared::sync::lock;
use serde_json::{Value, json};

use crate::moto::Moto;

/// The logical id, in `infra/templates/`, of the role or managed policy a workspace binary
/// runs under on AWS; None for a binary that is no part of a deployment (the harness's own).
pub fn role_of_binary(binary: &str) -> Option<&'static str> {
    match binary {
        "redriver" => Some("RedriverRole"),
        // The consumer crate's documented example is a consumer Lambda too.
        "consumer" | "charge_orders" => Some("ConsumerRole"),
        "archiver" => Some("ArchiverRole"),
        "redrive-workflow" => Some("WorkflowRole"),
        // The triage console: the dashboard's widget (read only), and its buttons' function.
        "triage-widget" => Some("TriageWidgetRole"),
        "triage-action" => Some("TriageActionRole"),
        "redrive" => Some(OPERATOR_POLICY),
        _ => None,
    }
}

/// The managed policy of the operator's `redrive` CLI.
pub const OPERATOR_POLICY: &str = "OperatorPolicy";

/// The managed policies a `redrive` command line runs under (`A+B`: both): `triage` commands
/// under the triage policies that name what they do, which add up (a reader holds read; an
/// actor read and act; a discarder read and discard; a pass with `--table` records the book,
/// which is acting), every other command under the operator's; with `--stack NAME`, the
/// stack's policy too.
pub fn cli_policy(args: &[&str]) -> &'static str {
    // `--stack NAME` reads the stack's outputs: the operator holds the stack's policy too.
    if args.contains(&"--stack") {
        return if args.contains(&"triage") {
            "TriageReadPolicy+TriageActPolicy+StackOutputsPolicy"
        } else {
            "OperatorPolicy+StackOutputsPolicy"
        };
    }
    if args.first() != Some(&"triage") {
        return OPERATOR_POLICY;
    }
    match args.get(1).copied() {
        Some("ack" | "hold" | "release" | "note" | "replay") => TRIAGE_ACTOR,
        Some("discard") => "TriageReadPolicy+TriageDiscardPolicy",
        Some("show" | "history") => TRIAGE_READER,
        _ if args.contains(&"--table") => TRIAGE_ACTOR,
        _ => TRIAGE_READER,
    }
}

/// Who may read DLQs by cause.
pub const TRIAGE_READER: &str = "TriageReadPolicy";
/// Who may act on triage groups.
pub const TRIAGE_ACTOR: &str = "TriageReadPolicy+TriageActPolicy";

/// The functions' variables that name a resource of the stack, and its logical id (or the
/// template parameter) in `infra/templates/`.
const RESOURCE_VARIABLES: [(&str, &str); 11] = [
    ("DLQ_URL", "DeadLetterQueue"),
    ("SOURCE_QUEUE_URL", "SourceQueue"),
    ("POISON_QUEUE_URL", "PoisonQueue"),
    ("CIRCUIT_TABLE", "CircuitTable"),
    ("TRIAGE_TABLE", "CircuitTable"),
    ("ALERTS_TOPIC_ARN", "AlertsTopic"),
    ("IDEMPOTENCY_TABLE", "IdempotencyTable"),
    ("CAUSES_TABLE", "IdempotencyTable"),
    ("ARCHIVE_BUCKET", "ArchiveBucket"),
    ("ARCHIVE_PREFIX", "ArchivePrefix"),
    ("METRIC_NAMESPACE", "MetricNamespace"),
];

/// Logical id -> physical name (queue, table, bucket) or parameter value, as
/// `tests/iam_policy.py` resolves the templates' references with.
pub type Resources = BTreeMap<String, String>;

/// The stack's resources that an environment names (`RESOURCE_VARIABLES`): a queue URL
/// becomes the queue's name, a topic ARN the topic's.
pub fn resources_from_env(env: &[(String, String)]) -> Resources {
    let mut resources = Resources::new();
    for (variable, logical_id) in RESOURCE_VARIABLES {
        let Some((_, value)) = env.iter().rev().find(|(k, _)| k == variable) else {
            continue;
        };
        let value = if variable.ends_with("_URL") {
            queue_name(value)
        } else if variable.ends_with("_ARN") {
            value.rsplit(':').next().unwrap_or_default().to_string()
        } else {
            value.clone()
        };
        resources.insert(logical_id.to_string(), value);
    }
    // The triage console's queues: a DLQ and the poison queue, told apart by their `QueueSet`
    // names (`<base>-dlq`, `<base>-poison`).
    if let Some((_, list)) = env.iter().rev().find(|(k, _)| k == "TRIAGE_QUEUE_URLS") {
        for url in list.split(',').map(str::trim).filter(|u| !u.is_empty()) {
            let name = queue_name(url);
            let id = if name.trim_end_matches(".fifo").ends_with("-poison") {
                "PoisonQueue"
            } else {
                "DeadLetterQueue"
            };
            resources.entry(id.to_string()).or_insert(name);
        }
    }
    resources
}

/// The environment a workspace binary runs with: `env` with the access key of its role
/// (`role_of_binary`) for the resources `env` names, when `env` points at a moto of this
/// process; otherwise `env` unchanged.
pub fn env_for_binary(env: &[(String, String)], binary: &str) -> Vec<(String, String)> {
    match role_of_binary(binary) {
        Some(role) => env_for_role(env, role, &resources_from_env(env)),
        None => env.to_vec(),
    }
}

/// The environment of the `redrive` CLI run with `args`: `env` (moto's, plus the test's
/// variables) with the access key of the operator's policy, for the resources that `env` and
/// `args` name, the arguments winning as in the CLI. A queue URL argument is the DLQ, the
/// poison or the source queue by its flag (`--dlq`, `--poison`, `--source`) or else by its
/// `QueueSet` name (`<base>-dlq`, `<base>-poison`, `<base>`), and names its siblings too: the
/// operator's policy covers the stack's three queues whichever the command is given.
/// `--circuit-table`, an `s3://BUCKET/...` location and `--state-machine` name the table, the
/// archive bucket and the state machine; `--stack NAME` the resources of the stack `NAME`, as
/// the template names them.
pub fn cli_env(env: &[(String, String)], args: &[&str]) -> Vec<(String, String)> {
    cli_env_with(env, args, &[])
}

/// `cli_env` for an operator whose own identity also holds the IAM statements `extra`, beyond
/// the stack's managed policy (e.g. `own_bucket_statement`). An `s3://BUCKET/...` argument
/// whose bucket `extra` names is that bucket of the operator's, not the stack's archive bucket.
pub fn cli_env_with(
    env: &[(String, String)],
    args: &[&str],
    extra: &[Value],
) -> Vec<(String, String)> {
    cli_env_as(env, args, extra, cli_policy(args))
}

/// `cli_env_with` under the managed policy `policy` (e.g. a reader trying to act).
pub fn cli_env_as(
    env: &[(String, String)],
    args: &[&str],
    extra: &[Value],
    policy: &str,
) -> Vec<(String, String)> {
    let mut resources = resources_from_env(env);
    let mut first_queue: Option<String> = None;
    for (i, arg) in args.iter().enumerate() {
        let flag = i.checked_sub(1).map(|p| args[p]).unwrap_or_default();
        if arg.starts_with("http://") || arg.starts_with("https://") {
            let name = queue_name(arg);
            let stem = name.trim_end_matches(".fifo");
            let id = match flag {
                "--dlq" => "DeadLetterQueue",
                "--poison" => "PoisonQueue",
                "--source" => "SourceQueue",
                _ if stem.ends_with("-dlq") => "DeadLetterQueue",
                _ if stem.ends_with("-poison") => "PoisonQueue",
                _ => "SourceQueue",
            };
            resources.insert(id.to_string(), name.clone());
            first_queue.get_or_insert(name);
        } else if let Some(location) = arg.strip_prefix("s3://") {
            let bucket = location.split('/').next().unwrap_or_default();
            if !names_bucket(extra, bucket) {
                resources.insert("ArchiveBucket".into(), bucket.to_string());
            }
        } else if flag == "--circuit-table" || flag == "--table" {
            resources.insert("CircuitTable".into(), arg.to_string());
        } else if flag == "--causes-table" {
            resources.insert("IdempotencyTable".into(), arg.to_string());
        } else if flag == "--alert-topic" {
            let name = arg.rsplit(':').next().unwrap_or_default();
            resources.insert("AlertsTopic".into(), name.to_string());
        } else if flag == "--state-machine" {
            let name = arg.rsplit(':').next().unwrap_or_default();
            resources.insert("StateMachine".into(), name.to_string());
        } else if flag == "--stack" {
            // The names the template gives a stack's resources.
            for (id, suffix) in [
                ("DeadLetterQueue", "-dlq"),
                ("SourceQueue", "-source"),
                ("PoisonQueue", "-poison"),
                ("CircuitTable", "-circuit"),
                ("IdempotencyTable", "-idempotency"),
                ("AlertsTopic", "-alerts"),
            ] {
                resources.insert(id.to_string(), format!("{arg}{suffix}"));
            }
            resources.insert("AWS::StackName".into(), arg.to_string());
        }
    }
    let known = ["DeadLetterQueue", "SourceQueue", "PoisonQueue"]
        .iter()
        .find_map(|id| resources.get(*id).cloned());
    if let Some(queue) = first_queue.or(known) {
        let (base, fifo) = queue_set_base(&queue);
        for (id, suffix) in [
            ("SourceQueue", ""),
            ("DeadLetterQueue", "-dlq"),
            ("PoisonQueue", "-poison"),
        ] {
            resources
                .entry(id.to_string())
                .or_insert_with(|| format!("{base}{suffix}{fifo}"));
        }
    }
    user_env(env, policy, &resources, extra)
}

/// The statement by which an operator's own identity grants their export bucket, on that
/// bucket only: what `redrive export` (HeadBucket, which AWS checks as s3:ListBucket;
/// PutObject) and `redrive import` (ListObjectsV2, GetObject) call on it.
pub fn own_bucket_statement(bucket: &str) -> Value {
    json!({
        "Sid": "OwnExportBucket",
        "Effect": "Allow",
        "Action": ["s3:ListBucket", "s3:PutObject", "s3:GetObject"],
        "Resource": [format!("arn:aws:s3:::{bucket}"), format!("arn:aws:s3:::{bucket}/*")],
    })
}

/// Whether a statement of `statements` names `bucket` (or its objects) as a resource.
fn names_bucket(statements: &[Value], bucket: &str) -> bool {
    let arn = format!("arn:aws:s3:::{bucket}");
    let names = |r: &Value| {
        r.as_str()
            .is_some_and(|r| r == arn || r.starts_with(&format!("{arn}/")))
    };
    statements.iter().any(|s| match &s["Resource"] {
        Value::Array(list) => list.iter().any(names),
        one => names(one),
    })
}

/// The base name of a `QueueSet` queue (`<base>`, `<base>-dlq`, `<base>-poison`, each with
/// `.fifo` or not) and its `.fifo` suffix.
fn queue_set_base(name: &str) -> (&str, &'static str) {
    let (name, fifo) = match name.strip_suffix(".fifo") {
        Some(stem) => (stem, ".fifo"),
        None => (name, ""),
    };
    let base = name
        .strip_suffix("-dlq")
        .or_else(|| name.strip_suffix("-poison"))
        .unwrap_or(name);
    (base, fifo)
}

/// `env` with the access key of a user holding `role`'s policies rendered for `resources`,
/// when `env` points at a moto of this process; otherwise `env` unchanged. The user is created
/// once per role and resources in this process.
pub fn env_for_role(
    env: &[(String, String)],
    role: &str,
    resources: &Resources,
) -> Vec<(String, String)> {
    user_env(env, role, resources, &[])
}

/// `env_for_role`, the user holding the statements `extra` too.
fn user_env(
    env: &[(String, String)],
    role: &str,
    resources: &Resources,
    extra: &[Value],
) -> Vec<(String, String)> {
    let endpoint = env
        .iter()
        .rev()
        .find(|(k, _)| k == "AWS_ENDPOINT_URL")
        .map(|(_, v)| v.as_str());
    let Some(moto) = endpoint.and_then(crate::moto::started_at) else {
        return env.to_vec();
    };
    let (key_id, secret) = user_credentials(moto, role, resources, extra);
    let mut out: Vec<(String, String)> = env
        .iter()
        .filter(|(k, _)| k != "AWS_ACCESS_KEY_ID" && k != "AWS_SECRET_ACCESS_KEY")
        .cloned()
        .collect();
    out.push(("AWS_ACCESS_KEY_ID".into(), key_id));
    out.push(("AWS_SECRET_ACCESS_KEY".into(), secret));
    out
}

/// (moto's port, role, resources, the extra statements as JSON)
type CredentialsKey = (u16, String, Resources, String);
static CREDENTIALS: Mutex<Option<HashMap<CredentialsKey, (String, String)>>> = Mutex::new(None);

/// (access key id, secret) of a user of `moto` holding `role`'s policies for `resources`.
pub fn credentials(moto: &Moto, role: &str, resources: &Resources) -> (String, String) {
    user_credentials(moto, role, resources, &[])
}

/// `credentials` of a user holding the statements `extra` too (one more inline policy).
fn user_credentials(
    moto: &Moto,
    role: &str,
    resources: &Resources,
    extra: &[Value],
) -> (String, String) {
    let key = (
        moto.port(),
        role.to_string(),
        resources.clone(),
        Value::from(extra.to_vec()).to_string(),
    );
    let mut cache = lock(&CREDENTIALS);
    if let Some(found) = cache.get_or_insert_with(HashMap::new).get(&key) {
        return found.clone();
    }
    let mut request = json!({"role": role, "resources": resources});
    if !extra.is_empty() {
        request["extra"] = Value::from(extra.to_vec());
    }
    let request = request.to_string();
    let (status, body) = moto
        .post("/redrive-tests/iam/credentials", &request)
        .unwrap_or_else(|e| panic!("creating the test user of {role}: {e}"));
    let answer: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let field = |name: &str| answer[name].as_str().map(str::to_string);
    let (Some(key_id), Some(secret), 200) =
        (field("AccessKeyId"), field("SecretAccessKey"), status)
    else {
        panic!("creating the test user of {role} for {resources:?}: HTTP {status}: {body}");
    };
    let credentials = (key_id, secret);
    cache
        .get_or_insert_with(HashMap::new)
        .insert(key, credentials.clone());
    credentials
}

impl Moto {
    /// An SDK config for this moto under `role` for `resources` (see `credentials`): for code
    /// under test that runs in the test process.
    pub async fn sdk_config_as(&self, role: &str, resources: &Resources) -> SdkConfig {
        let (key_id, secret) = credentials(self, role, resources);
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(self.endpoint())
            .region(Region::new(crate::REGION))
            .credentials_provider(Credentials::new(
                key_id,
                secret,
                None,
                None,
                "redrive-tests",
            ))
            .load()
            .await
    }
}

/// The last path segment of a queue URL: its name.
fn queue_name(url: &str) -> String {
    url.trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn resources_come_from_the_functions_variables() {
        let env = pairs(&[
            ("DLQ_URL", "http://127.0.0.1:1/123456789012/qs-1-dlq"),
            ("CIRCUIT_TABLE", "circuit-1"),
            ("DOWNSTREAM_URL", "http://127.0.0.1:2/orders"),
        ]);
        let resources = resources_from_env(&env);
        assert_eq!(resources["DeadLetterQueue"], "qs-1-dlq");
        assert_eq!(resources["CircuitTable"], "circuit-1");
        assert_eq!(resources.len(), 2);
        let console = pairs(&[
            ("TRIAGE_TABLE", "circuit-2"),
            (
                "TRIAGE_QUEUE_URLS",
                "http://127.0.0.1:1/123456789012/qs-2-dlq, http://127.0.0.1:1/123456789012/qs-2-poison",
            ),
        ]);
        let resources = resources_from_env(&console);
        assert_eq!(resources["DeadLetterQueue"], "qs-2-dlq");
        assert_eq!(resources["PoisonQueue"], "qs-2-poison");
        assert_eq!(resources["CircuitTable"], "circuit-2");
    }
}

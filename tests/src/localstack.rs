//! One LocalStack per test process, started on first use and gone when the process ends: the
//! second, stricter SQS emulator beside moto.
//!
//! LocalStack's open-source core (`localstack-core` 2026.3.0, installed by `make setup` into
//! `.venv-localstack` on Python 3.13 or newer) serves SQS, S3, CloudWatch and STS on 127.0.0.1 without
//! Docker or an auth token (see `localstack_launcher.py` for how it is kept offline, on
//! loopback and inside `target/localstack/`). Where moto is kind and AWS is not, LocalStack
//! behaves as AWS: it keeps a FIFO deduplication id for five minutes after the message is
//! deleted, counts message attributes against `MaximumMessageSize`, sets
//! `DeadLetterQueueSourceArn` on a message its RedrivePolicy moved, and implements
//! StartMessageMoveTask. It enforces no IAM (every access key is account 000000000000), and it
//! has no DynamoDB or Step Functions offline: those stay on moto.
//!
//! `REDRIVE_SQS_EMULATOR=localstack` points the SQS, S3, CloudWatch and STS calls of a test
//! run at LocalStack while everything else stays on moto (see [`sqs_emulator`]); the endpoints
//! travel through the SDK's standard service-specific settings, `AWS_ENDPOINT_URL_SQS` and its
//! siblings, in child processes as in the tests' own clients.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use aws_config::SdkConfig;
use aws_types::origin::Origin;
use aws_types::service_config::{LoadServiceConfig, ServiceConfigKey};

use crate::process::{Launched, launch_announcing_port};
use crate::{unique_name, workspace_root};

/// The services a LocalStack of the harness serves, by the SDK's service id (the suffix of
/// `AWS_ENDPOINT_URL_<ID>`, upper case).
pub const LOCALSTACK_SERVICES: [&str; 4] = ["SQS", "S3", "CloudWatch", "STS"];
/// The variable that picks the SQS emulator of a test run: `moto` (or unset) or `localstack`.
pub const SQS_EMULATOR_VARIABLE: &str = "REDRIVE_SQS_EMULATOR";
/// The launcher waits for every service to run (about 3 s here); a cold machine's first
/// import of LocalStack's modules takes longer.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(180);

/// A LocalStack gateway listening on 127.0.0.1, private to this test process (the launcher
/// stops LocalStack when this process ends).
pub type LocalStack = Launched<LocalStackServer>;

/// What is particular to a LocalStack gateway.
#[derive(Debug)]
pub struct LocalStackServer {
    /// Its own directory under `target/localstack/`: its log and state.
    dir: PathBuf,
}

static LOCALSTACK: OnceLock<LocalStack> = OnceLock::new();

/// The LocalStack of this test process, started on first call.
///
/// The launcher runs under `<workspace>/.venv-localstack/bin/python` (or
/// `$REDRIVE_LOCALSTACK_PYTHON`); it panics with "run `make setup`" when that is missing.
pub fn localstack() -> &'static LocalStack {
    LOCALSTACK.get_or_init(LocalStack::launch)
}

/// Which emulator serves SQS (and S3, CloudWatch, STS) in this test run: `None` for moto (the
/// default), the LocalStack of this process when `REDRIVE_SQS_EMULATOR=localstack`. Any other
/// value is a mistake and panics, so a misspelt switch cannot quietly test moto twice.
pub fn sqs_emulator() -> Option<&'static LocalStack> {
    match std::env::var(SQS_EMULATOR_VARIABLE).as_deref() {
        Err(_) | Ok("") | Ok("moto") => None,
        Ok("localstack") => Some(localstack()),
        Ok(other) => panic!("{SQS_EMULATOR_VARIABLE}={other:?}: use `moto` or `localstack`"),
    }
}

impl LocalStack {
    fn launch() -> LocalStack {
        let python = python();
        if !python.exists() {
            panic!(
                "LocalStack needs its own Python at {}: run `make setup` (it needs Python >= 3.13 on the machine), or point REDRIVE_LOCALSTACK_PYTHON at a python with localstack-core[runtime]==2026.3.0",
                python.display()
            );
        }
        let dir = crate::lambda_watch::target_dir()
            .join("localstack")
            .join(unique_name("localstack"));
        let launcher = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("localstack_launcher.py");
        let announced = launch_announcing_port(
            "localstack",
            &python,
            &launcher,
            &[dir.display().to_string()],
            STARTUP_TIMEOUT,
            &format!(
                "its log is {}; is localstack-core[runtime] installed in {}? run `make setup`",
                dir.join("localstack.log").display(),
                python.display()
            ),
        );
        LocalStack::new(announced, LocalStackServer { dir })
    }

    /// LocalStack's own log (kept after the run, in `target/localstack/`).
    pub fn log_path(&self) -> PathBuf {
        self.kind.dir.join("localstack.log")
    }

    /// An SDK config whose every client goes to this LocalStack: region us-east-1, static
    /// dummy credentials. Build clients per test (per tokio runtime), as for moto.
    pub async fn sdk_config(&self) -> SdkConfig {
        crate::moto::emulator_sdk_config(&self.endpoint()).await
    }

    /// `AWS_ENDPOINT_URL_SQS`, `_S3`, `_CLOUDWATCH` and `_STS` set to this LocalStack: added to
    /// a child's environment beside `AWS_ENDPOINT_URL` (moto), they send those four services
    /// here and the rest to moto. The SDK for Rust and the AWS CLI read them.
    pub fn service_endpoints(&self) -> Vec<(String, String)> {
        LOCALSTACK_SERVICES
            .iter()
            .map(|id| {
                (
                    format!("AWS_ENDPOINT_URL_{}", id.to_ascii_uppercase()),
                    self.endpoint(),
                )
            })
            .collect()
    }

    /// The same routing for an SDK config built in the test: `config` (moto's) with the four
    /// services' endpoints set to this LocalStack, as `AWS_ENDPOINT_URL_<ID>` would set them.
    pub fn route_services(&self, config: SdkConfig) -> SdkConfig {
        let mut builder = config.into_builder().service_config(ServiceEndpoints {
            endpoint: self.endpoint(),
        });
        // A client reads the service-specific setting only when the shared endpoint was not
        // set in code: the shared one counts as `AWS_ENDPOINT_URL`, as in a child process.
        builder.insert_origin("endpoint_url", Origin::shared_environment_variable());
        builder.build()
    }

    pub async fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config().await)
    }

    pub async fn cloudwatch(&self) -> aws_sdk_cloudwatch::Client {
        aws_sdk_cloudwatch::Client::new(&self.sdk_config().await)
    }
}

/// The service-specific endpoint setting (`endpoint_url` of `AWS_ENDPOINT_URL_<ID>`) of the
/// LocalStack services; `None` for every other service and setting, which then keep the
/// config's own (moto's) endpoint.
#[derive(Debug)]
struct ServiceEndpoints {
    endpoint: String,
}

impl LoadServiceConfig for ServiceEndpoints {
    fn load_config(&self, key: ServiceConfigKey<'_>) -> Option<String> {
        (key.profile() == "endpoint_url" && LOCALSTACK_SERVICES.contains(&key.service_id()))
            .then(|| self.endpoint.clone())
    }
}

fn python() -> PathBuf {
    match std::env::var_os("REDRIVE_LOCALSTACK_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => workspace_root()
            .join(".venv-localstack")
            .join("bin")
            .join("python"),
    }
}

//! One moto server per test process, started on first use and gone when the process ends.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_sqs::config::Credentials;

use crate::localstack::{LocalStack, sqs_emulator};
use crate::process::{Launched, launch_announcing_port};

/// The region every client and child process of the harness uses.
pub const REGION: &str = "us-east-1";
const ACCESS_KEY: &str = "testing";
const SECRET_KEY: &str = "testing";

/// An SDK config whose every client goes to the emulator at `endpoint`: region us-east-1,
/// the harness's static credentials.
pub(crate) async fn emulator_sdk_config(endpoint: &str) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .endpoint_url(endpoint)
        .region(Region::new(REGION))
        .credentials_provider(Credentials::new(
            ACCESS_KEY,
            SECRET_KEY,
            None,
            None,
            "redrive-tests",
        ))
        .load()
        .await
}

const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// A moto server listening on 127.0.0.1, private to this test process.
pub type Moto = Launched<MotoServer>;

/// What is particular to a moto server.
#[derive(Debug)]
pub struct MotoServer {
    /// `--sfn`: where the launcher looks up the `cargo lambda watch` route of a Lambda Task's
    /// function (see `crate::sfn`). None for the other servers.
    pub(crate) lambda_routes: Option<PathBuf>,
}

static MOTO: OnceLock<Moto> = OnceLock::new();
static MOTO_FAST_CLOCK: OnceLock<Moto> = OnceLock::new();
// Step Functions executions (see `crate::sfn`): a server of its own, so that the other tests'
// moto stays exactly as it was.
static MOTO_SFN: OnceLock<Moto> = OnceLock::new();

/// The moto server of this test process, started on first call.
///
/// The launcher runs under `<workspace>/.venv/bin/python` (or `$REDRIVE_PYTHON`); it panics
/// with "run `make setup`" when that interpreter is missing.
pub fn moto() -> &'static Moto {
    MOTO.get_or_init(|| Moto::start(false))
}

/// A second moto of this process whose SQS model reads the clock through `time.time()`
/// instead of its 6 us datetime subtraction (see `moto_launcher.py --fast-clock`): the same
/// behaviour without the emulator CPU that grows with every message in a queue. For the
/// benchmarks and the soak, where that CPU would hide what is measured.
pub fn moto_fast_clock() -> &'static Moto {
    MOTO_FAST_CLOCK.get_or_init(|| Moto::start(true))
}

/// A moto of this process that executes Step Functions state machines, with `MOTO_PORT` set
/// to its port (its `aws-sdk:*` and `sqs:*` tasks call itself) and its Lambda Task states routed
/// to `cargo lambda watch` (`Moto::route_lambda`). See `moto_launcher.py --sfn` and `crate::sfn`.
pub fn moto_sfn() -> &'static Moto {
    MOTO_SFN.get_or_init(|| {
        let routes = crate::lambda_watch::target_dir()
            .join("sfn-routes")
            .join(crate::unique_name("moto"));
        std::fs::create_dir_all(&routes)
            .unwrap_or_else(|e| panic!("creating {}: {e}", routes.display()));
        let mut moto = Moto::launch(&["--sfn".to_string(), routes.display().to_string()]);
        moto.kind.lambda_routes = Some(routes);
        let answer = http_request(
            moto.port(),
            "POST",
            "/moto-api/config",
            r#"{"stepfunctions":{"execute_state_machine":true}}"#,
        );
        match answer {
            Ok(200 | 201) => moto,
            other => panic!("enabling moto's state machine execution: {other:?}"),
        }
    })
}

/// The moto of this process (`moto`, `moto_fast_clock` or `moto_sfn`) whose endpoint is
/// `endpoint`, if it was started.
pub(crate) fn started_at(endpoint: &str) -> Option<&'static Moto> {
    [&MOTO, &MOTO_FAST_CLOCK, &MOTO_SFN]
        .into_iter()
        .filter_map(OnceLock::get)
        .find(|moto| moto.endpoint() == endpoint.trim_end_matches('/'))
}

impl Moto {
    fn start(fast_clock: bool) -> Moto {
        let args: Vec<String> = fast_clock
            .then(|| "--fast-clock".to_string())
            .into_iter()
            .collect();
        Moto::launch(&args)
    }

    fn launch(launcher_args: &[String]) -> Moto {
        let python = python();
        if !python.exists() {
            panic!(
                "moto needs the project's Python at {}: run `make setup` (or point REDRIVE_PYTHON at a python with moto[server]==5.2.5)",
                python.display()
            );
        }
        let launcher = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("moto_launcher.py");
        let announced = launch_announcing_port(
            "moto",
            &python,
            &launcher,
            launcher_args,
            STARTUP_TIMEOUT,
            &format!(
                "is moto[server] installed in {}? run `make setup`",
                python.display()
            ),
        );
        wait_until_answers(announced.port);
        Moto::new(
            announced,
            MotoServer {
                lambda_routes: None,
            },
        )
    }

    /// `POST path` with a JSON `body` to this moto (the launcher's own endpoints):
    /// (status, body).
    pub(crate) fn post(&self, path: &str, body: &str) -> std::io::Result<(u16, String)> {
        http_exchange(self.port(), "POST", path, body)
    }

    /// An SDK config for this moto: its endpoint as the standard `endpoint_url` (the same
    /// effect as `AWS_ENDPOINT_URL`), region us-east-1, the credentials of the launcher's
    /// admin user (moto authorizes every call: see `crate::iam`), for a test's own setup and
    /// checks (the code under test runs under its role); SQS, S3, CloudWatch and STS on
    /// LocalStack under `REDRIVE_SQS_EMULATOR=localstack` (`sqs_on_localstack`).
    ///
    /// Build clients per test (per tokio runtime): an SDK client keeps a connection pool
    /// tied to the runtime that first used it.
    pub async fn sdk_config(&self) -> SdkConfig {
        let config = emulator_sdk_config(&self.endpoint()).await;
        match self.sqs_on_localstack() {
            Some(localstack) => localstack.route_services(config),
            None => config,
        }
    }

    /// An SDK config for this moto's own services, SQS included even under
    /// `REDRIVE_SQS_EMULATOR=localstack`: for what only this moto can reach, such as the queue
    /// a topic of this moto delivers to.
    pub async fn own_sdk_config(&self) -> SdkConfig {
        emulator_sdk_config(&self.endpoint()).await
    }

    /// Environment for a child process (a Lambda under `cargo lambda watch`, the AWS CLI)
    /// that must reach this moto through the SDK's standard variables, with the admin user's
    /// credentials: `LambdaWatch` replaces them with the function's role
    /// (`crate::iam::env_for_binary`), `crate::iam::cli_env` with the operator's policy.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_DEFAULT_REGION", REGION.to_string()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            // Never wait on an instance metadata endpoint that does not exist here.
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(localstack) = self.sqs_on_localstack() {
            env.extend(localstack.service_endpoints());
        }
        env
    }

    /// With `REDRIVE_SQS_EMULATOR=localstack`, the LocalStack that serves SQS, S3, CloudWatch
    /// and STS beside this moto: `sdk_config` and `env` route those four services there
    /// (`AWS_ENDPOINT_URL_SQS` and its siblings), everything else (DynamoDB) stays here. Not
    /// for the Step Functions moto, whose state machines call its own SQS.
    pub fn sqs_on_localstack(&self) -> Option<&'static LocalStack> {
        if self.kind.lambda_routes.is_some() {
            return None;
        }
        sqs_emulator()
    }

    pub async fn sqs(&self) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::new(&self.sdk_config().await)
    }

    pub async fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::new(&self.sdk_config().await)
    }

    pub async fn cloudwatch(&self) -> aws_sdk_cloudwatch::Client {
        aws_sdk_cloudwatch::Client::new(&self.sdk_config().await)
    }
}

fn python() -> PathBuf {
    match std::env::var_os("REDRIVE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => crate::venv_bin().join("python"),
    }
}

/// Polls `GET /moto-api/data.json` until moto answers 200.
fn wait_until_answers(port: u16) {
    let started = Instant::now();
    let mut last_error = String::new();
    while started.elapsed() < STARTUP_TIMEOUT {
        match http_status(port, "/moto-api/data.json") {
            Ok(200) => return,
            Ok(status) => last_error = format!("status {status}"),
            Err(e) => last_error = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("moto on port {port} did not answer within {STARTUP_TIMEOUT:?}: {last_error}");
}

fn http_status(port: u16, path: &str) -> std::io::Result<u16> {
    http_request(port, "GET", path, "")
}

fn http_request(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<u16> {
    http_exchange(port, method, path, body).map(|(status, _)| status)
}

/// One HTTP/1.1 request (`Connection: close`): the answer's status and body (not chunked:
/// moto's answers carry a Content-Length).
fn http_exchange(
    port: u16,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let (head, answer) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {head:?}")))?;
    Ok((status, answer.to_string()))
}

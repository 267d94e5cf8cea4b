//! `--stack NAME`: the queues, tables and topics a command needs, from the outputs of the stack
//! `make deploy` created under that name (`infra/templates/resources.yaml`), and the state
//! machine from its wiring stack (`NAME-wiring`). A flag given on the command line wins; an
//! output stands in for a flag not given (and for its variable: `--stack` is the more specific
//! of the two). The stacks are read once, before any queue is touched; a stack that does not
//! exist, or lacks an output the command needs, is a configuration error naming both.

use std::collections::{HashMap, HashSet};

use aws_config::SdkConfig;
use aws_sdk_cloudformation::error::{ProvideErrorMetadata, SdkError};
use clap::ArgMatches;
use clap::parser::ValueSource;
use redrive_engine::aws::port_error;

use crate::args::Command;
use crate::context::CliError;
use crate::queues::QueueRef;

/// The outputs of the resources stack (`resources.yaml`) that commands read.
pub mod output {
    pub const DLQ: &str = "DeadLetterQueueUrl";
    pub const SOURCE: &str = "SourceQueueUrl";
    pub const POISON: &str = "PoisonQueueUrl";
    pub const CIRCUIT_TABLE: &str = "CircuitTableName";
    pub const METRIC_NAMESPACE: &str = "MetricNamespace";
    pub const ALERTS_TOPIC: &str = "AlertsTopicArn";
    pub const IDEMPOTENCY_TABLE: &str = "IdempotencyTableName";
    pub const CONSUMER_FUNCTION: &str = "ConsumerFunctionName";
    /// Of the wiring stack (`wiring.yaml`, `NAME-wiring`), with the Step Functions orchestrator.
    pub const STATE_MACHINE: &str = "StateMachineArn";
}

/// The wiring stack of the stack `name`, as `infra/deploy.sh` names it.
pub fn wiring_stack(name: &str) -> String {
    format!("{name}-wiring")
}

/// A deployed stack's outputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stack {
    pub name: String,
    pub outputs: HashMap<String, String>,
}

impl Stack {
    /// DescribeStacks of `name`: `None` when no such stack exists.
    pub async fn describe(sdk: &SdkConfig, name: &str) -> Result<Option<Self>, CliError> {
        let client = aws_sdk_cloudformation::Client::new(sdk);
        let out = match client.describe_stacks().stack_name(name).send().await {
            Ok(out) => out,
            // CloudFormation answers a stack that does not exist with a ValidationError.
            Err(SdkError::ServiceError(se))
                if se.err().code() == Some("ValidationError")
                    && se
                        .err()
                        .message()
                        .is_some_and(|m| m.contains("does not exist")) =>
            {
                return Ok(None);
            }
            Err(e) => return Err(port_error("DescribeStacks", e).into()),
        };
        let Some(stack) = out.stacks().first() else {
            return Ok(None);
        };
        let outputs = stack
            .outputs()
            .iter()
            .filter_map(|o| Some((o.output_key()?.to_string(), o.output_value()?.to_string())))
            .collect();
        Ok(Some(Self {
            name: name.to_string(),
            outputs,
        }))
    }

    /// The output `key`, if the stack has it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.outputs.get(key).map(String::as_str)
    }

    /// The output `key`, which the command needs for `flag`.
    pub fn need(&self, key: &str, flag: &str) -> Result<&str, CliError> {
        self.get(key).ok_or_else(|| {
            CliError::Config(format!(
                "stack {} has no output {key} (needed for {flag}): pass {flag}, or name a stack deployed with it",
                self.name
            ))
        })
    }

    /// The queue of output `key`, which the command needs for `flag`.
    fn queue(&self, key: &str, flag: &str) -> Result<QueueRef, CliError> {
        let value = self.need(key, flag)?;
        QueueRef::parse(value).map_err(|e| {
            CliError::Config(format!(
                "stack {}: output {key} ({value}) is not a queue: {e}",
                self.name
            ))
        })
    }
}

/// The ids of the arguments given on the command line (not from a variable or a default), of
/// the command and its subcommands.
pub fn given_on_command_line(matches: &ArgMatches) -> HashSet<String> {
    let mut given = HashSet::new();
    let mut m = Some(matches);
    while let Some(level) = m {
        for id in level.ids() {
            if level.value_source(id.as_str()) == Some(ValueSource::CommandLine) {
                given.insert(id.as_str().to_string());
            }
        }
        m = level.subcommand().map(|(_, sub)| sub);
    }
    given
}

/// What `--stack` sets that no flag holds: the re-driver's variables `drain` reads.
#[derive(Debug, Clone, Default)]
pub struct StackEnv(pub HashMap<&'static str, String>);

/// Reads the stack `name` (and, for `history`, its wiring stack) and fills the command's
/// queues, tables and topics that were not given on the command line.
pub async fn apply(
    sdk: &SdkConfig,
    name: &str,
    command: &mut Command,
    given: &HashSet<String>,
) -> Result<StackEnv, CliError> {
    let missing = |n: &str| {
        CliError::Config(format!(
            "stack {n} does not exist (DescribeStacks) in this account and region: check --stack, --region and --profile"
        ))
    };
    let stack = Stack::describe(sdk, name)
        .await?
        .ok_or_else(|| missing(name))?;
    let mut env = StackEnv::default();
    let unless_given = |id: &str| !given.contains(id);
    match command {
        Command::Stats(a) if unless_given("queue") => {
            a.queue = Some(stack.queue(output::DLQ, "--queue")?);
        }
        Command::Peek(a) if unless_given("queue") => {
            a.queue = Some(stack.queue(output::DLQ, "--queue")?);
        }
        Command::Discard(a) if unless_given("queue") => {
            a.queue = Some(stack.queue(output::POISON, "--queue")?);
        }
        Command::Replay(a) if unless_given("from") => {
            a.from = Some(stack.queue(output::POISON, "--from")?);
        }
        Command::Drain(a) => {
            if unless_given("dlq") {
                a.dlq = Some(stack.queue(output::DLQ, "--dlq")?);
            }
            if unless_given("poison") {
                a.poison = Some(stack.queue(output::POISON, "--poison")?);
            }
            // A stack that protects existing DLQs (attach mode) has no source queue of its own:
            // each message goes back to the source it came from.
            if unless_given("source") {
                a.source = match stack.get(output::SOURCE) {
                    Some(_) => Some(stack.queue(output::SOURCE, "--source")?),
                    None => None,
                };
            }
            for (var, key) in [
                ("CIRCUIT_TABLE", output::CIRCUIT_TABLE),
                ("METRIC_NAMESPACE", output::METRIC_NAMESPACE),
            ] {
                if let Some(v) = stack.get(key) {
                    env.0.insert(var, v.to_string());
                }
            }
        }
        Command::Circuit(a) => {
            if unless_given("dlq") {
                a.dlq = Some(stack.queue(output::DLQ, "--dlq")?);
            }
            if unless_given("circuit_table") {
                a.circuit_table =
                    Some(stack.need(output::CIRCUIT_TABLE, "--circuit-table")?.into());
            }
        }
        Command::Status(a) => {
            // A stack that protects existing DLQs (attach mode) has no DLQ of its own: status
            // then reads PROTECT_DLQS or PROTECT_TAG, as deploy was given them.
            if unless_given("dlq") && unless_given("tag") && stack.get(output::DLQ).is_some() {
                a.dlq = vec![stack.queue(output::DLQ, "--dlq")?];
            }
            if unless_given("circuit_table") {
                a.circuit_table = stack.get(output::CIRCUIT_TABLE).map(str::to_string);
            }
            if unless_given("metric_namespace")
                && let Some(ns) = stack.get(output::METRIC_NAMESPACE)
            {
                a.metric_namespace = ns.to_string();
            }
        }
        Command::History(a) if unless_given("state_machine") => {
            let wiring = wiring_stack(name);
            let w = Stack::describe(sdk, &wiring)
                .await?
                .ok_or_else(|| missing(&wiring))?;
            a.state_machine = Some(w.need(output::STATE_MACHINE, "--state-machine")?.into());
        }
        Command::Triage(a) => a.apply_stack(&stack, given)?,
        _ => {}
    }
    Ok(env)
}

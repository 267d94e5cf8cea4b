//! The state machine's running executions: at most one drains a DLQ at a time.

use std::future::Future;

use redrive_engine::ports::PortError;

/// A RUNNING execution of the state machine (ListExecutions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningExecution {
    pub arn: String,
    pub started_ms: i64,
}

/// The state machine's running executions: at most one drains a DLQ at a time.
pub trait Executions: Sync {
    fn running(
        &self,
        state_machine_arn: &str,
    ) -> impl Future<Output = Result<Vec<RunningExecution>, PortError>> + Send;
}

/// ListExecutions (`statusFilter` RUNNING, every page).
#[derive(Clone)]
pub struct SfnExecutions {
    pub client: aws_sdk_sfn::Client,
}

impl Executions for SfnExecutions {
    async fn running(&self, state_machine_arn: &str) -> Result<Vec<RunningExecution>, PortError> {
        let mut out = Vec::new();
        let mut pages = self
            .client
            .list_executions()
            .state_machine_arn(state_machine_arn)
            .status_filter(aws_sdk_sfn::types::ExecutionStatus::Running)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                let retryable = !matches!(e, aws_sdk_sfn::error::SdkError::ServiceError(_));
                let code = aws_sdk_sfn::error::ProvideErrorMetadata::code(&e)
                    .unwrap_or("Unknown")
                    .to_string();
                let message = aws_sdk_sfn::error::DisplayErrorContext(&e).to_string();
                PortError::new("ListExecutions", code, message, retryable).with_source(e)
            })?;
            out.extend(page.executions.into_iter().map(|x| RunningExecution {
                arn: x.execution_arn,
                started_ms: x.start_date.to_millis().unwrap_or(0),
            }));
        }
        Ok(out)
    }
}

/// A fixed list of running executions (tests).
#[derive(Debug, Clone, Default)]
pub struct FixedExecutions(pub Vec<RunningExecution>);

impl Executions for FixedExecutions {
    async fn running(&self, _state_machine_arn: &str) -> Result<Vec<RunningExecution>, PortError> {
        Ok(self.0.clone())
    }
}

//! A consumer Lambda with your own processing step: everything but the side effect comes from
//! the library (idempotency in DynamoDB, partial batch response, backoff, DLQ fast-track).
//!
//! Build it like the shipped binary: `cargo lambda build --release --example custom_processor`.

use lambda_runtime::{Error, LambdaEvent, service_fn};
use redrive_consumer::aws::{DynamoDbStore, SqsOps};
use redrive_consumer::{Consumer, IdempotencyKey, Message, ProcessError, Processor};
use redrive_shared::config::{ConsumerConfig, Env};
use serde_json::Value;

/// The side effect: charge a card, once per payment.
struct ChargePayment {
    payments: PaymentsClient,
}

impl Processor for ChargePayment {
    async fn process(&self, message: &Message, key: &IdempotencyKey) -> Result<(), ProcessError> {
        // A body that cannot be read will never be readable: permanent, straight to the DLQ.
        let order: Value = serde_json::from_str(&message.body)
            .map_err(|e| ProcessError::permanent("BAD_ORDER", e.to_string()))?;
        let amount = order["amountCents"]
            .as_u64()
            .ok_or_else(|| ProcessError::permanent("BAD_ORDER", "amountCents is missing"))?;
        // Hand the key on, so that the payment provider drops a repeat too.
        match self.payments.charge(amount, key.as_str()).await {
            Ok(()) => Ok(()),
            Err(ChargeError::Declined(why)) => Err(ProcessError::permanent("DECLINED", why)),
            Err(ChargeError::RateLimited { retry_after }) => Err(ProcessError::retry_after(
                "RATE_LIMITED",
                "the payment provider asked us to slow down",
                retry_after,
            )),
            Err(ChargeError::Unavailable(why)) => Err(ProcessError::transient("UNAVAILABLE", why)),
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    redrive_consumer::init_logging();
    // IDEMPOTENCY_TABLE, IDEMPOTENCY_KEY, IDEMPOTENCY_TTL_SECONDS, DLQ_URL, RETRY_*.
    let config = ConsumerConfig::from_env(&Env::process())?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let consumer = Consumer::new(
        DynamoDbStore::new(
            aws_sdk_dynamodb::Client::new(&sdk),
            config.idempotency_table.clone(),
        ),
        SqsOps {
            client: aws_sdk_sqs::Client::new(&sdk),
        },
        ChargePayment {
            payments: PaymentsClient,
        },
        config,
    );
    let consumer = &consumer;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| async move {
        let handled = consumer
            .handle(&event.payload, event.context.deadline)
            .await?;
        Ok::<_, Error>(handled.response)
    }))
    .await
}

// ---- a stand-in for your own client ----------------------------------------------------

struct PaymentsClient;

enum ChargeError {
    Declined(String),
    RateLimited { retry_after: std::time::Duration },
    Unavailable(String),
}

impl PaymentsClient {
    async fn charge(&self, amount_cents: u64, idempotency_key: &str) -> Result<(), ChargeError> {
        match amount_cents {
            0 => Err(ChargeError::Declined(format!(
                "nothing to charge for {idempotency_key}"
            ))),
            1 => Err(ChargeError::RateLimited {
                retry_after: std::time::Duration::from_secs(30),
            }),
            2 => Err(ChargeError::Unavailable("try again".into())),
            _ => Ok(()),
        }
    }
}

// An idempotent SQS consumer Lambda: each order is charged once per idempotency key, however
// often SQS (or the re-driver) delivers it. A body that is not an `Order` is a permanent
// failure (`BODY_NOT_PARSED`), fast-tracked to `DLQ_URL`. Configured by the environment:
// `IDEMPOTENCY_TABLE` (required), `DLQ_URL`, `IDEMPOTENCY_KEY`, `IDEMPOTENCY_TTL_SECONDS`.
// `cargo lambda build --release --example charge_orders`

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    amount_cents: u64,
}

#[tokio::main]
async fn main() -> Result<(), redrive_consumer::Error> {
    redrive_consumer::run(|order: Order, rec: redrive_consumer::Record| async move {
        let charged = payments::charge(&order.order_id, order.amount_cents, rec.key()).await;
        charged.map_err(|e| redrive_consumer::ProcessError::transient("PAYMENTS_DOWN", e))
    })
    .await
}

// A stand-in for your own payments client

mod payments {
    use std::io::{Read, Write};
    use std::time::Duration;

    use redrive_consumer::IdempotencyKey;

    /// One POST to `PAYMENTS_URL` (`http://host:port/path`) carrying the idempotency key, so
    /// that the provider drops a repeat too. A 2xx answer is a charge.
    pub async fn charge(
        order_id: &str,
        amount_cents: u64,
        key: &IdempotencyKey,
    ) -> Result<(), String> {
        let url = std::env::var("PAYMENTS_URL").map_err(|_| "PAYMENTS_URL is not set")?;
        let (host, path) = url
            .strip_prefix("http://")
            .and_then(|rest| rest.split_once('/'))
            .ok_or("PAYMENTS_URL is not http://host/path")?;
        let body =
            serde_json::json!({"orderId": order_id, "amountCents": amount_cents}).to_string();
        let request = format!(
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nIdempotency-Key: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            key.as_str(),
            body.len()
        );
        let host = host.to_string();
        let answer = tokio::task::spawn_blocking(move || -> std::io::Result<String> {
            let mut stream = std::net::TcpStream::connect(&host)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.write_all(request.as_bytes())?;
            let mut answer = String::new();
            stream.read_to_string(&mut answer)?;
            Ok(answer)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("the payments service is unreachable: {e}"))?;
        match answer.split_whitespace().nth(1) {
            Some(status) if status.starts_with('2') => Ok(()),
            status => Err(format!(
                "the payments service answered {}",
                status.unwrap_or("nothing")
            )),
        }
    }
}

//! What the consumer logs, captured by a process-wide subscriber (its own test binary, so that
//! no other test's subscriber races it): never a raw key.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redrive_consumer::fake::{
    self, FakeQueue, FakeStore, Record, ScriptedProcessor, Status, Step, event, message,
};
use redrive_consumer::{Consumer, FailedIds, Message, ProcessError, key_digest};
use redrive_shared::clock::now_ms;
use redrive_shared::key::{IdempotencyKey, KeySource};
use serde_json::json;

#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

fn keyed(id: &str, key: &str) -> Message {
    message(id, &json!({"id": key, "from": id}).to_string())
}

#[tokio::test]
async fn pointer_keys_are_logged_as_a_digest_never_raw() {
    // GIVEN every log line of this process captured
    let logs = LogBuffer::default();
    tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .init();

    // AND pointer keys that are personal data, on every path that logs a key
    let (store, queue) = (FakeStore::new(), FakeQueue::new());
    let processor = ScriptedProcessor::default().with_delay(Duration::from_millis(20));
    let (ok, retry, perm, busy, down, twin) = (
        "alice@example.com",
        "bob@example.com",
        "carol@example.com",
        "dave@example.com",
        "erin@example.com",
        "frank@example.com",
    );
    let transient = || Step::Fail(ProcessError::transient("HTTP_503", "answered 503"));
    processor.script(retry, [transient()]);
    processor.script(
        perm,
        [Step::Fail(ProcessError::permanent(
            "HTTP_400",
            "answered 400",
        ))],
    );
    store.insert(
        &IdempotencyKey::try_from(busy.to_string())
            .unwrap()
            .record_id(None),
        Record {
            status: Status::InProgress,
            expiration_s: now_ms() / 1000 + 3600,
            in_progress_expiration_ms: now_ms() + 600_000,
            token: Some("someone-else".into()),
            payload_hash: None,
            result: None,
        },
    );
    let config = fake::config(true, KeySource::pointer("/id").unwrap());

    let c = Consumer::new(&store, &queue, &processor, config);
    let deadline = (now_ms() + 60_000) as u64;
    let batch = [
        keyed("m-1", ok),
        keyed("m-2", retry),
        keyed("m-3", perm),
        keyed("m-4", busy),
        keyed("m-5", twin),
        keyed("m-6", twin),
    ];

    // WHEN the batch is handled, then a key meets a failing store and a failing COMPLETED write
    let handled = c.handle(&event(&batch), deadline).await.unwrap();
    store.fail_next("claim");
    c.handle(&event(&[keyed("m-7", down)]), deadline)
        .await
        .unwrap();
    store.fail_next("complete");
    store.fail_next("release");
    processor.script(down, [transient()]);
    c.handle(&event(&[keyed("m-8", down)]), deadline)
        .await
        .unwrap();

    // THEN no raw key reached the logs, and each key's lines carry its digest
    assert_eq!(handled.response.failed_ids(), ["m-2", "m-4"]);
    let text = logs.text();
    assert!(text.contains("record settled"), "{text}");
    for key in [ok, retry, perm, busy, down, twin] {
        assert!(!text.contains(key), "{key} logged raw:\n{text}");
        assert!(text.contains(&key_digest(key)), "{key}'s digest missing");
    }
    assert_eq!(key_digest(ok).len(), 8);
}

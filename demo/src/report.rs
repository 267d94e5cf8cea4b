//! Settling, and the report reconciled order by order.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use aws_sdk_cloudwatch::primitives::DateTime;
use aws_sdk_cloudwatch::types::{Dimension, Statistic};
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName};
use redrive_tests::queue_counts;
use serde_json::Value;

use crate::event_source::{order_id_of, redrive_meta};
use crate::{Demo, ORDERS, Order, POLLERS, SCHEDULE, SETTLE_TIMEOUT, first, now_epoch_secs};

/// Shows the live status until, after the outage and the last order, the source queue and the
/// DLQ have been empty (visible, in flight and delayed) for three checks in a row; false on
/// timeout.
pub async fn settle(demo: &Demo) -> bool {
    let started = Instant::now();
    let mut quiet = 0;
    let mut last_plain = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let source = queue_counts(&demo.sqs, &demo.stack.source_url)
            .await
            .unwrap_or_default();
        let dlq = queue_counts(&demo.sqs, &demo.stack.dlq_url)
            .await
            .unwrap_or_default();
        let poison = queue_counts(&demo.sqs, &demo.stack.poison_url)
            .await
            .unwrap_or_default();
        let print_plain = last_plain.elapsed() >= Duration::from_secs(5);
        if print_plain {
            last_plain = Instant::now();
        }
        demo.console.status(
            format!(
                "{:<8} produced {:>3}  source {:>3} (in flight {:>2}, delayed {:>3})  DLQ {:>3} (alarm {:<5})  poison {:>2}  delivered {:>3}  requests {:>4}",
                *demo.phase.lock().unwrap(),
                demo.produced.load(Ordering::SeqCst),
                source.0 + source.1 + source.2,
                source.1,
                source.2,
                dlq.0 + dlq.1 + dlq.2,
                *demo.alarm.lock().unwrap(),
                poison.0 + poison.1 + poison.2,
                demo.downstream.keys().len(),
                demo.downstream.total_attempts(),
            ),
            print_plain,
        );
        let recovered = *demo.phase.lock().unwrap() == "recovery"
            && demo.produced.load(Ordering::SeqCst) == ORDERS as u64;
        let empty = source == (0, 0, 0) && dlq == (0, 0, 0);
        quiet = if recovered && empty { quiet + 1 } else { 0 };
        if quiet >= 3 {
            demo.console.end_status();
            demo.console
                .event("settled: the source queue and the DLQ are empty");
            return true;
        }
        if started.elapsed() > SETTLE_TIMEOUT {
            demo.console.end_status();
            demo.console
                .event(&format!("NOT settled after {}s", SETTLE_TIMEOUT.as_secs()));
            return false;
        }
    }
}

/// Every message of a queue, received and not deleted (the demo ends right after).
pub async fn read_all(sqs: &aws_sdk_sqs::Client, url: &str) -> Vec<Message> {
    let mut all = Vec::new();
    let mut seen = HashSet::new();
    loop {
        let out = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .expect("ReceiveMessage");
        let batch = out.messages.unwrap_or_default();
        if batch.is_empty() {
            return all;
        }
        for m in batch {
            if seen.insert(m.message_id().unwrap_or_default().to_string()) {
                all.push(m);
            }
        }
    }
}

pub async fn metric_sum(demo: &Demo, metric: &str, from_epoch: i64) -> Option<f64> {
    let out = demo
        .cloudwatch
        .get_metric_statistics()
        .namespace(&demo.stack.namespace)
        .metric_name(metric)
        .dimensions(
            Dimension::builder()
                .name("QueueName")
                .value(&demo.stack.dlq_name)
                .build(),
        )
        .start_time(DateTime::from_secs(from_epoch))
        .end_time(DateTime::from_secs(now_epoch_secs() + 120))
        .period(60)
        .statistics(Statistic::Sum)
        .send()
        .await
        .ok()?;
    Some(out.datapoints().iter().filter_map(|d| d.sum()).sum())
}

pub async fn report(demo: &Demo, orders: &[Order], settled: bool, metrics_from: i64) -> bool {
    let mut ok = settled;
    let mark = |good: bool| if good { "" } else { "   <--" };

    // What the downstream saw, by key and by the order id in the body.
    let requests = demo.downstream.requests();
    let mut by_key: HashMap<String, usize> = HashMap::new();
    let mut by_order: HashMap<String, usize> = HashMap::new();
    let mut statuses: BTreeMap<u16, usize> = BTreeMap::new();
    for r in &requests {
        *statuses.entry(r.status).or_default() += 1;
        if r.is_success() {
            // The default key is `<originalMessageId>:<body digest>`: count by the chain id.
            if let Some(k) = &r.idempotency_key {
                let chain = k.split_once(':').map_or(k.as_str(), |(id, _)| id);
                *by_key.entry(chain.to_string()).or_default() += 1;
            }
            if let Some(o) = order_id_of(&r.body_text()) {
                *by_order.entry(o).or_default() += 1;
            }
        }
    }

    // What is parked in the poison queue, and why.
    let parked = read_all(&demo.sqs, &demo.stack.poison_url).await;
    let mut parked_orders: HashMap<String, (String, String)> = HashMap::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for m in &parked {
        let meta = redrive_meta(m).unwrap_or(Value::Null);
        let reason = meta["reason"].as_str().unwrap_or("(no reason)").to_string();
        let error = meta["lastError"]["code"]
            .as_str()
            .unwrap_or("-")
            .to_string();
        *reasons.entry(format!("{reason} ({error})")).or_default() += 1;
        if let Some(o) = m.body().and_then(order_id_of) {
            parked_orders.insert(o, (reason, error));
        }
    }

    let mut once = 0;
    let mut twice = Vec::new();
    let mut lost = Vec::new();
    let mut wrongly_delivered = Vec::new();
    let mut parked_count = 0;
    for o in orders {
        let by_k = by_key.get(&o.message_id).copied().unwrap_or(0);
        let by_b = by_order.get(&o.order_id).copied().unwrap_or(0);
        let in_poison = parked_orders.contains_key(&o.order_id);
        if by_k > 1 || by_b > 1 {
            twice.push(o.order_id.clone());
        }
        if o.malformed && by_b > 0 {
            wrongly_delivered.push(o.order_id.clone());
        }
        let delivered = by_k.max(by_b);
        if delivered > 0 && in_poison {
            twice.push(format!("{} (delivered and parked)", o.order_id));
        }
        match (delivered, in_poison) {
            (0, false) => lost.push(o.order_id.clone()),
            (0, true) => parked_count += 1,
            _ if by_k == 1 && by_b == 1 && !in_poison => once += 1,
            _ => {}
        }
    }
    let malformed = orders.iter().filter(|o| o.malformed).count();
    let malformed_parked = orders
        .iter()
        .filter(|o| o.malformed)
        .filter(|o| {
            parked_orders
                .get(&o.order_id)
                .is_some_and(|(r, _)| r == "permanent-failure")
        })
        .count();

    let runs = demo.redriver_runs.lock().unwrap().clone();
    let sum = |k: &str| -> u64 { runs.iter().map(|(_, s)| s[k].as_u64().unwrap_or(0)).sum() };
    let (redriven, isolated, failed) = (sum("redriven"), sum("isolated"), sum("failed"));
    let mut stops: BTreeMap<String, usize> = BTreeMap::new();
    let mut triggers: BTreeMap<String, usize> = BTreeMap::new();
    for (trigger, s) in &runs {
        *stops
            .entry(s["stoppedBecause"].as_str().unwrap_or("?").to_string())
            .or_default() += 1;
        *triggers.entry(trigger.clone()).or_default() += 1;
    }
    let c = &demo.counters;
    let load = |a: &AtomicU64| a.load(Ordering::SeqCst);

    println!();
    println!("==================== redrive demo report ====================");
    println!(
        "produced                      {} orders ({malformed} with a negative amount)",
        orders.len()
    );
    let all_accounted = once + parked_count == orders.len();
    println!(
        "delivered exactly once        {once}  (by Idempotency-Key and by orderId in the body; {} after a redrive){}",
        load(&c.delivered_after_redrive),
        mark(all_accounted)
    );
    ok &= all_accounted;
    println!(
        "delivered more than once      {}{}",
        twice.len(),
        mark(twice.is_empty())
    );
    if !twice.is_empty() {
        println!("                              {}", first(&twice));
    }
    ok &= twice.is_empty();
    let suppressed_ok = load(&c.duplicates_not_suppressed) == 0;
    println!(
        "duplicates suppressed         {} of {} duplicate deliveries, answered from the idempotency record without a side effect{}",
        load(&c.duplicates_suppressed),
        load(&c.duplicate_deliveries),
        mark(suppressed_ok)
    );
    ok &= suppressed_ok;
    let reason_text: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} x{n}")).collect();
    let poison_ok = malformed_parked == malformed && wrongly_delivered.is_empty();
    println!(
        "parked in poison              {}  {}{}",
        parked.len(),
        reason_text.join(", "),
        mark(poison_ok)
    );
    if !wrongly_delivered.is_empty() {
        println!(
            "                              delivered despite a negative amount: {}",
            first(&wrongly_delivered)
        );
    }
    ok &= poison_ok;
    println!(
        "lost                          {}{}",
        lost.len(),
        mark(lost.is_empty())
    );
    if !lost.is_empty() {
        println!("                              {}", first(&lost));
    }
    ok &= lost.is_empty();
    let status_text: Vec<String> = statuses.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    println!(
        "downstream requests           {}  ({})",
        requests.len(),
        status_text.join(", ")
    );
    println!(
        "consumer invocations          {} (event source batches {}, pollers {POLLERS})",
        load(&c.invocations),
        load(&c.batches)
    );
    let stop_text: Vec<String> = stops.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    let trigger_text: Vec<String> = triggers.iter().map(|(t, n)| format!("{t} x{n}")).collect();
    println!(
        "re-driver invocations         {}  ({}); redriven {redriven}, isolated {isolated}, failed {failed}; stopped: {}",
        runs.len(),
        trigger_text.join(", "),
        stop_text.join(", ")
    );
    // With the schedule at its production default, only the alarm drains the DLQ in the
    // demo's few minutes; it can notify again only because the re-driver re-arms it.
    let rearm_ok = load(&c.rearms) > 0;
    println!(
        "DLQ alarm                     notified the re-driver {} time(s); re-armed by the re-driver {} time(s){}",
        load(&c.alarm_notifications),
        load(&c.rearms),
        mark(rearm_ok)
    );
    ok &= rearm_ok;
    println!(
        "safety-net schedule           every {} s (production default): ran {} time(s)",
        SCHEDULE.as_secs(),
        load(&c.scheduled_runs)
    );

    // The re-driver's metrics, read back from CloudWatch.
    let mut metric_text = Vec::new();
    let mut metrics_ok = true;
    for (metric, expected) in [
        ("SuccessfulRedrives", redriven),
        ("PoisonPillsIsolated", isolated),
        ("RedriveFailures", failed),
    ] {
        let got = metric_sum(demo, metric, metrics_from).await;
        metrics_ok &= got == Some(expected as f64);
        metric_text.push(format!(
            "{metric} {}",
            got.map_or("unreadable".to_string(), |v| format!("{v}"))
        ));
    }
    let isolated_ok = isolated as usize == parked.len();
    println!(
        "CloudWatch metrics            {} (QueueName {}): {}{}",
        demo.stack.namespace,
        demo.stack.dlq_name,
        metric_text.join(", "),
        mark(metrics_ok && isolated_ok)
    );
    ok &= metrics_ok && isolated_ok;
    let errors = load(&c.errors);
    if errors > 0 {
        println!("errors along the way          {errors} (the event source and the alarm retried)");
    }
    if !settled {
        println!(
            "settled                       no: queues still held messages after {}s   <--",
            SETTLE_TIMEOUT.as_secs()
        );
    }
    ok
}

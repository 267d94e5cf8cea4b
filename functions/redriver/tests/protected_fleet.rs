//! The built `redriver` binary under `cargo lambda watch`, protecting three DLQs it did not
//! create (one fed by two sources, one FIFO, one whose tags override the install's settings),
//! on LocalStack: the emulator that, as SQS does, writes `DeadLetterQueueSourceArn` on a
//! message its RedrivePolicy moved. Moto does not, so these tests always run on LocalStack.

use std::collections::HashMap;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::types::QueueAttributeName;
use redrive_shared::meta::{ATTRIBUTE_NAME, IsolationReason, RedriveMeta};
use redrive_tests::{LambdaWatch, drain_all, fixture, localstack, moto, queue_depth, unique_name};
use serde_json::{Value, json};

const ACCOUNT: &str = "000000000000";

/// The user's queues, made as their own infrastructure code would.
struct Account {
    sqs: Client,
    orders_dlq: String,
    orders: String,
    returns: String,
    ledger_dlq: String,
    ledger: String,
    mail_dlq: String,
    mail: String,
    /// Ours: the install's poison queue.
    poison: String,
    names: HashMap<&'static str, String>,
}

async fn create(sqs: &Client, name: &str, attributes: &[(QueueAttributeName, String)]) -> String {
    let mut call = sqs.create_queue().queue_name(name);
    for (k, v) in attributes {
        call = call.attributes(k.clone(), v.clone());
    }
    call.send().await.expect("create queue").queue_url.unwrap()
}

async fn arn(sqs: &Client, url: &str) -> String {
    sqs.get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .expect("attributes")
        .attributes
        .unwrap()[&QueueAttributeName::QueueArn]
        .clone()
}

/// A source whose RedrivePolicy moves a message to `dlq` at its second receive.
async fn source_of(sqs: &Client, name: &str, dlq: &str, fifo: bool) -> String {
    let policy = json!({"deadLetterTargetArn": arn(sqs, dlq).await, "maxReceiveCount": 1});
    let mut attributes = vec![(QueueAttributeName::RedrivePolicy, policy.to_string())];
    if fifo {
        attributes.push((QueueAttributeName::FifoQueue, "true".into()));
    }
    create(sqs, name, &attributes).await
}

impl Account {
    async fn create() -> Self {
        let sqs = localstack().sqs().await;
        let mut names = HashMap::new();
        for key in [
            "orders-dlq",
            "orders",
            "returns",
            "ledger-dlq",
            "ledger",
            "mail-dlq",
            "mail",
            "poison",
        ] {
            let mut name = unique_name(key);
            if key.starts_with("ledger") {
                name.push_str(".fifo");
            }
            names.insert(key, name);
        }
        let fifo = vec![(QueueAttributeName::FifoQueue, "true".to_string())];
        let orders_dlq = create(&sqs, &names["orders-dlq"], &[]).await;
        let ledger_dlq = create(&sqs, &names["ledger-dlq"], &fifo).await;
        let mail_dlq = create(&sqs, &names["mail-dlq"], &[]).await;
        let orders = source_of(&sqs, &names["orders"], &orders_dlq, false).await;
        let returns = source_of(&sqs, &names["returns"], &orders_dlq, false).await;
        let ledger = source_of(&sqs, &names["ledger"], &ledger_dlq, true).await;
        let mail = source_of(&sqs, &names["mail"], &mail_dlq, false).await;
        let poison = create(&sqs, &names["poison"], &[]).await;
        Self {
            sqs,
            orders_dlq,
            orders,
            returns,
            ledger_dlq,
            ledger,
            mail_dlq,
            mail,
            poison,
            names,
        }
    }

    /// A message the user's consumer failed on: sent to `source`, received twice without a
    /// delete, so that SQS moves it to the DLQ.
    async fn fail(&self, source: &str, body: &str, attempt_before: Option<u32>) {
        let mut send = self.sqs.send_message().queue_url(source).message_body(body);
        if source.ends_with(".fifo") {
            send = send
                .message_group_id("account-7")
                .message_deduplication_id(unique_name("d"));
        }
        if let Some(attempt) = attempt_before {
            let meta = RedriveMeta {
                attempt,
                ..RedriveMeta::fresh(&unique_name("orig"))
            };
            send = send.message_attributes(
                ATTRIBUTE_NAME,
                aws_sdk_sqs::types::MessageAttributeValue::builder()
                    .data_type("String")
                    .string_value(meta.to_json())
                    .build()
                    .unwrap(),
            );
        }
        send.send().await.expect("send");
        for _ in 0..3 {
            let got = self
                .sqs
                .receive_message()
                .queue_url(source)
                .visibility_timeout(0)
                .max_number_of_messages(10)
                .send()
                .await
                .expect("receive");
            if got.messages.unwrap_or_default().is_empty() {
                break;
            }
        }
    }

    async fn bodies(&self, url: &str) -> Vec<String> {
        let mut b: Vec<String> = drain_all(&self.sqs, url)
            .await
            .into_iter()
            .map(|m| m.body.unwrap_or_default())
            .collect();
        b.sort();
        b
    }

    fn alarm(&self, dlq: &str) -> Value {
        let queue = &self.names[dlq];
        let mut event = fixture("sns-cloudwatch-alarm.json");
        let sns = &mut event["Records"][0]["Sns"];
        let mut m: Value = serde_json::from_str(sns["Message"].as_str().unwrap()).unwrap();
        m["AlarmName"] = json!(format!("{queue}-age"));
        m["AWSAccountId"] = json!(ACCOUNT);
        m["AlarmArn"] = json!(format!(
            "arn:aws:cloudwatch:us-east-1:{ACCOUNT}:alarm:{queue}-age"
        ));
        m["Trigger"]["Dimensions"] = json!([{"value": queue, "name": "QueueName"}]);
        sns["Message"] = json!(m.to_string());
        event
    }

    /// The re-driver as `make deploy` configures it in attach mode: the DLQs' list in the
    /// table `DLQ_LIST_TABLE` names (the stack's circuit table), read at init.
    async fn redriver(&self) -> LambdaWatch {
        let ddb = moto().dynamodb().await;
        let table = redrive_tests::create_circuit_table(&ddb).await;
        ddb.put_item()
            .table_name(&table)
            .item(
                "queue",
                aws_sdk_dynamodb::types::AttributeValue::S("redrive:fleet:dlq-urls".into()),
            )
            .item(
                "dlq_urls",
                aws_sdk_dynamodb::types::AttributeValue::S(format!(
                    "{},{},{}",
                    self.orders_dlq, self.ledger_dlq, self.mail_dlq
                )),
            )
            .send()
            .await
            .expect("PutItem");
        let mut env = moto().env();
        env.extend(localstack().service_endpoints());
        env.extend(
            [
                ("DLQ_LIST_TABLE", table),
                ("POISON_QUEUE_URL", self.poison.clone()),
                ("BACKOFF_BASE_SECONDS", "0".into()),
                ("METRIC_NAMESPACE", unique_name("ns")),
                ("REARM_ALARM", "false".into()),
            ]
            .map(|(k, v)| (k.to_string(), v)),
        );
        LambdaWatch::start(&["redriver"], &env).await
    }

    /// The re-driver with the environment the self-contained template gives it
    /// (`redrive-attach.template.json`), for this account's poison queue, a circuit table and
    /// the install `install`: the DLQs are the queues tagged `redrive-install:INSTALL` = `dlq`
    /// (or `dlq+source`), read at init.
    async fn redriver_as_the_template_configures_it(&self, install: &str) -> LambdaWatch {
        let table = redrive_tests::create_circuit_table(&moto().dynamodb().await).await;
        let namespace = unique_name("ns");
        let template_env = redrive_tests::standalone_function_env(
            "RedriverFunction",
            &[
                ("PoisonQueue", &self.poison),
                ("CircuitTable", &table),
                ("InstallName", install),
                // Parameters a user may set: no backoff, so that the copies are visible at once.
                ("BackoffBaseSeconds", "0"),
                ("MetricNamespace", &namespace),
            ],
        );
        let mut env = moto().env();
        env.extend(localstack().service_endpoints());
        env.extend(template_env);
        LambdaWatch::start(&["redriver"], &env).await
    }

    async fn tag(&self, url: &str, key: &str, value: &str) {
        self.sqs
            .tag_queue()
            .queue_url(url)
            .tags(key, value)
            .send()
            .await
            .expect("tag");
    }
}

fn meta(m: &aws_sdk_sqs::types::Message) -> RedriveMeta {
    let text = m.message_attributes().unwrap()[ATTRIBUTE_NAME]
        .string_value()
        .unwrap();
    RedriveMeta::parse(text).unwrap()
}

#[tokio::test]
async fn three_existing_dlqs_one_install_two_incidents_at_once_each_message_home_lost_none() {
    let account = Account::create().await;
    // mail-dlq's owners allow one redrive only.
    account
        .tag(&account.mail_dlq, "redrive:max-attempts", "1")
        .await;
    for i in 0..3 {
        account
            .fail(&account.orders, &format!("order-{i}"), None)
            .await;
        account
            .fail(&account.returns, &format!("return-{i}"), None)
            .await;
        account
            .fail(&account.mail, &format!("mail-{i}"), Some(1))
            .await;
    }
    account.fail(&account.ledger, "entry-0", None).await;
    // A message sent to the DLQ by hand: its source cannot be known.
    account
        .sqs
        .send_message()
        .queue_url(&account.orders_dlq)
        .message_body("by-hand")
        .send()
        .await
        .unwrap();
    assert_eq!(queue_depth(&account.sqs, &account.orders_dlq).await, 7);
    assert_eq!(queue_depth(&account.sqs, &account.mail_dlq).await, 3);
    assert_eq!(queue_depth(&account.sqs, &account.ledger_dlq).await, 1);

    let watch = account.redriver().await;
    // Two incidents at once: both alarms' notifications in flight together.
    let (orders_alarm, mail_alarm) = (account.alarm("orders-dlq"), account.alarm("mail-dlq"));
    let (a, b) = tokio::join!(
        watch.invoke("redriver", &orders_alarm),
        watch.invoke("redriver", &mail_alarm)
    );
    let (a, b) = (a.expect("orders-dlq drain"), b.expect("mail-dlq drain"));
    assert_eq!(
        (
            a["received"].as_u64(),
            a["redriven"].as_u64(),
            a["isolated"].as_u64()
        ),
        (Some(7), Some(6), Some(1)),
        "{a}"
    );
    assert_eq!(
        (b["received"].as_u64(), b["isolated"].as_u64()),
        (Some(3), Some(3)),
        "{b}"
    );

    // Each message back to its own source.
    assert_eq!(
        account.bodies(&account.orders).await,
        ["order-0", "order-1", "order-2"]
    );
    assert_eq!(
        account.bodies(&account.returns).await,
        ["return-0", "return-1", "return-2"]
    );
    // The tag's one attempt: parked, with where they came from.
    assert!(account.bodies(&account.mail).await.is_empty());
    let parked = drain_all(&account.sqs, &account.poison).await;
    let mut reasons: Vec<(String, Option<IsolationReason>, Option<String>)> = parked
        .iter()
        .map(|m| {
            let meta = meta(m);
            (
                m.body.clone().unwrap(),
                meta.reason.clone(),
                meta.source().map(str::to_string),
            )
        })
        .collect();
    reasons.sort_by(|x, y| x.0.cmp(&y.0));
    let mail_arn = arn(&account.sqs, &account.mail).await;
    assert_eq!(
        reasons,
        vec![
            (
                "by-hand".to_string(),
                Some(IsolationReason::UnknownSource),
                None
            ),
            (
                "mail-0".to_string(),
                Some(IsolationReason::MaxAttempts),
                Some(mail_arn.clone())
            ),
            (
                "mail-1".to_string(),
                Some(IsolationReason::MaxAttempts),
                Some(mail_arn.clone())
            ),
            (
                "mail-2".to_string(),
                Some(IsolationReason::MaxAttempts),
                Some(mail_arn)
            ),
        ]
    );
    // The FIFO DLQ had no incident: untouched until the schedule.
    assert_eq!(queue_depth(&account.sqs, &account.ledger_dlq).await, 1);
    let s = watch
        .invoke("redriver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("scheduled drain");
    assert_eq!(s["redriven"].as_u64(), Some(1), "{s}");
    assert_eq!(s["queues"].as_array().map(Vec::len), Some(3), "{s}");
    assert_eq!(account.bodies(&account.ledger).await, ["entry-0"]);
    for dlq in [&account.orders_dlq, &account.ledger_dlq, &account.mail_dlq] {
        assert_eq!(queue_depth(&account.sqs, dlq).await, 0);
    }
    let log = watch.log();
    assert!(
        !log.contains("order-1") && !log.contains("by-hand"),
        "a body leaked into the logs"
    );
}

#[tokio::test]
async fn a_bad_tag_on_one_dlq_leaves_the_other_two_working() {
    let account = Account::create().await;
    account
        .tag(&account.ledger_dlq, "redrive:backoff-jitter", "sometimes")
        .await;
    account.fail(&account.orders, "order-0", None).await;
    account.fail(&account.ledger, "entry-0", None).await;
    account.fail(&account.mail, "mail-0", None).await;
    let watch = account.redriver().await;
    let s = watch
        .invoke("redriver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("the others are served");
    assert_eq!(s["redriven"].as_u64(), Some(2), "{s}");
    let ledger = s["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == json!(account.names["ledger-dlq"]))
        .cloned()
        .unwrap();
    assert_eq!(ledger["stoppedBecause"], "bad-settings");
    assert!(
        ledger["error"]
            .as_str()
            .unwrap()
            .contains("redrive:backoff-jitter"),
        "{ledger}"
    );
    assert_eq!(account.bodies(&account.orders).await, ["order-0"]);
    assert_eq!(account.bodies(&account.mail).await, ["mail-0"]);
    assert_eq!(
        queue_depth(&account.sqs, &account.ledger_dlq).await,
        1,
        "left alone, not lost"
    );
    let log = watch.log();
    assert!(
        log.contains("redrive:backoff-jitter") && log.contains(&account.names["ledger-dlq"]),
        "the log names the queue and the tag"
    );
}

#[tokio::test]
async fn as_the_template_configures_it_the_schedule_drains_the_dlqs_tagged_for_the_install_and_no_other()
 {
    // GIVEN three existing DLQs, two of them tagged for this install (as a user tags them for
    // the self-contained template), a message failed into each
    let account = Account::create().await;
    let install = unique_name("st");
    let key = format!("redrive-install:{install}");
    account.tag(&account.orders_dlq, &key, "dlq").await;
    account.tag(&account.ledger_dlq, &key, "dlq+source").await;
    account.tag(&account.mail, &key, "source").await;
    account.fail(&account.orders, "order-0", None).await;
    account.fail(&account.ledger, "entry-0", None).await;
    account.fail(&account.mail, "mail-0", None).await;

    // WHEN the re-driver, configured as the template configures it, finds its fleet by the tag
    // at init and runs on its schedule
    let watch = account
        .redriver_as_the_template_configures_it(&install)
        .await;
    let out = watch
        .invoke("redriver", &fixture("eventbridge-scheduled.json"))
        .await
        .expect("scheduled drain");

    // THEN it drained exactly the two tagged DLQs, each message home, and left the third alone
    let mut drained: Vec<&str> = out["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["queue"].as_str().unwrap())
        .collect();
    drained.sort();
    let mut want = vec![
        account.names["orders-dlq"].as_str(),
        account.names["ledger-dlq"].as_str(),
    ];
    want.sort();
    assert_eq!(drained, want, "{out}");
    assert_eq!(out["redriven"].as_u64(), Some(2), "{out}");
    assert_eq!(account.bodies(&account.orders).await, ["order-0"]);
    assert_eq!(account.bodies(&account.ledger).await, ["entry-0"]);
    assert_eq!(queue_depth(&account.sqs, &account.mail_dlq).await, 1);
}

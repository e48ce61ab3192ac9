//! `uns-producer` sends one notification to a UNS server, reads it back and
//! prints one JSON line:
//!
//! ```text
//! {"notification_id":"...","state":"NOTIFICATION_STATE_PENDING","idempotent_replay":false}
//! ```
//!
//! It is the reference Rust producer: a plaintext gRPC channel, the API key as
//! `authorization: Bearer <key>` metadata, and an idempotency key per logical
//! notification, so that re-running it with the same `--idempotency-key` is
//! safe. SendNotification is retried on UNAVAILABLE and DEADLINE_EXCEEDED,
//! with that same key, and every call on RATE_LIMITED (RESOURCE_EXHAUSTED:
//! the server shed it before acting) after the `google.rpc.RetryInfo` delay
//! the server gave, within the same bounded number of attempts.
//!
//! With `--wait-ack` it sends with `require_ack` and then waits, over
//! WatchEvents, for the notification's terminal ack event (ACKED, DISMISSED
//! or TIMED_OUT), reconnecting and resuming after the last sequence it saw
//! when the stream breaks. The line then has an `ack` field:
//!
//! ```text
//! {...,"ack":{"kind":"EVENT_KIND_ACKED","actor":"...","sequence":42}}
//! ```
//!
//! `--cursor-file` keeps the resume position on disk, so a restarted producer
//! (same `--idempotency-key`, or `--notification-id`) picks up where it
//! stopped.
//!
//! With `--batch N` it sends N notifications in one BatchSendNotifications
//! call (idempotency keys `<key>-0` .. `<key>-<N-1>`), reads nothing back and
//! prints one JSON line per item, in order: `index`, `notification_id`,
//! `state`, `idempotent_replay`, `dedup_owner_id`, or `index` and `error`
//! (`code`, `reason`, `message`) for a refused item.
//!
//! Exit codes: 0 on success, 2 on a gRPC error (code, reason and message on
//! stderr), with `--batch` when any item was refused, or a usage error, 3 when `--wait-timeout` passed before the
//! terminal ack event (the line is printed without `ack`), 1 on anything else.

use std::collections::hash_map::RandomState;
use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use prost::Message;
use prost_types::{value::Kind, Struct, Value};
use serde::Serialize;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Status, TimeoutExpired};
use tonic_types::{ErrorInfo, StatusExt};
use uns_client::uns::v1::batch_send_result::Result as BatchItem;
use uns_client::uns::v1::watch_events_response::Response as WatchResponse;
use uns_client::uns::v1::{
    AckState, BatchSendNotificationsRequest, BatchSendNotificationsResponse, Event, EventKind,
    GetNotificationRequest, Notification, NotificationIntent, NotificationState,
    SendNotificationRequest, SendNotificationResponse, WatchEventsRequest,
};
use uns_client::NotificationServiceClient;

/// The terminal acknowledgement events: exactly one of them settles a
/// notification that requires an acknowledgement.
const ACK_KINDS: [EventKind; 3] = [EventKind::Acked, EventKind::Dismissed, EventKind::TimedOut];

/// Bounds SendNotification attempts (the first one included).
const SEND_ATTEMPTS: u32 = 5;

/// Send one UNS notification and print its id and state as JSON.
#[derive(Parser, Debug)]
#[command(name = "uns-producer", version)]
struct Args {
    /// UNS server address (host:port, plaintext).
    #[arg(long, default_value = "127.0.0.1:50051")]
    addr: String,
    /// API key, sent as `authorization: Bearer <key>`.
    #[arg(long)]
    api_key: Option<String>,
    /// Notification type.
    #[arg(long = "type", default_value = "demo.alert")]
    notification_type: String,
    /// Producing component.
    #[arg(long, default_value = "rust-producer")]
    source: String,
    /// Idempotency key [default: a random UUID].
    #[arg(long)]
    idempotency_key: Option<String>,
    /// Notification title.
    #[arg(long, default_value = "UNS demo alert")]
    title: String,
    /// Notification body.
    #[arg(long, default_value = "Sent by the Rust uns-producer.")]
    message: String,
    /// Deadline for each RPC, e.g. "10s" or "500ms".
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Send with require_ack and wait for the terminal ack event (ACKED,
    /// DISMISSED, TIMED_OUT).
    #[arg(long)]
    wait_ack: bool,
    /// How long --wait-ack waits before giving up (exit 3), e.g. "60s" or "2m".
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    wait_timeout: Duration,
    /// Keep the WatchEvents resume position in this file and resume from it
    /// when it exists.
    #[arg(long)]
    cursor_file: Option<PathBuf>,
    /// Send nothing: wait for the terminal ack event of this notification
    /// (implies --wait-ack).
    #[arg(long, conflicts_with = "batch")]
    notification_id: Option<String>,
    /// Send N notifications in one BatchSendNotifications call and print one
    /// line per item.
    #[arg(long, value_name = "N", conflicts_with = "wait_ack", value_parser = clap::value_parser!(u32).range(1..))]
    batch: Option<u32>,
}

/// The JSON line printed for each item of `--batch N`.
#[derive(Serialize)]
struct BatchLine {
    index: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    notification_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    state: Option<String>,
    idempotent_replay: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    dedup_owner_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<BatchError>,
}

#[derive(Serialize)]
struct BatchError {
    code: String,
    reason: String,
    message: String,
}

/// The JSON line printed on success.
#[derive(Serialize)]
struct Output {
    notification_id: String,
    state: String,
    idempotent_replay: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    ack: Option<AckOutput>,
}

/// The `ack` field: the terminal ack event.
#[derive(Serialize)]
struct AckOutput {
    kind: String,
    actor: String,
    sequence: i64,
}

/// Why the producer failed; decides the exit code.
enum Failure {
    Rpc(Status),
    /// `--wait-timeout` passed: the line without `ack`, and what to do next.
    WaitTimeout(Box<Output>, String),
    Other(String),
}

impl From<Status> for Failure {
    fn from(status: Status) -> Self {
        Failure::Rpc(status)
    }
}

/// Adds `authorization: Bearer <key>` to every call when a key is set.
#[derive(Clone)]
struct BearerAuth(Option<MetadataValue<Ascii>>);

impl Interceptor for BearerAuth {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

type Client = NotificationServiceClient<InterceptedService<Channel, BearerAuth>>;

fn connect(args: &Args) -> Result<Client, Failure> {
    let uri = if args.addr.contains("://") {
        args.addr.clone()
    } else {
        format!("http://{}", args.addr)
    };
    // Lazy: an unreachable server surfaces as UNAVAILABLE from the first RPC,
    // like any other gRPC error. The timeout bounds each unary call (and a
    // stream until its response headers). Keepalive pings notice a dead
    // connection under a quiet WatchEvents stream (the server allows one
    // every 10s).
    let channel = Endpoint::from_shared(uri)
        .map_err(|e| Failure::Other(format!("invalid --addr {:?}: {e}", args.addr)))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .connect_lazy();
    let auth = match &args.api_key {
        Some(key) => Some(
            format!("Bearer {key}")
                .parse()
                .map_err(|_| Failure::Other("--api-key must be printable ASCII".into()))?,
        ),
        None => None,
    };
    Ok(NotificationServiceClient::with_interceptor(
        channel,
        BearerAuth(auth),
    ))
}

fn string_struct(fields: &[(&str, &str)]) -> Struct {
    let fields: BTreeMap<String, Value> = fields
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                Value {
                    kind: Some(Kind::StringValue(v.to_string())),
                },
            )
        })
        .collect();
    Struct { fields }
}

fn send_request(args: &Args, idempotency_key: &str) -> SendNotificationRequest {
    SendNotificationRequest {
        notification_type: args.notification_type.clone(),
        intent: NotificationIntent::Informational.into(),
        title: args.title.clone(),
        message: args.message.clone(),
        source: args.source.clone(),
        idempotency_key: idempotency_key.to_owned(),
        metadata: Some(string_struct(&[("lang", "rust")])),
        require_ack: args.wait_ack.then_some(true),
        ..Default::default()
    }
}

/// Calls SendNotification, retrying UNAVAILABLE, DEADLINE_EXCEEDED and
/// RATE_LIMITED only,
/// with the same request, and so the same idempotency_key, every time: if an
/// earlier attempt was committed after all, the server answers with the
/// original notification and `idempotent_replay = true` instead of a
/// duplicate.
async fn send(
    client: &mut Client,
    request: SendNotificationRequest,
) -> Result<SendNotificationResponse, Status> {
    let mut attempt = 1;
    loop {
        match client.send_notification(request.clone()).await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) if attempt < SEND_ATTEMPTS && retryable(&status) => {
                let delay = wait_before(&status, attempt);
                eprintln!(
                    "uns-producer: SendNotification: {}; retrying in {}ms with the same idempotency key",
                    describe(&status),
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(status) => return Err(status),
        }
    }
}

/// The call may succeed if repeated: UNAVAILABLE (which covers the service's
/// STORAGE_UNAVAILABLE and SHUTTING_DOWN) and DEADLINE_EXCEEDED. Everything
/// else (invalid input, conflicts, auth, NOT_FOUND) fails the same way every
/// time.
fn retryable(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable | Code::DeadlineExceeded => true,
        // tonic reports its own client-side deadline as CANCELLED.
        Code::Cancelled => status.message() == TimeoutExpired(()).to_string(),
        _ => rate_limited(status),
    }
}

/// The server shed the call before acting on it (RESOURCE_EXHAUSTED with
/// ErrorInfo reason RATE_LIMITED), so any call may be repeated after the
/// delay its RetryInfo gives. RESOURCE_EXHAUSTED without it (a message over
/// the size limit, TOO_MANY_STREAMS) is final.
fn rate_limited(status: &Status) -> bool {
    status.code() == Code::ResourceExhausted
        && error_info(status).is_some_and(|info| info.reason == "RATE_LIMITED")
}

/// The wait before the next attempt after `failures` consecutive failures,
/// the last one `status`: the server's RetryInfo delay when it gave one
/// (stretched by up to a fifth, never shortened, so clients shed together do
/// not return together), else `retry_delay`'s backoff.
fn wait_before(status: &Status, failures: u32) -> Duration {
    match status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
    {
        Some(delay) => delay.mul_f64(1.0 + jitter() / 5.0),
        None => retry_delay(failures),
    }
}

/// The `google.rpc.ErrorInfo` the service attaches to every error it produces
/// (domain "uns.v1"); match on its `reason`. `None` for errors the transport
/// made up (connection refused, timeout).
fn error_info(status: &Status) -> Option<ErrorInfo> {
    status.get_details_error_info()
}

/// Calls BatchSendNotifications, retried exactly like `send`: every item
/// carries its idempotency key, so a repeated batch replays.
async fn send_batch(
    client: &mut Client,
    request: BatchSendNotificationsRequest,
) -> Result<BatchSendNotificationsResponse, Status> {
    let mut attempt = 1;
    loop {
        match client.batch_send_notifications(request.clone()).await {
            Ok(response) => return Ok(response.into_inner()),
            Err(status) if attempt < SEND_ATTEMPTS && retryable(&status) => {
                let delay = wait_before(&status, attempt);
                eprintln!(
                    "uns-producer: BatchSendNotifications: {}; retrying in {}ms with the same idempotency keys",
                    describe(&status),
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(status) => return Err(status),
        }
    }
}

/// `--batch N`: N copies of the notification, the i-th with the idempotency
/// key `<key>-<i>` and the title `<title> #<i>`. Prints one line per item;
/// `Ok(false)` when some item was refused.
async fn run_batch(args: &Args, n: u32) -> Result<bool, Failure> {
    let mut client = connect(args)?;
    let key = args
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let requests = (0..n)
        .map(|i| {
            let mut request = send_request(args, &format!("{key}-{i}"));
            request.title = format!("{} #{i}", args.title);
            request
        })
        .collect();
    let response = send_batch(&mut client, BatchSendNotificationsRequest { requests }).await?;
    let mut all_accepted = true;
    for (index, item) in response.results.into_iter().enumerate() {
        let mut line = BatchLine {
            index,
            notification_id: None,
            state: None,
            idempotent_replay: false,
            dedup_owner_id: None,
            error: None,
        };
        match item.result {
            Some(BatchItem::Response(sent)) => {
                line.notification_id = Some(sent.notification_id);
                line.state = Some(state_name(sent.state));
                line.idempotent_replay = sent.idempotent_replay;
                line.dedup_owner_id = Some(sent.dedup_owner_id).filter(|id| !id.is_empty());
            }
            Some(BatchItem::Error(error)) => {
                all_accepted = false;
                // The same details a refused call carries in grpc-status-details-bin.
                let status = Status::with_details(
                    Code::from_i32(error.code),
                    error.message.clone(),
                    error.encode_to_vec().into(),
                );
                line.error = Some(BatchError {
                    code: format!("{:?}", status.code()),
                    reason: error_info(&status)
                        .map(|info| info.reason)
                        .unwrap_or_default(),
                    message: error.message,
                });
            }
            None => return Err(Failure::Other(format!("item {index}: an empty result"))),
        }
        let text = serde_json::to_string(&line).map_err(|err| Failure::Other(err.to_string()))?;
        println!("{text}");
    }
    Ok(all_accepted)
}

/// Reads a notification back, retrying RATE_LIMITED only (a read that was
/// shed), after the server's delay.
async fn get(client: &mut Client, notification_id: &str) -> Result<Notification, Status> {
    let request = GetNotificationRequest {
        notification_id: notification_id.to_owned(),
    };
    let mut attempt = 1;
    let response = loop {
        match client.get_notification(request.clone()).await {
            Ok(response) => break response.into_inner(),
            Err(status) if attempt < SEND_ATTEMPTS && rate_limited(&status) => {
                let delay = wait_before(&status, attempt);
                eprintln!(
                    "uns-producer: GetNotification: {}; retrying in {}ms",
                    describe(&status),
                    delay.as_millis()
                );
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
            Err(status) => return Err(status),
        }
    };
    response
        .notification
        .ok_or_else(|| Status::internal("GetNotification returned no notification"))
}

fn state_name(state: i32) -> String {
    NotificationState::try_from(state)
        .map(|s| s.as_str_name().to_owned())
        .unwrap_or_else(|_| state.to_string())
}

fn ack_output(event: &Event) -> AckOutput {
    let actor = event
        .payload
        .as_ref()
        .and_then(|payload| payload.fields.get("actor"))
        .and_then(|value| match &value.kind {
            Some(Kind::StringValue(actor)) => Some(actor.clone()),
            _ => None,
        })
        .unwrap_or_default();
    AckOutput {
        kind: EventKind::try_from(event.kind)
            .map(|k| k.as_str_name().to_owned())
            .unwrap_or_else(|_| event.kind.to_string()),
        actor,
        sequence: event.sequence,
    }
}

/// Performs send -> (wait for the ack) -> get and builds the output line.
async fn run(args: Args) -> Result<Output, Failure> {
    let mut client = connect(&args)?;
    let (mut output, waited) = if args.wait_ack || args.notification_id.is_some() {
        let (output, ack) = send_and_wait(&mut client, &args).await?;
        (output, Some(ack))
    } else {
        let idempotency_key = args
            .idempotency_key
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let sent = send(&mut client, send_request(&args, &idempotency_key)).await?;
        let output = Output {
            notification_id: sent.notification_id,
            state: String::new(),
            idempotent_replay: sent.idempotent_replay,
            ack: None,
        };
        (output, None)
    };
    let notification = get(&mut client, &output.notification_id).await?;
    output.state = state_name(notification.state);
    match waited {
        Some(Err(why)) => Err(Failure::WaitTimeout(Box::new(output), why)),
        Some(Ok(event)) => {
            output.ack = Some(ack_output(&event));
            Ok(output)
        }
        None => Ok(output),
    }
}

/// Sends the notification with require_ack (or, with `--notification-id`,
/// takes an existing one) and waits for its terminal ack event. The inner
/// `Err` is the wait timing out, with what to tell the user.
async fn send_and_wait(
    client: &mut Client,
    args: &Args,
) -> Result<(Output, Result<Event, String>), Failure> {
    let (mut cursor, found) = Cursor::load(args.cursor_file.as_deref())?;
    let output = match &args.notification_id {
        Some(id) => {
            prepare_existing(client, args, id, &mut cursor, found).await?;
            Output {
                notification_id: id.clone(),
                state: String::new(),
                idempotent_replay: false,
                ack: None,
            }
        }
        None => send_positioned(client, args, &mut cursor, found).await?,
    };

    let id = &output.notification_id;
    eprintln!(
        "uns-producer: waiting up to {:?} for the terminal ack event of {id}",
        args.wait_timeout
    );
    let wait = wait_for_ack(client, id, &mut cursor);
    let waited = match tokio::time::timeout(args.wait_timeout, wait).await {
        Ok(ack) => Ok(ack?),
        Err(_elapsed) => {
            let mut resume = format!("--notification-id {id}");
            if let Some(path) = &args.cursor_file {
                resume.push_str(&format!(" --cursor-file {}", path.display()));
            }
            Err(format!(
                "no terminal ack event for {id} within {:?} (resume with {resume})",
                args.wait_timeout
            ))
        }
    };
    Ok((output, waited))
}

/// Sends the notification. Without a stored cursor it first takes a
/// position: every event of the new notification is committed after it, so
/// none can slip by between SendNotification and WatchEvents.
async fn send_positioned(
    client: &mut Client,
    args: &Args,
    cursor: &mut Cursor,
    found: bool,
) -> Result<Output, Failure> {
    if !found {
        let position = position(client, args.timeout).await?;
        cursor.advance(position)?;
    }
    let idempotency_key = args
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let sent = send(client, send_request(args, &idempotency_key)).await?;
    eprintln!(
        "uns-producer: sent {} (idempotent_replay={})",
        sent.notification_id, sent.idempotent_replay
    );
    Ok(Output {
        notification_id: sent.notification_id,
        state: String::new(),
        idempotent_replay: sent.idempotent_replay,
        ack: None,
    })
}

/// Checks that notification `id` awaits an acknowledgement and, without a
/// stored cursor, positions `cursor`: a notification still unsettled after a
/// position has its ack event after it; for one settled already the cursor
/// stays 0, so the watch reads its history.
async fn prepare_existing(
    client: &mut Client,
    args: &Args,
    id: &str,
    cursor: &mut Cursor,
    found: bool,
) -> Result<(), Failure> {
    let position = if found {
        None
    } else {
        Some(position(client, args.timeout).await?)
    };
    let notification = get(client, id).await?;
    if !notification
        .effective_policy
        .is_some_and(|policy| policy.require_ack)
    {
        return Err(Failure::Other(format!(
            "notification {id} does not require an acknowledgement"
        )));
    }
    let settled = matches!(
        AckState::try_from(notification.ack_state),
        Ok(AckState::Acked | AckState::Dismissed | AckState::TimedOut)
    );
    match position {
        Some(position) if !settled => cursor.advance(position),
        _ => Ok(()),
    }
}

/// The sequence every event committed from now on will exceed: the first
/// message of a fresh stream, which always comes at once (a heartbeat with
/// the stream's position, or an event after it).
async fn position(client: &mut Client, timeout: Duration) -> Result<i64, Status> {
    let mut attempt = 1;
    loop {
        match position_once(client, timeout).await {
            Err(status) if attempt < SEND_ATTEMPTS && retryable_watch(&status) => {
                tokio::time::sleep(wait_before(&status, attempt)).await;
                attempt += 1;
            }
            result => return result,
        }
    }
}

async fn position_once(client: &mut Client, timeout: Duration) -> Result<i64, Status> {
    let request = WatchEventsRequest {
        kinds: ACK_KINDS.iter().map(|&kind| kind.into()).collect(),
        ..Default::default()
    };
    // Dropping the stream ends the call.
    let first = async {
        client
            .watch_events(request)
            .await?
            .into_inner()
            .message()
            .await
    };
    let first = tokio::time::timeout(timeout, first)
        .await
        .map_err(|_| Status::deadline_exceeded("no WatchEvents message in time"))??;
    match first.and_then(|message| message.response) {
        Some(WatchResponse::Heartbeat(heartbeat)) => Ok(heartbeat.high_water_sequence),
        Some(WatchResponse::Event(event)) => Ok(event.sequence),
        None => Err(Status::unavailable("the server ended the stream")),
    }
}

/// How one WatchEvents call ended.
enum Watched {
    /// The terminal ack event.
    Ack(Event),
    /// The stream broke; `progressed` says whether it delivered anything.
    Broken { status: Status, progressed: bool },
}

/// Follows WatchEvents for the notification's ack events, after `cursor`,
/// until the terminal one arrives. When a stream breaks it waits (backoff)
/// and opens a new one after the cursor, the last sequence seen: the server
/// sends every matching event committed after it, so nothing is missed or
/// repeated.
async fn wait_for_ack(
    client: &mut Client,
    id: &str,
    cursor: &mut Cursor,
) -> Result<Event, Failure> {
    let mut failures = 0;
    loop {
        let status = match watch_once(client, id, cursor).await? {
            Watched::Ack(event) => return Ok(event),
            Watched::Broken { status, progressed } => {
                if progressed {
                    failures = 0;
                }
                status
            }
        };
        if !retryable_watch(&status) {
            return Err(status.into());
        }
        failures += 1;
        let delay = wait_before(&status, failures);
        eprintln!(
            "uns-producer: watch interrupted ({}); reconnecting in {}ms after sequence {}",
            describe(&status),
            delay.as_millis(),
            cursor.sequence
        );
        tokio::time::sleep(delay).await;
    }
}

async fn watch_once(
    client: &mut Client,
    id: &str,
    cursor: &mut Cursor,
) -> Result<Watched, Failure> {
    let after = cursor.sequence;
    let request = WatchEventsRequest {
        notification_ids: vec![id.to_owned()],
        kinds: ACK_KINDS.iter().map(|&kind| kind.into()).collect(),
        after_sequence: after,
        // after_sequence 0 alone means "from now"; a cursor of 0 (no position
        // yet, or one taken on an empty timeline) means "everything".
        replay_history: after == 0,
        ..Default::default()
    };
    let mut stream = match client.watch_events(request).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            return Ok(Watched::Broken {
                status,
                progressed: false,
            })
        }
    };
    let mut progressed = false;
    loop {
        let message = match stream.message().await {
            Ok(Some(message)) => message,
            Ok(None) => {
                let status = Status::unavailable("the server ended the stream");
                return Ok(Watched::Broken { status, progressed });
            }
            Err(status) => {
                // On shutdown the server says how far this stream got.
                if let Some(sequence) = resume_after(&status) {
                    cursor.advance(sequence)?;
                }
                return Ok(Watched::Broken { status, progressed });
            }
        };
        if !progressed {
            progressed = true;
            eprintln!("uns-producer: watching {id} after sequence {after}");
        }
        match message.response {
            Some(WatchResponse::Heartbeat(heartbeat)) => {
                cursor.advance(heartbeat.high_water_sequence)?;
            }
            Some(WatchResponse::Event(event)) => {
                if event.sequence <= cursor.sequence {
                    continue; // seen before a reconnect
                }
                let is_ack = ACK_KINDS.iter().any(|&kind| i32::from(kind) == event.kind);
                if event.notification_id == id && is_ack {
                    // Not persisted: a re-run with the same cursor file
                    // reports this event again instead of waiting for one
                    // that came.
                    return Ok(Watched::Ack(event));
                }
                cursor.advance(event.sequence)?;
            }
            None => {}
        }
    }
}

/// Opening the stream again may help. That is UNAVAILABLE (server shutting
/// down, database outage, connection refused or lost) and a stream broken by
/// the transport, without a status from the service (INTERNAL or UNKNOWN
/// with no ErrorInfo, e.g. a reset connection). The service's own refusals
/// (UNAUTHENTICATED, PERMISSION_DENIED, HISTORY_COMPACTED, INVALID_REQUEST,
/// ...) are final, except RATE_LIMITED: the stream's start was shed, so it is
/// opened again after the server's delay.
fn retryable_watch(status: &Status) -> bool {
    match status.code() {
        Code::Unavailable => true,
        Code::Internal | Code::Unknown => error_info(status).is_none(),
        _ => rate_limited(status),
    }
}

/// The `resume_after_sequence` a SHUTTING_DOWN error carries.
fn resume_after(status: &Status) -> Option<i64> {
    let info = error_info(status).filter(|info| info.reason == "SHUTTING_DOWN")?;
    info.metadata.get("resume_after_sequence")?.parse().ok()
}

/// The WatchEvents resume position: every matching event with a greater
/// sequence is still to come. With a path it is kept in that file.
struct Cursor {
    sequence: i64,
    path: Option<PathBuf>,
    /// The file holds `sequence`.
    saved: bool,
}

impl Cursor {
    /// Reads the cursor file; the flag is false when there is none.
    fn load(path: Option<&Path>) -> Result<(Cursor, bool), Failure> {
        let mut cursor = Cursor {
            sequence: 0,
            path: path.map(Path::to_path_buf),
            saved: false,
        };
        let Some(path) = path else {
            return Ok((cursor, false));
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok((cursor, false)),
            Err(err) => return Err(Failure::Other(format!("{}: {err}", path.display()))),
        };
        cursor.sequence = text
            .trim()
            .parse()
            .ok()
            .filter(|sequence: &i64| *sequence >= 0)
            .ok_or_else(|| {
                Failure::Other(format!(
                    "cursor file {} does not hold a sequence number: {text:?}",
                    path.display()
                ))
            })?;
        cursor.saved = true;
        Ok((cursor, true))
    }

    /// Moves the cursor forward to `sequence` and persists it: a temporary
    /// file is written, synced and renamed over the old one, so a crash leaves
    /// either the old or the new position, never a torn file.
    fn advance(&mut self, sequence: i64) -> Result<(), Failure> {
        let unsaved = self.path.is_some() && !self.saved;
        if sequence < self.sequence || (sequence == self.sequence && !unsaved) {
            return Ok(());
        }
        self.sequence = sequence;
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut tmp = path.clone().into_os_string();
        tmp.push(format!(".{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            let mut file = std::fs::File::create(&tmp)?;
            writeln!(file, "{sequence}")?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|err| Failure::Other(format!("cursor file {}: {err}", path.display())))?;
        self.saved = true;
        Ok(())
    }
}

/// The wait after `failures` consecutive failures (1 for the first):
/// exponential from 100ms, capped at 5s, with jitter so that clients that
/// failed together do not come back together.
fn retry_delay(failures: u32) -> Duration {
    let ceiling = (Duration::from_millis(100) * 2u32.pow(failures.saturating_sub(1).min(6)))
        .min(Duration::from_secs(5));
    ceiling.mul_f64(0.5 + jitter() / 2.0)
}

/// A random number in [0, 1): std has no RNG, but a new RandomState is
/// randomly keyed, enough for jitter.
fn jitter() -> f64 {
    let random = RandomState::new().build_hasher().finish();
    (random % 1024) as f64 / 1024.0
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (use e.g. 10s, 500ms or 2m)");
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else if let Some(m) = text.strip_suffix('m') {
        (m, 60.0)
    } else {
        return Err(invalid());
    };
    let value: f64 = number.parse().map_err(|_| invalid())?;
    Duration::try_from_secs_f64(value * scale)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(invalid)
}

/// "Code (REASON): message", plus, for transport failures ("tcp connect
/// error"), the underlying causes.
fn describe(status: &Status) -> String {
    let mut text = format!("{:?}", status.code());
    if let Some(info) = error_info(status) {
        text.push_str(&format!(" ({})", info.reason));
    }
    text.push_str(": ");
    text.push_str(status.message());
    let mut cause = std::error::Error::source(status);
    while let Some(err) = cause {
        // Wrapping layers often repeat their inner error's text.
        let part = err.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = err.source();
    }
    text
}

fn print_line(output: &Output) -> Result<(), String> {
    let line = serde_json::to_string(output).map_err(|err| err.to_string())?;
    println!("{line}");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(args) => args,
        Err(err) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Some(n) = args.batch {
        return match run_batch(&args, n).await {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => {
                eprintln!("uns-producer: some items of the batch were refused");
                ExitCode::from(2)
            }
            Err(Failure::Rpc(status)) => {
                eprintln!("uns-producer: {}", describe(&status));
                ExitCode::from(2)
            }
            Err(Failure::WaitTimeout(..)) => ExitCode::FAILURE,
            Err(Failure::Other(message)) => {
                eprintln!("uns-producer: {message}");
                ExitCode::FAILURE
            }
        };
    }
    let (output, code) = match run(args).await {
        Ok(output) => (output, ExitCode::SUCCESS),
        Err(Failure::WaitTimeout(output, why)) => {
            eprintln!("uns-producer: wait timed out: {why}");
            (*output, ExitCode::from(3))
        }
        Err(Failure::Rpc(status)) => {
            eprintln!("uns-producer: {}", describe(&status));
            return ExitCode::from(2);
        }
        Err(Failure::Other(message)) => {
            eprintln!("uns-producer: {message}");
            return ExitCode::FAILURE;
        }
    };
    match print_line(&output) {
        Ok(()) => code,
        Err(err) => {
            eprintln!("uns-producer: {err}");
            ExitCode::FAILURE
        }
    }
}

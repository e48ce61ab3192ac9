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
//! safe.
//!
//! Exit codes: 0 on success, 2 on a gRPC error (code and message on stderr)
//! or a usage error, 1 on anything else.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use prost_types::{value::Kind, Struct, Value};
use serde::Serialize;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};
use uns_client::uns::v1::{
    GetNotificationRequest, Notification, NotificationIntent, NotificationState,
    SendNotificationRequest, SendNotificationResponse,
};
use uns_client::NotificationServiceClient;

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
}

/// The JSON line printed on success.
#[derive(Serialize)]
struct Output {
    notification_id: String,
    state: String,
    idempotent_replay: bool,
}

/// Why the producer failed; decides the exit code.
enum Failure {
    Rpc(Status),
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
    // like any other gRPC error.
    let channel = Endpoint::from_shared(uri)
        .map_err(|e| Failure::Other(format!("invalid --addr {:?}: {e}", args.addr)))?
        .connect_timeout(args.timeout)
        .timeout(args.timeout)
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

async fn send(
    client: &mut Client,
    args: &Args,
    idempotency_key: &str,
) -> Result<SendNotificationResponse, Status> {
    let request = SendNotificationRequest {
        notification_type: args.notification_type.clone(),
        intent: NotificationIntent::Informational.into(),
        title: args.title.clone(),
        message: args.message.clone(),
        source: args.source.clone(),
        idempotency_key: idempotency_key.to_owned(),
        metadata: Some(string_struct(&[("lang", "rust")])),
        ..Default::default()
    };
    Ok(client.send_notification(request).await?.into_inner())
}

async fn get(client: &mut Client, notification_id: &str) -> Result<Notification, Status> {
    let request = GetNotificationRequest {
        notification_id: notification_id.to_owned(),
    };
    let response = client.get_notification(request).await?.into_inner();
    response
        .notification
        .ok_or_else(|| Status::internal("GetNotification returned no notification"))
}

fn state_name(state: i32) -> String {
    NotificationState::try_from(state)
        .map(|s| s.as_str_name().to_owned())
        .unwrap_or_else(|_| state.to_string())
}

/// Performs send -> get and builds the output line. A later `--wait-ack`
/// mode slots in between get and the output (WatchEvents on the id).
async fn run(args: Args) -> Result<Output, Failure> {
    let mut client = connect(&args)?;
    let idempotency_key = args
        .idempotency_key
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let sent = send(&mut client, &args, &idempotency_key).await?;
    let notification = get(&mut client, &sent.notification_id).await?;
    Ok(Output {
        notification_id: sent.notification_id,
        state: state_name(notification.state),
        idempotent_replay: sent.idempotent_replay,
    })
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("invalid duration {text:?} (use e.g. 10s or 500ms)");
    let (number, scale) = if let Some(ms) = text.strip_suffix("ms") {
        (ms, 1e-3)
    } else if let Some(s) = text.strip_suffix('s') {
        (s, 1.0)
    } else {
        return Err(invalid());
    };
    let value: f64 = number.parse().map_err(|_| invalid())?;
    Duration::try_from_secs_f64(value * scale)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(invalid)
}

/// The status message plus, for transport failures ("tcp connect error"),
/// the underlying causes.
fn describe(status: &Status) -> String {
    let mut text = status.message().to_owned();
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
    match run(args).await {
        Ok(output) => match serde_json::to_string(&output) {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(err) => {
                eprintln!("uns-producer: {err}");
                ExitCode::FAILURE
            }
        },
        Err(Failure::Rpc(status)) => {
            eprintln!("uns-producer: {:?}: {}", status.code(), describe(&status));
            ExitCode::from(2)
        }
        Err(Failure::Other(message)) => {
            eprintln!("uns-producer: {message}");
            ExitCode::FAILURE
        }
    }
}

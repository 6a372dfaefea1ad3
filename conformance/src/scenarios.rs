//! Scenario vectors: timed API calls and packets go into one [`Endpoint`]; the file says
//! exactly which packets, events, deadlines and counters must come out, and when.
//!
//! [`load_scenarios`] reads the compiled-in `vectors/scenarios.json`; [`run_case`] replays one
//! case against a fresh `homa_core::Endpoint` and reports the first step whose expectation
//! fails. The format is described in `conformance/README.md` and checked by
//! `schema/scenarios.schema.json`.

use homa_core::Instant;
use std::fmt;
use std::net::SocketAddr;

use homa_core::config::Field;
use homa_core::{ApiError, Config, Endpoint, Event, Metrics, ServerRpc};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value, json};

use crate::fields;
use crate::vectors::{LoadError, SCHEMA_VERSION};

/// The scenario vectors, `vectors/scenarios.json`.
pub const SCENARIOS_JSON: &str = include_str!("../vectors/scenarios.json");

/// The JSON Schema of the scenario vectors, `schema/scenarios.schema.json`.
pub const SCENARIOS_SCHEMA_JSON: &str = include_str!("../schema/scenarios.schema.json");

/// Most packets one `expect_transmits` step drains before giving up (a livelock guard).
const MAX_DRAIN: usize = 10_000;

/// One vector file of kind `scenario`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub schema_version: u32,
    pub kind: String,
    pub description: String,
    pub groups: Vec<ScenarioGroup>,
}

/// A named set of related cases.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioGroup {
    pub name: String,
    pub description: String,
    pub cases: Vec<Scenario>,
}

/// One endpoint's life: a configuration and the ordered steps that drive and check it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Stable, unique in the file; expected-failure lists name cases by it.
    pub id: String,
    pub description: String,
    pub tags: Vec<String>,
    /// `Config` fields that differ from the defaults, by name.
    #[serde(default)]
    pub config: Map<String, Value>,
    pub steps: Vec<Step>,
}

/// One input or expectation at time `at` (nanoseconds; never less than the previous step's).
#[derive(Debug, Clone, Deserialize)]
pub struct Step {
    pub at: u64,
    #[serde(flatten)]
    pub action: Action,
}

/// What a step does, named by its `op`.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Action {
    Bind {
        port: u16,
        expect_error: Option<String>,
    },
    BindEphemeral {
        expect_return: Option<u16>,
        expect_error: Option<String>,
    },
    Unbind {
        port: u16,
        expect_error: Option<String>,
    },
    SendRequest {
        port: u16,
        dest: SocketAddr,
        dest_port: u16,
        message: Message,
        cookie: u64,
        expect_return: Option<u64>,
        expect_error: Option<String>,
    },
    SendResponse {
        client: SocketAddr,
        id: u64,
        message: Message,
        expect_error: Option<String>,
    },
    Abort {
        id: u64,
        expect_error: Option<String>,
    },
    HandleUnreachable {
        peer: SocketAddr,
        port: Option<u16>,
    },
    /// `handle_packet`: the bytes are `hex`, or `fields` encoded as `conformance::fields`
    /// does (exactly one of the two).
    Packet {
        from: SocketAddr,
        fields: Option<Map<String, Value>>,
        hex: Option<String>,
        /// The wire error class `handle_packet` must return.
        expect_error: Option<String>,
    },
    /// `handle_timeout`.
    Timeout,
    /// Drain `poll_transmit`: exactly these packets, in this order.
    ExpectTransmits {
        transmits: Vec<ExpectedTransmit>,
    },
    /// Drain `poll_event`: exactly these events, in this order.
    ExpectEvents {
        events: Vec<ExpectedEvent>,
    },
    /// `poll_timeout`: exactly `deadline` (a number or null) if given; else within
    /// [`not_before`, `not_after`], where null is accepted only without `not_after`.
    ExpectTimeout {
        #[serde(default, deserialize_with = "present")]
        deadline: Option<Option<u64>>,
        not_before: Option<u64>,
        not_after: Option<u64>,
    },
    /// `metrics()`: every value given (nested objects compared key by key) must match.
    ExpectMetrics {
        metrics: Map<String, Value>,
    },
}

impl Action {
    /// The step's `op`, for messages.
    pub fn op(&self) -> &'static str {
        match self {
            Action::Bind { .. } => "bind",
            Action::BindEphemeral { .. } => "bind_ephemeral",
            Action::Unbind { .. } => "unbind",
            Action::SendRequest { .. } => "send_request",
            Action::SendResponse { .. } => "send_response",
            Action::Abort { .. } => "abort",
            Action::HandleUnreachable { .. } => "handle_unreachable",
            Action::Packet { .. } => "packet",
            Action::Timeout => "timeout",
            Action::ExpectTransmits { .. } => "expect_transmits",
            Action::ExpectEvents { .. } => "expect_events",
            Action::ExpectTimeout { .. } => "expect_timeout",
            Action::ExpectMetrics { .. } => "expect_metrics",
        }
    }
}

/// Distinguishes a key given as `null` (`Some(None)`) from an absent one (`None`).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// A packet `poll_transmit` must give: its destination, its priority level, and a subset of
/// its canonical fields.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectedTransmit {
    pub to: SocketAddr,
    pub priority: u8,
    pub packet: Map<String, Value>,
}

/// An event `poll_event` must give.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ExpectedEvent {
    RequestReceived { client: SocketAddr, id: u64, port: u16, client_port: u16, message: Message },
    ResponseReceived { id: u64, cookie: u64, message: Message },
    RpcFailed { id: u64, cookie: u64, reason: String },
}

/// Message bytes: lowercase hex, or generated so large messages stay small in the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Message {
    Hex(String),
    Generated(Generated),
}

/// `len` bytes, each `fill` or given by `pattern`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Generated {
    pub len: usize,
    pub fill: Option<u8>,
    pub pattern: Option<Pattern>,
}

/// A byte pattern indexed by position in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Pattern {
    /// Byte `k` of the message is `k % 251` (a prime, so packet boundaries never line up
    /// with the pattern's period and a misplaced packet shows).
    #[serde(rename = "mod251")]
    Mod251,
}

impl Message {
    /// The bytes this stands for.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match self {
            Message::Hex(s) => hex::decode(s).map_err(|e| format!("message hex: {e}")),
            Message::Generated(g) => generate(g.fill, g.pattern, 0, g.len),
        }
    }
}

/// `len` bytes starting at message offset `offset`: all `fill`, or the `pattern`.
fn generate(
    fill: Option<u8>,
    pattern: Option<Pattern>,
    offset: usize,
    len: usize,
) -> Result<Vec<u8>, String> {
    match (fill, pattern) {
        (Some(b), None) => Ok(vec![b; len]),
        (None, Some(Pattern::Mod251)) => {
            Ok((offset..offset + len).map(|k| (k % 251) as u8).collect())
        }
        _ => Err("generated bytes need exactly one of `fill` and `pattern`".into()),
    }
}

/// A generated DATA payload inside packet fields: `{"fill": b}` or `{"pattern": "mod251"}`,
/// sized by the packet's `payload_len` and placed at its `effective_offset`.
fn generated_payload(fields: &Map<String, Value>, spec: &Value) -> Result<String, String> {
    let spec: GeneratedPayload = serde_json::from_value(spec.clone())
        .map_err(|e| format!("generated payload {spec}: {e}"))?;
    let number = |key: &str| {
        fields.get(key).map_or(Ok(0), |v| {
            v.as_u64().map(|n| n as usize).ok_or_else(|| format!("`{key}` is not an integer"))
        })
    };
    let len = fields.get("payload_len").ok_or("a generated payload needs `payload_len`")?;
    let len = len.as_u64().ok_or("`payload_len` is not an integer")? as usize;
    let bytes = generate(spec.fill, spec.pattern, number("effective_offset")?, len)?;
    Ok(hex::encode(bytes))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct GeneratedPayload {
    fill: Option<u8>,
    pattern: Option<Pattern>,
}

/// `fields` with a generated `payload` (if any) replaced by its hex.
fn with_payload(fields: &Map<String, Value>) -> Result<Map<String, Value>, String> {
    let mut out = fields.clone();
    if let Some(spec) = fields.get("payload").filter(|v| v.is_object()) {
        out.insert("payload".into(), Value::String(generated_payload(fields, spec)?));
    }
    Ok(out)
}

impl ScenarioFile {
    /// Parses a scenario vector file and checks its kind and schema version.
    pub fn from_json(text: &str) -> Result<ScenarioFile, LoadError> {
        let file: ScenarioFile = serde_json::from_str(text).map_err(LoadError::Json)?;
        if file.kind != "scenario" {
            return Err(LoadError::Format(format!(
                "kind is {:?}, expected \"scenario\"",
                file.kind
            )));
        }
        if file.schema_version != SCHEMA_VERSION {
            return Err(LoadError::Format(format!(
                "schema_version {} is not {SCHEMA_VERSION}",
                file.schema_version
            )));
        }
        Ok(file)
    }

    /// Every case of every group, in file order.
    pub fn cases(&self) -> impl Iterator<Item = &Scenario> {
        self.groups.iter().flat_map(|g| &g.cases)
    }
}

/// Loads the compiled-in `vectors/scenarios.json`.
pub fn load_scenarios() -> Result<ScenarioFile, LoadError> {
    ScenarioFile::from_json(SCENARIOS_JSON)
}

/// Why a case failed: the step (0-based index into `steps`), its op and time, and what
/// differed. `step` is `None` when the case could not start (bad `config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub step: Option<usize>,
    pub op: &'static str,
    pub at: u64,
    pub detail: String,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.step {
            Some(i) => write!(f, "step {i} ({} at {} ns): {}", self.op, self.at, self.detail),
            None => write!(f, "{}", self.detail),
        }
    }
}

impl std::error::Error for Failure {}

/// The `Config` a case asks for: the defaults with its `config` overrides applied (by the
/// core's field table, `homa_core::config::FIELDS`).
pub fn config(overrides: &Map<String, Value>) -> Result<Config, String> {
    let mut c = Config::default();
    for (key, value) in overrides {
        let field = Field::named(key).ok_or_else(|| format!("config: no Config field `{key}`"))?;
        (field.set)(&mut c, &value.into()).map_err(|e| format!("config: {e}"))?;
    }
    Ok(c)
}

/// Replays `case` against a fresh endpoint; `Err` names the first step that did not go as
/// the file says.
pub fn run_case(case: &Scenario) -> Result<(), Failure> {
    let setup = |detail: String| Failure { step: None, op: "config", at: 0, detail };
    let config = config(&case.config).map_err(setup)?;
    let buf = vec![0; config.max_packet_len()];
    let endpoint = Endpoint::new(config).map_err(|e| setup(format!("config: {e}")))?;
    let mut runner = Runner { endpoint, buf };
    let mut last = 0;
    for (i, step) in case.steps.iter().enumerate() {
        let fail =
            |detail: String| Failure { step: Some(i), op: step.action.op(), at: step.at, detail };
        if step.at < last {
            return Err(fail(format!("`at` goes back in time (previous step at {last})")));
        }
        last = step.at;
        runner.step(step.at, &step.action).map_err(fail)?;
    }
    Ok(())
}

struct Runner {
    endpoint: Endpoint,
    buf: Vec<u8>,
}

impl Runner {
    fn step(&mut self, now: u64, action: &Action) -> Result<(), String> {
        let ep = &mut self.endpoint;
        match action {
            Action::Bind { port, expect_error } => outcome(ep.bind(*port), None, expect_error),
            Action::BindEphemeral { expect_return, expect_error } => {
                outcome(ep.bind_ephemeral(), *expect_return, expect_error)
            }
            Action::Unbind { port, expect_error } => outcome(ep.unbind(*port), None, expect_error),
            Action::SendRequest {
                port,
                dest,
                dest_port,
                message,
                cookie,
                expect_return,
                expect_error,
            } => {
                let message = message.bytes()?;
                let got = ep.send_request(
                    Instant::from_nanos(now),
                    *port,
                    *dest,
                    *dest_port,
                    message,
                    *cookie,
                );
                outcome(got, *expect_return, expect_error)
            }
            Action::SendResponse { client, id, message, expect_error } => {
                let rpc = ServerRpc { client: *client, id: *id };
                outcome(
                    ep.send_response(Instant::from_nanos(now), rpc, message.bytes()?),
                    None,
                    expect_error,
                )
            }
            Action::Abort { id, expect_error } => outcome(ep.abort(*id), None, expect_error),
            Action::HandleUnreachable { peer, port } => {
                ep.handle_unreachable(*peer, *port);
                Ok(())
            }
            Action::Packet { from, fields, hex, expect_error } => {
                let bytes = packet_bytes(fields.as_ref(), hex.as_deref())?;
                match (ep.handle_packet(Instant::from_nanos(now), *from, &bytes), expect_error) {
                    (Ok(()), None) => Ok(()),
                    (Ok(()), Some(want)) => Err(format!("accepted, want error {want}")),
                    (Err(e), None) => Err(format!("rejected as {}, want accepted", e.class())),
                    (Err(e), Some(want)) if e.class() == want => Ok(()),
                    (Err(e), Some(want)) => Err(format!("error {}, want {want}", e.class())),
                }
            }
            Action::Timeout => {
                ep.handle_timeout(Instant::from_nanos(now));
                Ok(())
            }
            Action::ExpectTransmits { transmits } => self.check_transmits(now, transmits),
            Action::ExpectEvents { events } => check_events(ep, events),
            Action::ExpectTimeout { deadline, not_before, not_after } => {
                let got = ep.poll_timeout().map(homa_core::Instant::as_nanos);
                let show = |d: Option<u64>| d.map_or("null".to_string(), |d| d.to_string());
                let ok = match deadline {
                    Some(want) => got == *want,
                    None => match got {
                        None => not_after.is_none(),
                        Some(d) => {
                            not_before.is_none_or(|a| d >= a) && not_after.is_none_or(|b| d <= b)
                        }
                    },
                };
                if ok {
                    return Ok(());
                }
                let want = match deadline {
                    Some(d) => show(*d),
                    None => format!("in [{}, {}]", show(*not_before), show(*not_after)),
                };
                Err(format!("poll_timeout is {}, want {want}", show(got)))
            }
            Action::ExpectMetrics { metrics } => {
                let got = metrics_json(&ep.metrics());
                let mut diffs = Vec::new();
                subset_diff("", &Value::Object(metrics.clone()), &got, &mut diffs);
                if diffs.is_empty() {
                    Ok(())
                } else {
                    Err(format!("metrics differ: {}", diffs.join("; ")))
                }
            }
        }
    }

    fn check_transmits(&mut self, now: u64, want: &[ExpectedTransmit]) -> Result<(), String> {
        let mut got = Vec::new();
        while let Some(t) = self
            .endpoint
            .poll_transmit(Instant::from_nanos(now), &mut self.buf)
            .expect("the buffer holds max_packet_len")
        {
            let bytes = &self.buf[..t.len];
            let decoded = fields::decode(bytes).map_err(|e| {
                format!("transmit {} does not decode ({e}): {}", got.len(), hex::encode(bytes))
            })?;
            got.push((t.to, t.priority, decoded));
            if got.len() > MAX_DRAIN {
                return Err(format!("poll_transmit never ran dry ({MAX_DRAIN} packets)"));
            }
        }
        let listing = || {
            let lines: Vec<String> = got
                .iter()
                .enumerate()
                .map(|(i, (to, prio, f))| format!("\n  [{i}] {}", summary(*to, *prio, f)))
                .collect();
            if lines.is_empty() { " (none)".to_string() } else { lines.concat() }
        };
        for (i, w) in want.iter().enumerate() {
            let Some((to, priority, fields)) = got.get(i) else {
                return Err(format!(
                    "want {} packets, got {}:{}",
                    want.len(),
                    got.len(),
                    listing()
                ));
            };
            let expected = with_payload(&w.packet)?;
            let mut diffs = Vec::new();
            if *to != w.to {
                diffs.push(format!("`to`: want {}, got {to}", w.to));
            }
            if *priority != w.priority {
                diffs.push(format!("`priority`: want {}, got {priority}", w.priority));
            }
            subset_diff("", &Value::Object(expected), &Value::Object(fields.clone()), &mut diffs);
            if !diffs.is_empty() {
                return Err(format!(
                    "transmit {i} differs: {}; all transmits:{}",
                    diffs.join("; "),
                    listing()
                ));
            }
        }
        if got.len() > want.len() {
            return Err(format!("want {} packets, got {}:{}", want.len(), got.len(), listing()));
        }
        Ok(())
    }
}

/// Compares an API call's result with the step's `expect_return` / `expect_error`.
fn outcome<T: PartialEq + fmt::Debug>(
    got: Result<T, ApiError>,
    want: Option<T>,
    want_error: &Option<String>,
) -> Result<(), String> {
    match (got, want_error) {
        (Ok(v), None) => match want {
            Some(w) if v != w => Err(format!("returned {v:?}, want {w:?}")),
            _ => Ok(()),
        },
        (Ok(v), Some(e)) => Err(format!("returned {v:?}, want error {e}")),
        (Err(e), None) => Err(format!("failed with {} ({e}), want success", api_error_name(&e))),
        (Err(e), Some(w)) if api_error_name(&e) == w => Ok(()),
        (Err(e), Some(w)) => Err(format!("failed with {} ({e}), want {w}", api_error_name(&e))),
    }
}

/// The file's name for an API error ([`ApiError::name`]).
pub fn api_error_name(e: &ApiError) -> &'static str {
    e.name()
}

fn packet_bytes(fields: Option<&Map<String, Value>>, hex: Option<&str>) -> Result<Vec<u8>, String> {
    match (fields, hex) {
        (Some(f), None) => {
            let f = with_payload(f)?;
            fields::encode(&f).map_err(|e| format!("packet fields do not encode: {e}"))
        }
        (None, Some(h)) => hex::decode(h).map_err(|e| format!("packet hex: {e}")),
        _ => Err("a packet step needs exactly one of `fields` and `hex`".into()),
    }
}

/// An event as the file writes it, with the message as hex.
pub fn event_json(event: &Event) -> Value {
    match event {
        Event::RequestReceived { rpc, port, client_port, message } => json!({
            "type": "request_received", "client": rpc.client.to_string(), "id": rpc.id,
            "port": port, "client_port": client_port, "message": hex::encode(message)}),
        Event::ResponseReceived { id, cookie, message } => json!({
            "type": "response_received", "id": id, "cookie": cookie,
            "message": hex::encode(message)}),
        Event::RpcFailed { id, cookie, reason } => json!({
            "type": "rpc_failed", "id": id, "cookie": cookie, "reason": reason.name()}),
    }
}

fn expected_event_json(e: &ExpectedEvent) -> Result<Value, String> {
    Ok(match e {
        ExpectedEvent::RequestReceived { client, id, port, client_port, message } => json!({
            "type": "request_received", "client": client.to_string(), "id": id, "port": port,
            "client_port": client_port, "message": hex::encode(message.bytes()?)}),
        ExpectedEvent::ResponseReceived { id, cookie, message } => json!({
            "type": "response_received", "id": id, "cookie": cookie,
            "message": hex::encode(message.bytes()?)}),
        ExpectedEvent::RpcFailed { id, cookie, reason } => json!({
            "type": "rpc_failed", "id": id, "cookie": cookie, "reason": reason}),
    })
}

fn check_events(ep: &mut Endpoint, want: &[ExpectedEvent]) -> Result<(), String> {
    let got: Vec<Value> = std::iter::from_fn(|| ep.poll_event()).map(|e| event_json(&e)).collect();
    let listing = || -> String {
        let lines: Vec<String> =
            got.iter().enumerate().map(|(i, e)| format!("\n  [{i}] {}", show(e))).collect();
        if lines.is_empty() { " (none)".to_string() } else { lines.concat() }
    };
    if got.len() != want.len() {
        return Err(format!("want {} events, got {}:{}", want.len(), got.len(), listing()));
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let w = expected_event_json(w)?;
        let mut diffs = Vec::new();
        subset_diff("", &w, g, &mut diffs);
        if g.as_object().map(Map::len) != w.as_object().map(Map::len) {
            diffs.push("different keys".into());
        }
        if !diffs.is_empty() {
            return Err(format!(
                "event {i} differs: {}; all events:{}",
                diffs.join("; "),
                listing()
            ));
        }
    }
    Ok(())
}

/// Records where `got` differs from the values `want` gives; objects in `want` are compared
/// key by key (keys `want` leaves out are not checked), everything else exactly.
fn subset_diff(path: &str, want: &Value, got: &Value, out: &mut Vec<String>) {
    match (want, got) {
        (Value::Object(w), Value::Object(g)) => {
            for (k, wv) in w {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                match g.get(k) {
                    Some(gv) => subset_diff(&p, wv, gv, out),
                    None => out.push(format!("`{p}`: want {}, got (absent)", show(wv))),
                }
            }
        }
        _ if want == got => {}
        (Value::String(w), Value::String(g)) if w.len().max(g.len()) > 80 => {
            // Long hex (payloads, messages): say where they part.
            let at = w.bytes().zip(g.bytes()).take_while(|(a, b)| a == b).count();
            out.push(format!(
                "`{path}`: hex differs from character {at} (want {} chars: ...{}..., got {} chars: ...{}...)",
                w.len(),
                window(w, at),
                g.len(),
                window(g, at)
            ));
        }
        _ => out.push(format!("`{path}`: want {}, got {}", show(want), show(got))),
    }
}

/// Up to 16 characters of `s` from `at`.
fn window(s: &str, at: usize) -> &str {
    let start = at.min(s.len());
    &s[start..(start + 16).min(s.len())]
}

/// A value for a message, long strings (payloads) shortened.
fn show(v: &Value) -> String {
    let s = v.to_string();
    if s.len() <= 80 {
        return s;
    }
    let cut: String = s.chars().take(60).collect();
    format!("{cut}... ({} chars)", s.len())
}

/// One line about a transmitted packet, for failure messages.
fn summary(to: SocketAddr, priority: u8, f: &Map<String, Value>) -> String {
    let get = |k: &str| f.get(k).map_or("?".to_string(), Value::to_string);
    let kind = f.get("type").and_then(Value::as_str).unwrap_or("?");
    let body = match kind {
        "DATA" => format!(
            "offset {} len {} msg {} incoming {} retransmit {} cutoff_version {} ack {}",
            get("effective_offset"),
            get("payload_len"),
            get("message_length"),
            get("incoming"),
            get("retransmit"),
            get("cutoff_version"),
            get("ack_client_id")
        ),
        "GRANT" => format!("offset {} priority {}", get("offset"), get("priority")),
        "RESEND" => {
            format!(
                "offset {} length {} priority {}",
                get("offset"),
                get("length"),
                get("priority")
            )
        }
        "CUTOFFS" => format!("{} version {}", get("unsched_cutoffs"), get("cutoff_version")),
        "ACK" => format!("acks {}", get("acks")),
        _ => String::new(),
    };
    format!(
        "{kind} {}->{} id {} {body} (to {to}, priority {priority})",
        get("sport"),
        get("dport"),
        get("sender_id")
    )
}

/// All counters of a `Metrics` snapshot as the file names them ([`Metrics::to_value`]).
pub fn metrics_json(m: &Metrics) -> Value {
    m.to_value().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_file_loads() {
        let file = load_scenarios().unwrap();
        assert!(file.cases().count() > 0);
    }

    #[test]
    fn rejects_other_kinds_and_versions() {
        let doc = |kind: &str, v: u32| {
            format!(
                r#"{{"schema_version": {v}, "kind": "{kind}", "description": "", "groups": []}}"#
            )
        };
        assert!(ScenarioFile::from_json(&doc("scenario", 1)).is_ok());
        assert!(matches!(ScenarioFile::from_json(&doc("wire", 1)), Err(LoadError::Format(_))));
        assert!(matches!(ScenarioFile::from_json(&doc("scenario", 2)), Err(LoadError::Format(_))));
    }

    #[test]
    fn messages_and_payloads_generate() {
        let m: Message = serde_json::from_str(r#"{"len": 3, "pattern": "mod251"}"#).unwrap();
        assert_eq!(m.bytes().unwrap(), [0, 1, 2]);
        let m: Message = serde_json::from_str(r#"{"len": 2, "fill": 7}"#).unwrap();
        assert_eq!(m.bytes().unwrap(), [7, 7]);
        let m: Message = serde_json::from_str(r#""00ff""#).unwrap();
        assert_eq!(m.bytes().unwrap(), [0, 255]);
        let both: Message =
            serde_json::from_str(r#"{"len": 1, "fill": 1, "pattern": "mod251"}"#).unwrap();
        assert!(both.bytes().is_err());
        let f =
            json!({"effective_offset": 250, "payload_len": 3, "payload": {"pattern": "mod251"}});
        let f = with_payload(f.as_object().unwrap()).unwrap();
        assert_eq!(f["payload"], "fa0001");
    }

    #[test]
    fn config_overrides_by_name() {
        let o = json!({"unsched_bytes": 5000, "max_overcommit": 2,
                       "unsched_cutoffs": [0, 0, 0, 0, 1000000, 3000, 1000, 200]});
        let c = config(o.as_object().unwrap()).unwrap();
        assert_eq!((c.unsched_bytes, c.max_overcommit, c.unsched_cutoffs[5]), (5000, 2, 3000));
        assert!(config(json!({"nope": 1}).as_object().unwrap()).is_err());
        assert!(config(json!({"max_overcommit": 256}).as_object().unwrap()).is_err());
    }

    #[test]
    fn steps_parse_and_fail_with_their_index() {
        let case: Scenario = serde_json::from_value(json!({
            "id": "x", "description": "d", "tags": [],
            "steps": [
                {"at": 0, "op": "bind", "port": 99},
                {"at": 0, "op": "bind", "port": 99, "expect_error": "port_in_use"},
                {"at": 5, "op": "expect_timeout", "deadline": null},
                {"at": 5, "op": "timeout"},
                {"at": 6, "op": "expect_transmits", "transmits": []},
                {"at": 6, "op": "bind", "port": 99}
            ]
        }))
        .unwrap();
        assert!(matches!(case.steps[2].action, Action::ExpectTimeout { deadline: Some(None), .. }));
        let failure = run_case(&case).unwrap_err();
        assert_eq!((failure.step, failure.op, failure.at), (Some(5), "bind", 6));
        assert!(failure.to_string().contains("port_in_use"), "{failure}");
    }
}

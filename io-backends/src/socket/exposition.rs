//! [`Metrics::to_prometheus`]: every counter and gauge, and the latency histograms, in
//! Prometheus' text exposition format.
//!
//! The fields are destructured without `..`: a counter added to `Metrics` (or to the
//! endpoint's or the transport's) does not compile until it is exported here too.

use std::fmt::{Display, Write};
use std::net::SocketAddr;

use homa_core::wire::PacketType;

use super::{Histogram, Metrics};
use crate::transport::TransportStats;

impl Metrics {
    /// The metrics in Prometheus' text exposition format (version 0.0.4): counters end in
    /// `_total`, units are in the names (`_bytes`, `_seconds`), the help text is what these
    /// fields' docs say. Every sample carries `labels` (e.g. `[("socket", "server")]`)
    /// besides its own (`type`, `reason`, ...); [`socket_labels`] checks and completes
    /// them. Label values are escaped as the format asks.
    pub fn to_prometheus(&self, labels: &[(&str, &str)]) -> String {
        let mut out = Exposition::new(labels);
        let Metrics {
            core,
            transport,
            dropped_by_allow_list,
            wakeups,
            busy_polls,
            busy_polls_paid,
            pending_calls,
            queued_requests,
            receive_errors,
            send_errors,
            loop_stalls,
            late_timers,
            bytes_in_place,
            lent_bytes,
            calls,
            served,
        } = self;
        core_families(&mut out, core);
        transport_families(&mut out, transport);
        let driver: [(&str, &str, u64); 9] = [
            (
                "dropped_by_allow_list",
                "Packets from addresses outside the allow-list.",
                *dropped_by_allow_list,
            ),
            ("wakeups", "Times the driver thread woke up to do work.", *wakeups),
            ("busy_polls", "Waits that polled the socket before sleeping.", *busy_polls),
            ("busy_polls_paid", "Busy polls that found what they waited for.", *busy_polls_paid),
            (
                "receive_errors",
                "Receive calls that failed (Homa's resends recover what they lost).",
                *receive_errors,
            ),
            ("send_errors", "Send calls that failed as a whole.", *send_errors),
            (
                "loop_stalls",
                "Times the event loop left input waiting and the driver thread received for it.",
                *loop_stalls,
            ),
            (
                "late_timers",
                "Timer runs resend_ticks - 1 ticks or more late: the host is short of CPU.",
                *late_timers,
            ),
            (
                "received_in_place_bytes",
                "Payload bytes the kernel received straight into their messages.",
                *bytes_in_place,
            ),
        ];
        for (name, help, v) in driver {
            out.counter(name, help, &[(None, v)]);
        }
        out.gauge("pending_calls", "Calls waiting for a response.", *pending_calls);
        out.gauge(
            "queued_requests",
            "Requests received and not yet taken by the application.",
            *queued_requests,
        );
        out.gauge(
            "lent_bytes",
            "Bytes of received messages the application holds; they count against max_rx_bytes.",
            *lent_bytes,
        );
        out.histogram(
            "call_duration_seconds",
            "Calls that got a response, from start to response.",
            calls,
        );
        out.histogram(
            "request_service_seconds",
            "Requests served, from their arrival to the reply.",
            served,
        );
        out.text
    }
}

fn core_families(out: &mut Exposition, m: &homa_core::Metrics) {
    let homa_core::Metrics {
        packets_in,
        accepted,
        drops,
        packets_in_by_type,
        bytes_in_by_type,
        packets_out_by_type,
        bytes_out_by_type,
        message_bytes_in,
        message_bytes_out,
        retransmitted_packets,
        client_timeouts,
        server_timeouts,
        restarts,
        granted_bytes,
        fifo_grants,
        control_overflow,
        requests_received,
        responses_received,
        peak_incoming,
        rpcs,
        active_grants,
        grantable,
        incoming,
        peers,
        rx_bytes,
        tx_bytes,
    } = m;
    let by_type = |counts: &[u64; 9]| {
        PacketType::ALL.map(|t| {
            (Some(("type", t.name().to_ascii_lowercase())), counts[usize::from(t.code() - 0x10)])
        })
    };
    out.counter("packets_handled", "Packets handed to the endpoint.", &[(None, *packets_in)]);
    out.counter("packets_accepted", "Packets processed (not dropped).", &[(None, *accepted)]);
    out.counter(
        "packets_received",
        "Valid packets received, by type.",
        &by_type(packets_in_by_type),
    );
    out.counter(
        "received_bytes",
        "Bytes of valid packets received (Homa header onward), by type.",
        &by_type(bytes_in_by_type),
    );
    out.counter("packets_sent", "Packets sent, by type.", &by_type(packets_out_by_type));
    out.counter(
        "sent_bytes",
        "Bytes of packets sent (Homa header onward), by type.",
        &by_type(bytes_out_by_type),
    );
    let reasons = drops.by_reason().map(|(r, n)| (Some(("reason", r.to_string())), n));
    out.counter("packets_dropped", "Packets dropped on arrival, by reason.", &reasons);
    out.counter(
        "message_received_bytes",
        "Message bytes delivered to the application (requests and responses).",
        &[(None, *message_bytes_in)],
    );
    out.counter(
        "message_sent_bytes",
        "Message bytes sent for the first time.",
        &[(None, *message_bytes_out)],
    );
    out.counter(
        "messages_received",
        "Messages delivered to the application, by kind.",
        &[
            (Some(("kind", "request".to_string())), *requests_received),
            (Some(("kind", "response".to_string())), *responses_received),
        ],
    );
    out.counter(
        "retransmitted_packets",
        "DATA packets sent again in answer to RESEND or RPC_UNKNOWN.",
        &[(None, *retransmitted_packets)],
    );
    out.counter(
        "rpc_timeouts",
        "RPCs abandoned for their peer's silence, by side.",
        &[
            (Some(("side", "client".to_string())), *client_timeouts),
            (Some(("side", "server".to_string())), *server_timeouts),
        ],
    );
    out.counter("restarts", "Client RPCs restarted after RPC_UNKNOWN.", &[(None, *restarts)]);
    out.counter(
        "granted_bytes",
        "Bytes granted by scheduled (SRPT) grants.",
        &[(None, *granted_bytes)],
    );
    out.counter("fifo_grants", "FIFO grants issued.", &[(None, *fifo_grants)]);
    out.counter(
        "control_overflow",
        "Control packets dropped because max_pending_control were already waiting.",
        &[(None, *control_overflow)],
    );
    out.gauge(
        "peak_incoming_bytes",
        "Highest total of granted-but-unreceived bytes seen.",
        *peak_incoming,
    );
    out.gauge("rpcs", "RPCs alive (client and server).", *rpcs);
    out.gauge("active_grants", "Incoming messages receiving grants now.", *active_grants);
    out.gauge(
        "grantable_messages",
        "Incoming messages needing grants (active or waiting).",
        *grantable,
    );
    out.gauge("incoming_bytes", "Granted-but-unreceived bytes now.", *incoming);
    out.gauge("peers", "Peers tracked.", *peers);
    out.gauge("reassembly_bytes", "Bytes reserved for messages being reassembled.", *rx_bytes);
    out.gauge("outgoing_bytes", "Bytes of outgoing messages held.", *tx_bytes);
}

fn transport_families(out: &mut Exposition, t: &TransportStats) {
    let TransportStats {
        tx_datagrams,
        tx_calls,
        tx_dropped,
        rx_datagrams,
        rx_calls,
        rx_dropped,
        rx_in_place,
        unreachable,
        rx_overflow,
    } = t;
    let counters: [(&str, &str, u64); 9] = [
        ("datagrams_sent", "Datagrams handed to the kernel.", *tx_datagrams),
        ("send_calls", "System calls (or ring submissions) that sent them.", *tx_calls),
        (
            "datagrams_refused",
            "Datagrams the kernel refused to send (Homa resends lost data).",
            *tx_dropped,
        ),
        ("datagrams_received", "Datagrams received.", *rx_datagrams),
        ("receive_calls", "System calls (or ring completions) that received them.", *rx_calls),
        ("datagrams_malformed", "Received datagrams dropped as malformed below Homa.", *rx_dropped),
        (
            "datagrams_received_in_place",
            "Datagrams received straight into their message.",
            *rx_in_place,
        ),
        ("unreachable", "Peers reported unreachable (ICMP errors, failed sends).", *unreachable),
        (
            "receive_buffer_overflows",
            "Datagrams the kernel dropped because the socket's receive buffer was full.",
            *rx_overflow,
        ),
    ];
    for (name, help, v) in counters {
        out.counter(name, help, &[(None, v)]);
    }
}

/// The text being written, and the labels every sample carries.
struct Exposition {
    text: String,
    /// `k="v",...` (escaped), without braces; empty for none.
    labels: String,
}

/// One extra label of a sample, if any.
type Label = Option<(&'static str, String)>;

impl Exposition {
    fn new(labels: &[(&str, &str)]) -> Exposition {
        let labels =
            labels.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect::<Vec<_>>();
        Exposition { text: String::new(), labels: labels.join(",") }
    }

    fn header(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.text, "# HELP homa_{name} {help}");
        let _ = writeln!(self.text, "# TYPE homa_{name} {kind}");
    }

    fn sample(&mut self, name: &str, label: Option<(&str, &str)>, value: impl Display) {
        let extra = label.map(|(k, v)| format!("{k}=\"{}\"", escape(v)));
        let all: Vec<&str> = [self.labels.as_str(), extra.as_deref().unwrap_or("")]
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect();
        let labels = if all.is_empty() { String::new() } else { format!("{{{}}}", all.join(",")) };
        let _ = writeln!(self.text, "homa_{name}{labels} {value}");
    }

    fn counter(&mut self, name: &str, help: &str, samples: &[(Label, u64)]) {
        let name = format!("{name}_total");
        self.header(&name, "counter", help);
        for (label, v) in samples {
            self.sample(&name, label.as_ref().map(|(k, v)| (*k, v.as_str())), v);
        }
    }

    fn gauge(&mut self, name: &str, help: &str, v: u64) {
        self.header(name, "gauge", help);
        self.sample(name, None, v);
    }

    fn histogram(&mut self, name: &str, help: &str, h: &Histogram) {
        self.header(name, "histogram", help);
        let mut cumulative = 0;
        let bucket = format!("{name}_bucket");
        for (le, n) in Histogram::bounds().zip(h.buckets()) {
            cumulative += n;
            // Display writes the shortest decimal that reads back: "0.000001778", "10".
            self.sample(&bucket, Some(("le", &format!("{le}"))), cumulative);
        }
        self.sample(&bucket, Some(("le", "+Inf")), h.count());
        self.sample(&format!("{name}_sum"), None, h.sum_seconds());
        self.sample(&format!("{name}_count"), None, h.count());
    }
}

/// Labels the samples carry themselves.
const OWN_LABELS: [&str; 5] = ["type", "reason", "kind", "side", "le"];

/// The labels of a socket's samples, for the bindings: `socket="<local>"` unless `labels`
/// name `socket` themselves, and `labels`. An error says which name may not label a
/// sample: one Prometheus does not allow (`[a-zA-Z_][a-zA-Z0-9_]*`, not `__...`), or one
/// the samples carry already.
pub fn socket_labels(
    local: SocketAddr,
    labels: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(String, String)>, String> {
    let mut all: Vec<(String, String)> = Vec::new();
    for (name, value) in labels {
        let mut chars = name.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with("__");
        if !valid {
            return Err(format!(
                "{name:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not __...)"
            ));
        }
        if OWN_LABELS.contains(&name.as_str()) {
            return Err(format!("{name:?} labels homa's own samples; choose another name"));
        }
        all.retain(|(n, _)| *n != name);
        all.push((name, value));
    }
    if !all.iter().any(|(n, _)| n == "socket") {
        all.insert(0, ("socket".into(), local.to_string()));
    }
    Ok(all)
}

/// A label value as the format writes it: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

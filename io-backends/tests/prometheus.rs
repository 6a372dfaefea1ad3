//! `Metrics::to_prometheus`: the exposition holds every family once, well formed, with
//! values that match known traffic; the latency histograms count the calls and requests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::{bind_server, echo, loopback_v4, pattern};
use homa_io::Socket;

/// Samples by their name and labels as written (`name{labels}`), and the families' types.
fn parse(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
    let (mut samples, mut types) = (BTreeMap::new(), BTreeMap::new());
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            assert!(types.insert(name.to_string(), kind.to_string()).is_none(), "{name} twice");
        } else if !line.starts_with('#') {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value = if value == "+Inf" { f64::INFINITY } else { value.parse().unwrap() };
            assert!(samples.insert(series.to_string(), value).is_none(), "{series} twice");
        }
    }
    (samples, types)
}

#[test]
fn the_exposition_counts_known_traffic() {
    let server = Arc::new(bind_server(Socket::builder(), loopback_v4()));
    let echoer = echo(&server);
    let client = Socket::client(loopback_v4()).unwrap();
    for i in 0..10 {
        let m = pattern(100 + i * 10_000, i as u8);
        assert!(client.call(server.local_addr(), m.clone(), None).unwrap() == m);
    }
    let text = client.metrics().to_prometheus(&[("socket", "client \"a\"")]);
    let (samples, types) = parse(&text);
    let get = |series: &str| samples[&series.replace("L", "socket=\"client \\\"a\\\"\"")];
    assert_eq!(get("homa_messages_received_total{L,kind=\"response\"}"), 10.0);
    assert_eq!(get("homa_call_duration_seconds_count{L}"), 10.0);
    assert_eq!(get("homa_call_duration_seconds_bucket{L,le=\"+Inf\"}"), 10.0);
    assert!(get("homa_call_duration_seconds_sum{L}") > 0.0);
    let sent: f64 = (0..10).map(|i| 100.0 + f64::from(i) * 10_000.0).sum();
    assert_eq!(get("homa_message_sent_bytes_total{L}"), sent);
    assert_eq!(get("homa_message_received_bytes_total{L}"), sent);
    assert!(get("homa_packets_sent_total{L,type=\"data\"}") >= 10.0);
    assert_eq!(get("homa_pending_calls{L}"), 0.0);
    // Buckets are cumulative and end at the count.
    let buckets: Vec<f64> = samples
        .iter()
        .filter(|(k, _)| k.starts_with("homa_call_duration_seconds_bucket"))
        .map(|(_, v)| *v)
        .collect();
    assert_eq!(buckets.len(), 30);
    assert!(text.contains(",le=\"0.0001\"} ") && text.contains(",le=\"0.000001778\"} "));
    // Every family is well named, typed, and has samples; counters end in _total.
    let families: BTreeSet<&str> = samples
        .keys()
        .map(|k| k.split('{').next().unwrap())
        .map(|n| n.trim_end_matches("_bucket").trim_end_matches("_sum").trim_end_matches("_count"))
        .collect();
    for (name, kind) in &types {
        assert!(
            name.starts_with("homa_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        );
        assert!(families.contains(name.as_str()), "{name} has no samples");
        assert_eq!(kind == "counter", name.ends_with("_total"), "{name} is a {kind}");
        assert!(text.contains(&format!("# HELP {name} ")), "{name} has no help");
    }
    assert_eq!(types.len(), 47, "families");

    // Labels: a socket label by default, or the caller's; none that clashes.
    let local = client.local_addr();
    let own = |l: &[(&str, &str)]| {
        homa_io::socket_labels(local, l.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    };
    let socket = ("socket".to_string(), local.to_string());
    assert_eq!(own(&[("job", "x")]).unwrap(), [socket, ("job".into(), "x".into())]);
    assert_eq!(own(&[("socket", "s")]).unwrap(), [("socket".to_string(), "s".to_string())]);
    for bad in ["le", "type", "bad-name", "__x", ""] {
        assert!(own(&[(bad, "x")]).is_err(), "{bad:?} accepted");
    }

    // The server's histogram of served requests.
    let served = server.metrics().served;
    assert_eq!(served.count(), 10);
    assert!(served.quantile(0.5).is_some());
    server.shutdown();
    echoer.join().unwrap();
}

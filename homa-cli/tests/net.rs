//! The networking commands as separate processes: `homa server` answering a client in this
//! test (through homa_io), `homa client` and `homa bench` runs checked through their JSON.
//! Loopback only; raw IP runs only as root (otherwise the reason is printed). Nothing here
//! waits a fixed time: the server's readiness line and process exits are the signals.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, ChildStdout, Command, Stdio};

use homa_io::{Config, Socket, TransportKind};
use serde_json::Value;

#[allow(dead_code)] // the shared helpers include some this file does not need
mod common;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A `homa server` child process, killed if the test ends early.
struct Server {
    child: Child,
    stdout: BufReader<ChildStdout>,
    addr: SocketAddr,
    transport: String,
}

impl Server {
    /// Starts `homa server --port 0 --addr ip ...` and waits for its readiness line.
    fn start(ip: IpAddr, extra: &[&str]) -> Server {
        let ip = ip.to_string();
        let mut args = vec!["server", "--port", "0", "--addr", &ip];
        args.extend_from_slice(extra);
        let mut child = Command::new(env!("CARGO_BIN_EXE_homa"))
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("homa server starts");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reading the server's stdout");
        if line.is_empty() {
            let mut err = String::new();
            child.stderr.take().expect("piped").read_to_string(&mut err).ok();
            panic!("homa server exited before it was ready: {err}");
        }
        // "listening on 127.0.0.1:12345 transport udp"
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words[..2], ["listening", "on"], "readiness line: {line}");
        let addr = words[2].parse().unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(words[3], "transport", "readiness line: {line}");
        Server { child, stdout, addr, transport: words[4].to_string() }
    }

    /// Sends SIGTERM, waits for the exit, and returns the rest of stdout (the summary).
    fn terminate(mut self) -> String {
        // SAFETY: kill with a live child's pid.
        let rc = unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        assert_eq!(rc, 0, "SIGTERM delivered");
        let status = self.child.wait().expect("the server exits");
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).expect("reading the summary");
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).ok();
        }
        assert!(status.success(), "homa server failed ({status}): {err}\n{rest}");
        rest
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A pattern that differs from byte to byte and between calls.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Echo RPCs of several sizes from this process to a `homa server` process, then a
/// graceful stop on SIGTERM that reports what was served.
fn echo_then_sigterm(kind: TransportKind, server_ip: IpAddr, client_ip: IpAddr) {
    let server = Server::start(server_ip, &["--transport", kind.name()]);
    assert_eq!(server.transport, kind.name());
    // Debug builds on busy machines can stall for a while; allow it (correctness test).
    let config = Config { timeout_ticks: 2000, ..Config::default() };
    let client = Socket::builder().transport(kind).config(config).client(client_ip).unwrap();
    let sizes = [1, 100, 1_500, 100_000, 1_000_000];
    for (i, size) in sizes.into_iter().enumerate() {
        let message = pattern(size, i as u8);
        let response = client
            .call(server.addr, message.clone(), None)
            .unwrap_or_else(|e| panic!("{kind}: {size}-byte call: {e}"));
        assert!(response == message, "{kind}: the {size}-byte echo differs");
    }
    client.shutdown();
    let summary = server.terminate();
    assert!(summary.contains("stopped by SIGTERM"), "summary: {summary}");
    assert!(summary.contains(&format!("{} requests answered", sizes.len())), "summary: {summary}");
}

#[test]
fn the_server_process_echoes_over_udp_and_stops_on_sigterm() {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    echo_then_sigterm(TransportKind::Udp, ip, ip);
}

#[test]
fn the_server_process_echoes_over_raw_ip_and_stops_on_sigterm() {
    if !is_root() {
        eprintln!("skipped: raw IP needs CAP_NET_RAW (run as root)");
        return;
    }
    // Addresses of their own: a raw socket sees every Homa packet for its address.
    let server = IpAddr::V4(Ipv4Addr::new(127, 146, 77, 1));
    let client = IpAddr::V4(Ipv4Addr::new(127, 146, 77, 2));
    echo_then_sigterm(TransportKind::Ip, server, client);
}

/// `homa server --metrics` serves Prometheus' text format at /metrics (404 elsewhere),
/// with counters and the served-request histogram matching the calls made.
#[test]
fn the_server_serves_its_metrics_to_prometheus() {
    let ip = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let mut server = Server::start(ip, &["--metrics", "127.0.0.1:0"]);
    let mut line = String::new();
    server.stdout.read_line(&mut line).unwrap();
    // "metrics on http://127.0.0.1:PORT/metrics"
    let at =
        line.trim().strip_prefix("metrics on http://").and_then(|r| r.strip_suffix("/metrics"));
    let at: SocketAddr = at.unwrap_or_else(|| panic!("metrics line: {line}")).parse().unwrap();
    let client = Socket::client(ip).unwrap();
    for i in 0..5u8 {
        let m = pattern(1000 * usize::from(i) + 1, i);
        assert!(client.call(server.addr, m.clone(), None).unwrap() == m);
    }
    let get = |path: &str| {
        let mut conn = std::net::TcpStream::connect(at).unwrap();
        write!(conn, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut reply = String::new();
        conn.read_to_string(&mut reply).unwrap();
        reply
    };
    let reply = get("/metrics");
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.contains("Content-Type: text/plain; version=0.0.4"), "{reply}");
    let label = format!("socket=\"{}\"", server.addr);
    for sample in [
        format!("homa_messages_received_total{{{label},kind=\"request\"}} 5\n"),
        format!("homa_request_service_seconds_count{{{label}}} 5\n"),
        format!("homa_request_service_seconds_bucket{{{label},le=\"+Inf\"}} 5\n"),
    ] {
        assert!(reply.contains(&sample), "{sample} not in {reply}");
    }
    assert!(get("/").starts_with("HTTP/1.1 404 Not Found\r\n"));
    client.shutdown();
    server.terminate();
}

fn run_json(args: &[&str], json_path: &std::path::Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_homa")).args(args).output().expect("homa runs");
    assert!(
        out.status.success(),
        "homa {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let text = std::fs::read_to_string(json_path).expect("the JSON file was written");
    serde_json::from_str(&text).expect("valid JSON")
}

#[test]
fn the_client_loads_a_server_and_reports_json() {
    let server = Server::start(IpAddr::V4(Ipv4Addr::LOCALHOST), &[]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.json");
    let (addr, p) = (server.addr.to_string(), path.to_str().unwrap().to_string());
    let report = run_json(
        &[
            "client",
            "--server",
            &addr,
            "--workload",
            "w3",
            "--rate",
            "200",
            "--duration",
            "1",
            "--seed",
            "7",
            "--json",
            &p,
            "--quiet",
        ],
        &path,
    );
    for field in
        ["server", "transport", "workload", "requests", "throughput", "errors", "latency", "bins"]
    {
        assert!(report.get(field).is_some(), "no {field} in {report}");
    }
    assert_eq!(report["transport"], "udp");
    assert_eq!(report["max_message_bytes"], 1_000_000);
    let requests = &report["requests"];
    let started = requests["started"].as_u64().unwrap();
    assert!(started > 0, "{requests}");
    assert_eq!(requests["completed"].as_u64().unwrap(), started, "{report}");
    assert_eq!(requests["failed"], 0, "{report}");
    let calls = &report["metrics"]["calls"];
    assert_eq!(calls["count"].as_u64(), Some(started), "the socket's latency histogram");
    let buckets = calls["buckets"].as_array().unwrap();
    assert_eq!(buckets.iter().map(|b| b.as_u64().unwrap()).sum::<u64>(), started);
    assert_eq!(report["errors"].as_object().unwrap().len(), 0, "{report}");
    assert!(report["latency"]["p50_us"].as_f64().unwrap() > 0.0);
    let bins = report["bins"].as_array().unwrap();
    assert!(!bins.is_empty());
    let counted: u64 = bins.iter().map(|b| b["count"].as_u64().unwrap()).sum();
    assert_eq!(counted, started, "every completed call is in a size bin");
    for key in ["min_bytes", "max_bytes", "p50_us", "p99_us", "p999_us"] {
        assert!(bins[0].get(key).is_some(), "no {key} in {}", bins[0]);
    }
    let summary = server.terminate();
    assert!(summary.contains(&format!("{started} requests answered")), "summary: {summary}");
}

#[test]
fn bench_rtt_reports_every_transport_or_why_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rtt.json");
    let p = path.to_str().unwrap();
    let report =
        run_json(&["bench", "rtt", "--count", "200", "--round", "100", "--json", p], &path);
    let contenders = report["contenders"].as_array().unwrap();
    let names: Vec<&str> = contenders.iter().map(|c| c["name"].as_str().unwrap()).collect();
    let all = ["homa/udp", "homa/uring", "homa/ip", "homa/uring-ip", "udp", "uring", "tcp"];
    assert_eq!(names, all);
    for c in contenders {
        match c["status"].as_str().unwrap() {
            "ok" => {
                assert_eq!(c["count"], 200, "{c}");
                for key in [
                    "p50_us",
                    "p99_us",
                    "p999_us",
                    "rpcs_per_s",
                    "cpu_us_per_rpc",
                    "p50_vs_udp",
                    "p50_vs_tcp",
                ] {
                    // udp and tcp always run, so the ratios are numbers too.
                    assert!(c[key].as_f64().is_some_and(|v| v > 0.0), "no {key} in {c}");
                }
            }
            "skipped" => assert!(c["reason"].as_str().is_some_and(|r| !r.is_empty()), "{c}"),
            other => panic!("{} {other}: {c}", c["name"]),
        }
    }
    for always in ["homa/udp", "udp", "tcp"] {
        let c = contenders.iter().find(|c| c["name"] == always).unwrap();
        assert_eq!(c["status"], "ok", "{c}");
    }
    if is_root() {
        let ip = contenders.iter().find(|c| c["name"] == "homa/ip").unwrap();
        assert_eq!(ip["status"], "ok", "{ip}");
    }
    assert!(report["targets"]["homa_udp_p50_vs_udp"].as_f64().is_some(), "{report}");
    let uring = contenders.iter().find(|c| c["name"] == "homa/uring").unwrap();
    if uring["transport_used"] == "uring" {
        let ratio = &report["targets"]["homa_uring_p50_vs_homa_udp"];
        assert!(ratio.as_f64().is_some(), "{report}");
    }
}

#[test]
fn bench_throughput_reports_homa_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tput.json");
    let p = path.to_str().unwrap();
    let args = [
        "bench",
        "throughput",
        "--size",
        "200000",
        "--in-flight",
        "1,2",
        "--mtu",
        "1500",
        "--seconds",
        "0.05",
        "--rounds",
        "1",
        "--max-incoming",
        "1000000",
        "--json",
        p,
    ];
    let report = run_json(&args, &path);
    assert_eq!(report["max_incoming"], 1_000_000, "{report}");
    let results = report["results"].as_array().unwrap();
    for contender in ["homa/udp mtu 1500", "tcp"] {
        for level in [1, 2] {
            let r = results
                .iter()
                .find(|r| r["contender"] == contender && r["in_flight"] == level)
                .unwrap_or_else(|| panic!("no {contender} at {level} in flight: {report}"));
            assert!(r["messages"].as_u64().unwrap() > 0, "{r}");
            assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["cpu_s_per_gb"].as_f64().is_some(), "{r}");
        }
    }
}

/// `--netns` gives each MTU a veth pair between two namespaces, runs Homa and TCP across
/// it, compares each with TCP on the same link, and removes the namespaces.
#[test]
fn bench_throughput_across_veth_pairs() {
    if !is_root() {
        eprintln!("skipped: not root (network namespaces)");
        return;
    }
    let ours = || {
        let out = Command::new("ip").args(["netns", "list"]).output().expect("ip runs");
        let list = String::from_utf8_lossy(&out.stdout).into_owned();
        list.lines().filter(|l| l.starts_with("hb")).map(str::to_owned).collect::<Vec<_>>()
    };
    let before = ours();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tput.json");
    let args = [
        "bench",
        "throughput",
        "--netns",
        "--mtu",
        "1500,9000",
        "--size",
        "200000",
        "--in-flight",
        "2",
        "--seconds",
        "0.05",
        "--rounds",
        "1",
        "--json",
        path.to_str().unwrap(),
    ];
    let report = run_json(&args, &path);
    assert_eq!(ours(), before, "the namespaces are removed");
    let results = report["results"].as_array().unwrap();
    for mtu in [1500, 9000] {
        for contender in [format!("homa/udp mtu {mtu}"), format!("tcp mtu {mtu}")] {
            let r = results
                .iter()
                .find(|r| r["contender"] == contender.as_str())
                .unwrap_or_else(|| panic!("no {contender}: {report}"));
            assert_eq!(r["veth_mtu"], mtu, "{r}");
            assert!(r["messages"].as_u64().unwrap() > 0, "{r}");
            assert!(r["vs_tcp"].as_f64().is_some(), "compared with TCP on its link: {r}");
            assert!(r["cpu_per_gb_vs_tcp"].as_f64().is_some(), "{r}");
        }
    }
}

/// The short soak: 20 s of W4 with 200 calls in flight under 1 % loss between two network
/// namespaces; every call completes, heap, resident memory, descriptors and threads stay
/// steady after the warm-up. (`sudo homa soak` runs it for 30 minutes with 1,000 in flight.)
#[test]
fn a_short_soak_loses_no_call_and_grows_nothing() {
    if !is_root() {
        eprintln!("skipped: homa soak makes network namespaces (run as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("soak.json");
    let p = path.to_str().unwrap();
    // In 20 s the swings with the sizes in flight are not averaged out as in 30 minutes: a
    // large message that lost a packet waits out its RESEND timeout while the others come
    // and go, so for seconds the heap holds more large messages. Eleven runs of this debug
    // build measured -8.1 to +12.1 % for the heap and -1.2 to +17.4 % for resident memory
    // (about 4,300 calls a second, 215-315 MB of heap), so 30 % is allowed: a leak of
    // 2.5 KB a call exceeds it.
    let args = [
        "soak",
        "--duration",
        "20",
        "--warmup",
        "6",
        "--sample",
        "1",
        "--in-flight",
        "200",
        "--max-growth",
        "30",
    ];
    let report = run_json(&[&args[..], &["--json", p]].concat(), &path);
    assert_eq!(report["passed"], true, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["unfinished"], 0, "{report}");
    assert!(report["completed"].as_u64().unwrap() > 1000, "{report}");
    assert!(report["loss_drops"].as_u64().unwrap() > 0, "no loss: {report}");
    assert!(report["samples"].as_array().unwrap().len() >= 15, "{report}");
    assert!(report["rss_growth"].as_f64().is_some_and(|g| g <= 0.15), "{report}");
}

/// The short hostile run: each attack for 2 s between network namespaces; no call of the
/// well-behaved client fails and the server's memory stays within its bound. (Its latency is
/// reported, not judged here: a debug build on a shared machine; `sudo homa hostile` judges
/// it.)
#[test]
fn hostile_peers_fail_no_call_and_stay_bounded() {
    if !is_root() {
        eprintln!("skipped: homa hostile makes network namespaces (run as root)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hostile.json");
    let p = path.to_str().unwrap();
    let args = ["hostile", "--seconds", "2", "--max-slowdown", "1000", "--json", p];
    let report = run_json(&args, &path);
    assert_eq!(report["passed"], true, "{report}");
    let phases = report["phases"].as_array().unwrap();
    assert_eq!(phases.len(), 5, "{report}");
    for phase in phases {
        assert_eq!(phase["failed"], 0, "{phase}");
        assert!(phase["calls"].as_u64().unwrap() > 10, "{phase}");
        let held = phase["held_bytes"].as_u64().unwrap();
        assert!(held <= report["bound_bytes"].as_u64().unwrap(), "{phase}");
    }
    for phase in &phases[1..] {
        assert!(phase["attacker_packets"].as_u64().unwrap() > 1000, "{phase}");
    }
}

/// Out-of-range arguments are input errors (exit 2). Review finding: time arguments too long
/// to add to a clock panicked (exit 101).
#[test]
fn out_of_range_arguments_are_input_errors() {
    for (args, says) in [
        (&["client", "--server", "127.0.0.1:9", "--duration", "1e20"][..], "--duration"),
        (&["client", "--server", "127.0.0.1:9", "--drain", "1e15"][..], "--drain"),
        (&["bench", "throughput", "--seconds", "1e20"][..], "--seconds"),
        (&["bench", "throughput", "--max-incoming", "4294967296"][..], "--max-incoming"),
    ] {
        let run = common::homa(args, "");
        assert_eq!(run.code, 2, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains(says), "{args:?}: {}", run.stderr);
    }
}

/// A run in which calls fail exits 1 (a runtime failure), after its report.
#[test]
fn the_client_exits_1_when_calls_fail() {
    // A port nobody listens on: each call fails at once (ICMP port unreachable).
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_homa"))
        .args(["client", "--server", &dead.to_string(), "--requests", "5", "--quiet"])
        .output()
        .expect("homa runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("5 of 5 calls failed"), "stderr: {stderr}");
}

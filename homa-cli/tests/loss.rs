//! Homa under loss, a stopped process and a starved CPU, on real sockets: two network
//! namespaces (created here, always removed) joined by a veth pair, random loss on both sides
//! from nftables (whose counters give the drops), `homa server` in one namespace and
//! `homa client` in the other. Every RPC must complete exactly once with its bytes intact,
//! the DATA packets each side retransmits may be at most twice the packets dropped on their
//! way (by the sender's full socket buffer, on the wire, or by the receiver's; through
//! io_uring plus 2 % of the DATA sent, see below), and both sides must end with no RPC and
//! no message memory left.
//!
//! Needs root (namespaces, raw IP), nftables and an optimised build (`--profile lab`);
//! skipped, saying why, otherwise. The veths segment UDP GSO batches before sending
//! (`gso_max_segs 1`), so that a drop loses one packet, as a switch's would, not a batch.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// One lab at a time: the runs measure, and share the machine's two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn sh(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program).args(args).output().map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)))
    }
}

/// Why this machine cannot run these tests, if it cannot.
fn unavailable() -> Option<String> {
    if cfg!(debug_assertions) {
        return Some(
            "a debug build, ten times slower than what users run: its own slowness would \
             decide the timings (run `cargo test --profile lab -p homa-cli --test loss`, as \
             scripts/test does)"
                .into(),
        );
    }
    if !is_root() {
        return Some("not root (network namespaces, raw IP)".into());
    }
    if sh("nft", &["--version"]).is_err() {
        return Some("nft (nftables) is not installed".into());
    }
    None
}

/// Two namespaces, `client` and `server`, joined by a veth pair; deleted on drop.
struct Lab {
    client: String,
    server: String,
    client_ip: String,
    server_ip: String,
}

impl Lab {
    fn new(tag: u8) -> Lab {
        let id = format!("hl{}{tag}", std::process::id());
        let lab = Lab {
            client: format!("{id}c"),
            server: format!("{id}s"),
            client_ip: format!("198.18.{}.1", 100 + tag),
            server_ip: format!("198.18.{}.2", 100 + tag),
        };
        let (vc, vs) = (format!("{id}vc"), format!("{id}vs"));
        for ns in [&lab.client, &lab.server] {
            sh("ip", &["netns", "add", ns]).unwrap();
        }
        sh(
            "ip",
            &[
                "link",
                "add",
                &vc,
                "netns",
                &lab.client,
                "type",
                "veth",
                "peer",
                "name",
                &vs,
                "netns",
                &lab.server,
            ],
        )
        .unwrap();
        for (ns, dev, addr) in
            [(&lab.client, &vc, &lab.client_ip), (&lab.server, &vs, &lab.server_ip)]
        {
            sh("ip", &["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev]).unwrap();
            sh("ip", &["-n", ns, "link", "set", dev, "up", "gso_max_segs", "1"]).unwrap();
            sh("ip", &["-n", ns, "link", "set", "lo", "up"]).unwrap();
        }
        // Until the kernel marks the veths up their queues drop every frame: wait for the
        // state, not for a time.
        for (ns, dev) in [(&lab.client, &vc), (&lab.server, &vs)] {
            let start = std::time::Instant::now();
            while !sh("ip", &["-n", ns, "-o", "link", "show", dev]).unwrap().contains("state UP") {
                assert!(start.elapsed().as_secs() < 20, "{dev} never came up");
                std::thread::yield_now();
            }
        }
        lab
    }

    /// Drops `percent` % of the Homa packets (UDP or IP protocol 146) arriving in each
    /// namespace, with fresh counters.
    fn set_loss(&self, percent: u32) {
        for ns in [&self.client, &self.server] {
            let _ = sh("ip", &["netns", "exec", ns, "nft", "delete", "table", "inet", "homaloss"]);
            let rules = format!(
                "table inet homaloss {{\n  chain pre {{\n    type filter hook prerouting priority -300; policy accept;\n    ip protocol {{ 146, udp }} numgen random mod 100 < {percent} counter drop\n  }}\n}}\n"
            );
            let mut nft = Command::new("ip")
                .args(["netns", "exec", ns, "nft", "-f", "-"])
                .stdin(Stdio::piped())
                .spawn()
                .unwrap();
            nft.stdin.take().unwrap().write_all(rules.as_bytes()).unwrap();
            assert!(nft.wait().unwrap().success(), "nft refused {rules}");
        }
    }

    /// Packets dropped on their way into namespace `ns` since `set_loss`.
    fn drops(&self, ns: &str) -> u64 {
        let out =
            sh("ip", &["netns", "exec", ns, "nft", "list", "table", "inet", "homaloss"]).unwrap();
        let words: Vec<&str> = out.split_whitespace().collect();
        let at = words.iter().position(|w| *w == "packets").expect("a counter");
        words[at + 1].parse().unwrap()
    }

    fn homa(&self, ns: &str, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_homa")]).args(args);
        c
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for ns in [&self.client, &self.server] {
            if let Err(e) = sh("ip", &["netns", "del", ns]) {
                eprintln!("cleanup: {e}");
            }
        }
    }
}

/// A `homa server` process in the lab, with its final report in a JSON file.
struct Server {
    child: Child,
    json: tempfile::NamedTempFile,
    addr: String,
}

impl Server {
    fn start(lab: &Lab, transport: &str) -> Server {
        let json = tempfile::NamedTempFile::new().unwrap();
        let mut child = lab
            .homa(&lab.server, &["server", "--port", "4000", "--addr", &lab.server_ip])
            .args(["--transport", transport, "--json", json.path().to_str().unwrap()])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        assert!(line.starts_with("listening on"), "homa server: {line:?}");
        Server { child, json, addr: format!("{}:4000", lab.server_ip) }
    }

    /// Stops it with SIGTERM (it first waits for its RPCs to be acknowledged) and returns
    /// its report.
    fn stop(mut self) -> Value {
        // SAFETY: kill with a live child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) }, 0);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "homa server exited with {status}");
        read_json(self.json.path())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_json(path: &Path) -> Value {
    let mut text = String::new();
    std::fs::File::open(path).unwrap().read_to_string(&mut text).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// `homa client` arguments for `requests` W4 RPCs (capped at 1,000,000 bytes), started as
/// fast as they can be with up to 1,000 in flight, every response checked against its
/// request.
fn client_args<'a>(server: &'a str, transport: &'a str, requests: &'a str) -> Vec<&'a str> {
    vec![
        "client",
        "--server",
        server,
        "--transport",
        transport,
        "--workload",
        "w4",
        "--concurrency",
        "1000",
        "--requests",
        requests,
        "--verify",
        "--drain",
        "120",
        "--json",
        "-",
        "--quiet",
    ]
}

fn client_report(out: std::process::Output) -> Value {
    // The report (stdout) says which calls failed and why.
    let (stderr, report) =
        (String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    let status = out.status;
    assert!(status.success(), "homa client failed ({status}): {stderr}\nits report: {report}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", out.stdout))
}

fn n(v: &Value, path: &[&str]) -> u64 {
    let mut at = v;
    for key in path {
        at = &at[key];
    }
    at.as_u64().unwrap_or_else(|| panic!("no {path:?} in {v}"))
}

/// What one run shows, checked: every RPC answered once and intact, and both sides idle.
struct Checked {
    client_retransmitted: u64,
    server_retransmitted: u64,
}

fn check(what: &str, client: &Value, server: &Value, requests: u64, exactly_once: bool) -> Checked {
    let r = &client["requests"];
    assert_eq!(n(r, &["started"]), requests, "{what}: {r}");
    assert_eq!(n(r, &["completed"]), requests, "{what}: every RPC completes; {client}");
    assert_eq!(n(r, &["failed"]) + n(r, &["unfinished"]), 0, "{what}: {client}");
    assert_eq!(n(r, &["corrupted"]), 0, "{what}: responses differ from requests");
    let answered = n(server, &["requests_answered"]);
    if exactly_once {
        assert_eq!(answered, requests, "{what}: each request served once");
    } else {
        // A server that gave up on a stalled client's RPC serves its restart again.
        assert!(answered >= requests, "{what}: {answered} answered");
    }
    for (side, core) in
        [("client", &client["metrics"]["core"]), ("server", &server["metrics"]["core"])]
    {
        for gauge in ["rpcs", "rx_bytes", "tx_bytes"] {
            assert_eq!(n(core, &[gauge]), 0, "{what}: the {side} ends with {gauge} left");
        }
    }
    Checked {
        client_retransmitted: n(client, &["metrics", "core", "retransmitted_packets"]),
        server_retransmitted: n(server, &["metrics", "core", "retransmitted_packets"]),
    }
}

#[test]
fn under_loss_every_rpc_completes_and_retransmissions_match_the_drops() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(1);
    let requests = 1000;
    let mut table = vec![];
    for transport in ["udp", "ip", "uring", "uring-ip"] {
        for loss in [0, 1, 5, 20] {
            lab.set_loss(loss);
            let server = Server::start(&lab, transport);
            let req = requests.to_string();
            let out = lab
                .homa(&lab.client, &client_args(&server.addr, transport, &req))
                .output()
                .unwrap();
            let client = client_report(out);
            let server = server.stop();
            let what = format!("{transport} at {loss} % loss");
            let c = check(&what, &client, &server, requests, true);
            // Dropped by the sender's full socket buffer, on the wire, or by the receiver's.
            let t = |v: &Value, what: &str| n(v, &["metrics", "transport", what]);
            let to_server =
                t(&client, "tx_dropped") + lab.drops(&lab.server) + t(&server, "rx_overflow");
            let to_client =
                t(&server, "tx_dropped") + lab.drops(&lab.client) + t(&client, "rx_overflow");

            table.push(format!(
                "{transport:>8} {loss:>3} %: client resent {} for {to_server} dropped, server {} for {to_client}",
                c.client_retransmitted, c.server_retransmitted
            ));
            // No allowance for DATA resent while still on its way: a receiver does not ask
            // for bytes its downlink is still carrying (homa-core's `downlink`).
            let (client_max, server_max) = (2 * to_server, 2 * to_client);
            if c.client_retransmitted > client_max || c.server_retransmitted > server_max {
                eprintln!("{what}:\nclient {}\nserver {}", client["endpoint"], server["metrics"]);
            }
            assert!(
                c.client_retransmitted <= client_max && c.server_retransmitted <= server_max,
                "{what}: retransmitted DATA (client {}, server {}) exceed twice the drops \
                 (toward the server {to_server}, the client {to_client})",
                c.client_retransmitted,
                c.server_retransmitted
            );
        }
    }
    eprintln!("{}", table.join("\n"));
}

#[test]
fn a_client_stopped_for_a_second_loses_no_rpc() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let lab = Lab::new(2);
    // Loss both ways: the resumed client's RESENDs and restarts are lost too.
    lab.set_loss(5);
    for transport in ["udp", "ip"] {
        let server = Server::start(&lab, transport);
        // 3,000 RPCs at 1,000 a second: the stop lands while hundreds are in flight.
        let mut args = client_args(&server.addr, transport, "3000");
        args.extend(["--rate", "1000", "--duration", "10"]);
        let mut client = lab.homa(&lab.client, &args);
        let child = client.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let pid = child.id() as i32;
        // Any moment mid-run will do; the run lasts three seconds.
        std::thread::sleep(std::time::Duration::from_millis(1200));
        // SAFETY: kill with a live child's pid (`ip netns exec` execs homa in place).
        assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
        std::thread::sleep(std::time::Duration::from_secs(1));
        // SAFETY: as above.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
        let out = child.wait_with_output().unwrap();
        let server = server.stop();
        if !out.status.success() {
            eprintln!("the server's side of the failed run: {}", server["metrics"]);
        }
        let client = client_report(out);
        check(&format!("{transport}, stopped for 1 s"), &client, &server, 3000, false);
        assert_eq!(n(&client, &["metrics", "core", "client_timeouts"]), 0);
    }
}

/// A CPU controller to cap processes with: cgroup v2's `cpu.max`, or v1's CFS quota.
struct CpuCap {
    dir: std::path::PathBuf,
}

impl CpuCap {
    /// A cgroup allowed `percent` % of one CPU, or why there is none.
    fn new(percent: u32, tag: &str) -> Result<CpuCap, String> {
        let name = format!("homa-loss-{}-{tag}", std::process::id());
        let quota = 100_000 * percent / 100;
        let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers");
        if std::fs::read_to_string(v2).is_ok_and(|c| c.split_whitespace().any(|c| c == "cpu")) {
            let dir = Path::new("/sys/fs/cgroup").join(name);
            std::fs::create_dir(&dir).map_err(|e| format!("cgroup v2: {e}"))?;
            std::fs::write(dir.join("cpu.max"), format!("{quota} 100000"))
                .map_err(|e| e.to_string())?;
            return Ok(CpuCap { dir });
        }
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").exists() {
            let dir = v1.join(name);
            std::fs::create_dir(&dir).map_err(|e| format!("cgroup v1: {e}"))?;
            std::fs::write(dir.join("cpu.cfs_period_us"), "100000").map_err(|e| e.to_string())?;
            std::fs::write(dir.join("cpu.cfs_quota_us"), quota.to_string())
                .map_err(|e| e.to_string())?;
            return Ok(CpuCap { dir });
        }
        Err("no cgroup CPU controller (v2 cpu.max or v1 cpu.cfs_quota_us)".into())
    }

    fn add(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cleanup: {}: {e}", self.dir.display());
        }
    }
}

#[test]
fn a_starved_client_and_server_lose_no_rpc_under_loss() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Each side capped on its own, as two busy hosts would be.
    let caps = CpuCap::new(10, "server").and_then(|s| Ok((s, CpuCap::new(10, "client")?)));
    let (server_cap, client_cap) = match caps {
        Ok(caps) => caps,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let lab = Lab::new(3);
    lab.set_loss(5);
    let transport = "udp";
    let server = Server::start(&lab, transport);
    server_cap.add(server.child.id());
    let requests = 300;
    let req = requests.to_string();
    let child = lab
        .homa(&lab.client, &client_args(&server.addr, transport, &req))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    client_cap.add(child.id());
    let client = client_report(child.wait_with_output().unwrap());
    let server = server.stop();
    check("udp at 10 % of a CPU and 5 % loss", &client, &server, requests, false);
    assert_eq!(n(&client, &["metrics", "core", "client_timeouts"]), 0);
}

//! `homa incast` in small: three clients, half a second per workload, every contender.
//! Functional facts only, no timings: the namespaces are created and removed (also on
//! Ctrl-C), every request of every contender is answered, and the bottleneck's priority
//! classes see the packets each contender should put there.
//!
//! Needs root and an optimised build (`--profile lab`, as scripts/test runs it); skipped,
//! saying why, otherwise.

use std::process::{Command, Stdio};

use serde_json::Value;

fn unavailable() -> Option<&'static str> {
    if cfg!(debug_assertions) {
        return Some("a debug build (run `cargo test --profile lab -p homa-cli --test incast`)");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces, qdiscs, raw IP)");
    }
    None
}

fn namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().expect("ip runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The namespaces a run of this process's children would create start with this.
fn prefix(pid: u32) -> String {
    format!("hi{}", pid % 100_000)
}

#[test]
fn every_contender_answers_every_request_through_the_priority_classes() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (json, plot) = (dir.path().join("incast.json"), dir.path().join("incast.svg"));
    let out = Command::new(env!("CARGO_BIN_EXE_homa"))
        .args(["incast", "--clients", "3", "--duration", "0.5", "-q", "--json"])
        .arg(&json)
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("targets:") && text.contains("loss recovery"), "{text}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("homa/udp") && svg.contains("tcp-top"));
    let created: Vec<&str> =
        report["namespaces"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(created.len(), 1 + 2 + 3, "bridge, server, probe, 3 clients: {created:?}");
    let left = namespaces();
    assert!(created.iter().all(|n| !left.contains(n)), "left behind: {left}");

    let contenders = report["contenders"].as_array().unwrap();
    let names: Vec<&str> = contenders.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["homa/ip", "homa/udp", "tcp", "tcp-pool", "tcp-top"]);
    for c in contenders {
        let name = c["name"].as_str().unwrap();
        let runs = c["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 4, "{name}: mixed at 50 % and 80 %, burst, barrier");
        for r in runs {
            let requests = &r["requests"];
            assert!(requests["finished"].as_u64().unwrap() > 0, "{name}: {r}");
            assert_eq!(requests["failed"], 0, "{name}: {r}");
            assert_eq!(requests["unfinished"], 0, "{name}: {r}");
            assert_eq!(r["unanswered"], serde_json::json!([]), "{name}: {r}");
            if name.starts_with("homa") {
                assert!(r["busy_received"].is_u64(), "{name}: {r}");
            }
        }
        assert!(c["probe"]["count"].as_u64().unwrap() > 0, "{name}");
        assert!(c["closed_probe"]["count"].as_u64().unwrap() > 0, "{name}");
        assert!(c["barrier"]["count"].as_u64().unwrap() > 0, "{name}");
        let per_class: Vec<u64> = c["per_class_packets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .collect();
        let (low, top) = (per_class[..4].iter().sum::<u64>(), per_class[7]);
        match name {
            // Short requests and control packets in the top class, granted bytes in the
            // scheduled ones (0..=3).
            // None of them longer than a short message's (nftables counts them too).
            "homa/ip" | "homa/udp" => {
                assert!(top > 0 && low > 0, "{name}: {per_class:?}");
                assert_eq!(c["top_class_long_packets"], 0, "{name}");
                for r in runs {
                    assert_eq!(r["top_class_packets_counted"], r["per_class_packets"][7], "{r}");
                }
            }
            // Everything in the default class...
            "tcp" | "tcp-pool" => {
                assert!(
                    per_class[0] > 0 && per_class[1..].iter().all(|&n| n == 0),
                    "{name}: {per_class:?}"
                )
            }
            // ... but the short requests' connection.
            _ => assert!(per_class[0] > 0 && top > 0, "{name}: {per_class:?}"),
        }
    }
}

#[test]
fn ctrl_c_removes_the_namespaces() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_homa"))
        .args(["incast", "--clients", "1", "--duration", "600", "--contenders", "homa/udp", "-q"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let ours = prefix(child.id());
    // Wait for the lab to exist: its last namespace is the client's.
    let client = format!("{ours}c0");
    let start = std::time::Instant::now();
    while !namespaces().contains(&client) {
        assert!(start.elapsed().as_secs() < 60, "the lab never appeared");
        assert!(child.try_wait().unwrap().is_none(), "homa incast ended early");
        std::thread::yield_now();
    }
    // SAFETY: kill with a live child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    let left = namespaces();
    assert!(!left.contains(&ours), "left behind: {left}");
}

#[test]
fn a_python_without_homa_is_a_clear_error_and_removes_the_lab() {
    if let Some(why) = unavailable() {
        eprintln!("skipped: {why}");
        return;
    }
    let child = Command::new(env!("CARGO_BIN_EXE_homa"))
        .args(["incast", "--clients", "1", "--contenders", "homa/python", "--python", "false"])
        .args(["-q", "--duration", "0.2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ours = prefix(child.id());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("needs false with the package homa-transport"), "{stderr}");
    let left = namespaces();
    assert!(!left.contains(&ours), "left behind: {left}");
}

//! `homa sim` end to end on a small fabric.

#[allow(dead_code)] // the shared helpers include some this file does not need
mod common;

use common::homa;

const SMALL: [&str; 10] =
    ["sim", "--hosts", "16", "--hosts-per-rack", "8", "--spines", "2", "--messages", "300", "-q"];

#[test]
fn writes_a_table_json_and_a_plot() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("out.json");
    let svg = dir.path().join("out.svg");
    let mut args = SMALL.to_vec();
    args.extend(["--workload", "w1", "--load", "0.5", "--json", json.to_str().unwrap()]);
    args.extend(["--plot", svg.to_str().unwrap()]);
    let run = homa(&args, "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("short messages"), "{}", run.stdout);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["measured"]["completed"], 300);
    assert_eq!(report["protocol"]["overcommit"], 1);
    assert_eq!(report["tail"], "loaded");
    assert!(std::fs::read_to_string(&svg).unwrap().starts_with("<svg"));
    // Same seed, same JSON.
    let json2 = dir.path().join("again.json");
    let mut again = SMALL.to_vec();
    again.extend(["--workload", "w1", "--load", "0.5", "--json", json2.to_str().unwrap()]);
    assert_eq!(homa(&again, "").code, 0);
    assert_eq!(std::fs::read(&json).unwrap(), std::fs::read(&json2).unwrap());
}

#[test]
fn bad_workload_files_are_input_errors() {
    let dir = tempfile::tempdir().unwrap();
    let cdf = dir.path().join("bad.txt");
    std::fs::write(&cdf, "100 0.5\n50 1\n").unwrap();
    let mut args = SMALL.to_vec();
    args.extend(["--workload", cdf.to_str().unwrap()]);
    let run = homa(&args, "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("line 2: size 50 does not increase"), "{}", run.stderr);
    let mut missing = SMALL.to_vec();
    missing.extend(["--workload", "no-such-file.txt"]);
    let run = homa(&missing, "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("neither a built-in workload"), "{}", run.stderr);
}

/// HomaSimulation's measurement: no warm-up, arrivals stop with the measured messages, the
/// network drains; bins carry the p99 as its histograms read it.
#[test]
fn the_papers_measurement_is_a_choice_of_warm_up_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("drain.json");
    let mut args = SMALL.to_vec();
    args.extend(["--workload", "w4", "--load", "0.8", "--warmup", "0", "--tail", "drain"]);
    args.extend(["--json", json.to_str().unwrap()]);
    let run = homa(&args, "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["tail"], "drain");
    assert_eq!(report["measured"]["completed"], 300);
    for bin in report["bins"].as_array().unwrap().iter().filter(|b| b["messages"] != 0) {
        assert!(bin["p99_histogram"].as_f64().unwrap() <= bin["p99"].as_f64().unwrap());
    }
    let mut bad = SMALL.to_vec();
    bad.extend(["--tail", "forever"]);
    assert_eq!(homa(&bad, "").code, 2);
}

/// Review finding: `--load 1.5` ran, although the help says (0..1].
#[test]
fn a_load_above_one_is_an_input_error() {
    let mut args = SMALL.to_vec();
    args.extend(["--workload", "w1", "--load", "1.5"]);
    let run = homa(&args, "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("load 1.5 must be in (0, 1]"), "{}", run.stderr);
}

/// The module's anti-starvation knobs reach every endpoint: they show in the report and
/// change the run; out-of-range values are input errors.
#[test]
fn fifo_grants_and_picks_are_knobs() {
    let dir = tempfile::tempdir().unwrap();
    let run_with = |extra: &[&str], name: &str| {
        let json = dir.path().join(name);
        let mut args = SMALL.to_vec();
        args.extend(["--workload", "w4", "--load", "0.8", "--json", json.to_str().unwrap()]);
        args.extend(extra);
        let run = homa(&args, "");
        assert_eq!(run.code, 0, "{}", run.stderr);
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(json).unwrap()).unwrap()
    };
    let srpt = run_with(&[], "srpt.json");
    assert_eq!(srpt["protocol"]["grant_fifo_fraction"], 0);
    assert_eq!(srpt["protocol"]["pacer_fifo_fraction"], 0);
    let fifo = run_with(&["--grant-fifo", "100", "--pacer-fifo", "100"], "fifo.json");
    assert_eq!(fifo["protocol"]["grant_fifo_fraction"], 100);
    assert_eq!(fifo["protocol"]["pacer_fifo_fraction"], 100);
    assert_ne!(srpt["bins"], fifo["bins"], "FIFO grants and picks changed nothing");

    let mut args = SMALL.to_vec();
    args.extend(["--workload", "w4", "--grant-fifo", "501"]);
    let run = homa(&args, "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("grant_fifo_fraction"), "{}", run.stderr);
}

/// `--oracle` adds an ideal SRPT scheduler's figures for the same messages, with the paper's
/// oracle beside them for its workloads; request/response runs refuse it.
#[test]
fn the_oracle_reports_beside_homa() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("oracle.json");
    let mut args = SMALL.to_vec();
    args.extend([
        "--workload",
        "w5",
        "--load",
        "0.5",
        "--oracle",
        "--json",
        json.to_str().unwrap(),
    ]);
    let run = homa(&args, "");
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("oracle_p99"), "{}", run.stdout);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let bins = report["bins"].as_array().unwrap();
    let first = bins.iter().find(|b| b["messages"] != 0).unwrap();
    assert!(first["oracle_p99"].as_f64().unwrap() >= 1.0, "{first}");
    assert_eq!(first["paper_oracle_p99"], 1.0);
    let mut rpc = SMALL.to_vec();
    rpc.extend(["--workload", "w5", "--oracle", "--mode", "rpc"]);
    let run = homa(&rpc, "");
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("one-way"), "{}", run.stderr);
}

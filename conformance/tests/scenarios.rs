//! The Rust runner for `vectors/scenarios.json`: every case replayed against a fresh
//! `homa_core::Endpoint`, judged against `expected-failures/rust.txt`.

use std::collections::BTreeSet;
use std::panic::{self, AssertUnwindSafe};

use conformance::scenarios::{self, Action, Scenario, ScenarioFile};
use conformance::vectors::{self, ExpectedFailures};

fn file() -> ScenarioFile {
    scenarios::load_scenarios().unwrap_or_else(|e| panic!("vectors/scenarios.json: {e}"))
}

/// Runs a case, turning a panic into its failure: a panic is a bug of that case's inputs,
/// not a reason to stop the run.
fn run(case: &Scenario) -> Result<(), String> {
    match panic::catch_unwind(AssertUnwindSafe(|| scenarios::run_case(case))) {
        Ok(result) => result.map_err(|f| f.to_string()),
        Err(_) => Err("the endpoint panicked".to_string()),
    }
}

#[test]
fn rust_endpoint_passes_every_scenario() {
    let file = file();
    let expected = ExpectedFailures::parse(vectors::RUST_EXPECTED_FAILURES)
        .unwrap_or_else(|e| panic!("expected-failures/rust.txt: {e}"));
    let outcomes: Vec<(&str, Result<(), String>)> =
        file.cases().map(|c| (c.id.as_str(), run(c))).collect();
    let total = outcomes.len();
    match expected.judge("scenario", outcomes) {
        Ok(n) => println!("scenario vectors: {} passed, {n} failed as expected", total - n),
        Err(problems) => {
            panic!("{} scenario vector problems:\n{}", problems.len(), problems.join("\n"))
        }
    }
}

#[test]
fn scenario_vectors_cover_the_required_ground() {
    let file = file();
    let cases: Vec<&Scenario> = file.cases().collect();
    assert!(cases.len() >= 15, "only {} scenarios", cases.len());

    let mut ids = BTreeSet::new();
    for c in &cases {
        assert!(ids.insert(c.id.as_str()), "case id {} is used twice", c.id);
        let mut last = 0;
        for (i, s) in c.steps.iter().enumerate() {
            assert!(s.at >= last, "{} step {i}: `at` goes back in time", c.id);
            last = s.at;
        }
        assert!(
            c.steps.iter().any(|s| s.action.op().starts_with("expect_")),
            "{} checks nothing",
            c.id
        );
    }
    let mut names = BTreeSet::new();
    for g in &file.groups {
        assert!(names.insert(g.name.as_str()), "group name {} is used twice", g.name);
    }

    // Every op is exercised somewhere, so every runner implements all of them.
    let used: BTreeSet<&str> = cases.iter().flat_map(|c| &c.steps).map(|s| s.action.op()).collect();
    for op in [
        "bind",
        "bind_ephemeral",
        "unbind",
        "send_request",
        "send_response",
        "abort",
        "handle_unreachable",
        "packet",
        "timeout",
        "expect_transmits",
        "expect_events",
        "expect_timeout",
        "expect_metrics",
    ] {
        assert!(used.contains(op), "no scenario uses op {op}");
    }
    let errors: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| &c.steps)
        .filter_map(|s| match &s.action {
            Action::Bind { expect_error, .. }
            | Action::BindEphemeral { expect_error, .. }
            | Action::Unbind { expect_error, .. }
            | Action::SendRequest { expect_error, .. }
            | Action::SendResponse { expect_error, .. }
            | Action::Abort { expect_error, .. }
            | Action::Packet { expect_error, .. } => expect_error.as_deref(),
            _ => None,
        })
        .collect();
    for e in [
        "message_length",
        "invalid_port",
        "port_in_use",
        "port_not_bound",
        "unknown_rpc",
        "not_awaiting_response",
        "truncated",
    ] {
        assert!(errors.contains(e), "no scenario expects error {e}");
    }
}

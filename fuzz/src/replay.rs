//! Replays every stored input of every target on stable: `cargo test --lib`.

use std::fs;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use crate::{TARGETS, Target};

fn fuzz_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The input files in `dir`, sorted; none if the folder does not exist. Dot files (such as a
/// `.gitkeep`) are not inputs.
fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())).path())
        .filter(|p| p.is_file())
        .filter(|p| !p.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')))
        .collect();
    files.sort();
    files
}

/// Runs `target` on each file and returns the files on which it panicked.
fn run_all(target: Target, files: &[PathBuf]) -> Vec<String> {
    let mut failures = Vec::new();
    for file in files {
        let data = fs::read(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        if panic::catch_unwind(AssertUnwindSafe(|| target(&data))).is_err() {
            failures.push(file.display().to_string());
        }
    }
    failures
}

#[test]
fn replay() {
    let mut failures = Vec::new();
    for &(name, target) in TARGETS {
        let corpus = inputs(&fuzz_dir().join("corpus").join(name));
        assert!(
            !corpus.is_empty(),
            "corpus/{name}/ is missing or empty: every target needs a seed corpus \
             (for wire_decode, run `python3 fuzz/seed_corpus.py`)"
        );
        let regressions = inputs(&fuzz_dir().join("regressions").join(name));
        failures.extend(run_all(target, &corpus));
        failures.extend(run_all(target, &regressions));
        println!("{name}: {} corpus inputs, {} regressions", corpus.len(), regressions.len());
    }
    assert!(failures.is_empty(), "target panicked on:\n  {}", failures.join("\n  "));
}

/// Every file in `fuzz_targets/` is listed in [`TARGETS`], and the other way round, so no
/// target's corpus goes unreplayed.
#[test]
fn every_target_is_replayed() {
    let mut on_disk: Vec<String> = inputs(&fuzz_dir().join("fuzz_targets"))
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = TARGETS.iter().map(|(name, _)| name.to_string()).collect();
    listed.sort();
    assert_eq!(on_disk, listed, "fuzz_targets/*.rs and homa_fuzz::TARGETS differ");
}

#[test]
fn wire_decode_rejects_junk_quietly() {
    for data in [&[][..], &[0; 27], &[0xff; 100]] {
        crate::wire_decode(data);
    }
}

#[test]
fn a_panicking_input_is_reported_not_skipped() {
    let file = fuzz_dir().join("Cargo.toml");
    let failures = run_all(|_| panic!("found a bug"), std::slice::from_ref(&file));
    assert_eq!(failures, [file.display().to_string()]);
}

/// Runs one input and shows its panic message and backtrace:
/// `FUZZ_TARGET=<target> FUZZ_INPUT=<file> cargo test --manifest-path fuzz/Cargo.toml --lib
/// -- --ignored run_one --nocapture`.
#[test]
#[ignore = "needs FUZZ_TARGET and FUZZ_INPUT"]
fn run_one() {
    let name = std::env::var("FUZZ_TARGET").expect("FUZZ_TARGET names a target");
    let file = std::env::var("FUZZ_INPUT").expect("FUZZ_INPUT names an input file");
    let (_, target) = TARGETS.iter().find(|(n, _)| *n == name).expect("a target in TARGETS");
    target(&fs::read(&file).unwrap_or_else(|e| panic!("reading {file}: {e}")));
}

/// Prints an input of a structured target as its setup and ops:
/// `FUZZ_TARGET=<target> FUZZ_INPUT=<file> cargo test --manifest-path fuzz/Cargo.toml --lib
/// -- --ignored describe --nocapture`.
#[test]
#[ignore = "needs FUZZ_TARGET and FUZZ_INPUT"]
fn describe() {
    use arbitrary::{Arbitrary, Unstructured};
    use std::fmt::Debug;
    fn show<'a, S: Arbitrary<'a> + Debug, O: Arbitrary<'a> + Debug>(data: &'a [u8]) {
        let mut u = Unstructured::new(data);
        let short = |s: String| if s.len() > 400 { format!("{}...", &s[..400]) } else { s };
        println!("{}", short(format!("{:?}", S::arbitrary(&mut u))));
        while !u.is_empty() {
            println!("{}", short(format!("{:?}", O::arbitrary(&mut u))));
        }
    }
    let name = std::env::var("FUZZ_TARGET").expect("FUZZ_TARGET names a target");
    let file = std::env::var("FUZZ_INPUT").expect("FUZZ_INPUT names an input file");
    let data = fs::read(&file).unwrap_or_else(|e| panic!("reading {file}: {e}"));
    match name.as_str() {
        "endpoint_packets" => {
            show::<crate::endpoint_packets::Setup, crate::endpoint_packets::Op>(&data)
        }
        "endpoint_pair" => show::<crate::endpoint_pair::Setup, crate::endpoint_pair::Op>(&data),
        "grant_model" => show::<crate::grant_model::Setup, crate::grant_model::Op>(&data),
        other => panic!("{other} has no structured input"),
    }
}

//! The `homa` command. Each subcommand lives in its own module, which owns its clap `Args`
//! and a `run` function; `main` parses the command line, dispatches, and turns the result
//! into an exit status:
//!
//! - 0: success;
//! - 1: reading or writing failed (a missing file, a closed pipe other than stdout's reader);
//! - 2: the input was bad (malformed hex, JSON or packets, a file that is not a capture), and
//!   clap's own usage errors.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod decode;
mod encode;
mod error;
mod net;
mod output;
mod pcap;
mod sim;

/// Decode and encode Homa packets, byte for byte as the Linux kernel module sends them, and
/// simulate a datacenter running Homa.
#[derive(Debug, Parser)]
#[command(
    name = "homa",
    version,
    after_long_help = "\
Examples:
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003
  homa decode --pcap trace.pcap --udp-port 4000
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003 | homa encode
  homa sim --workload w3 --load 0.8

Exit status: 0 on success, 1 when reading or writing fails, 2 for bad input or usage."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Decode(decode::Args),
    Encode(encode::Args),
    Sim(sim::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Encode(args) => encode::run(&args),
        Command::Sim(args) => sim::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

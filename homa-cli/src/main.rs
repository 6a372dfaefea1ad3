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

mod bench;
mod client;
mod decode;
mod encode;
mod error;
mod hostile;
mod incast;
mod logging;
mod net;
mod netns;
mod output;
mod pcap;
mod server;
mod sim;
mod soak;
mod stats;

/// Decode and encode Homa packets, byte for byte as the Linux kernel module sends them,
/// simulate a datacenter running Homa, serve and load-test Homa over the network, and
/// benchmark it against UDP and TCP.
#[derive(Debug, Parser)]
#[command(
    name = "homa",
    version,
    after_help = "\
Examples:
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003
  homa decode --pcap trace.pcap --udp-port 4000
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003 | homa encode
  homa sim --workload w3 --load 0.8
  homa server --port 4000
  homa client --server 127.0.0.1:4000 --workload w3 --rate 2000 --duration 10
  homa bench rtt
  homa bench throughput
  sudo homa incast
  sudo homa soak
  sudo homa hostile

Exit status: 0 on success; 1 on a runtime failure (a call failed, a socket or file could\nnot be used); 2 for bad input or usage."
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
    Server(server::Args),
    Client(client::Args),
    Bench(bench::Args),
    Incast(incast::Args),
    Soak(soak::Args),
    Hostile(hostile::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Server(_)
            | Command::Client(_)
            | Command::Bench(_)
            | Command::Incast(_)
            | Command::Soak(_)
            | Command::Hostile(_)
    ) {
        // Reuse freed message buffers instead of faulting fresh pages in for each message.
        if !homa_io::retain_freed_buffers() {
            tracing::debug!("malloc thresholds left as they are (not glibc, or tuned already)");
        }
    }
    let result = match cli.command {
        Command::Decode(args) => decode::run(&args),
        Command::Encode(args) => encode::run(&args),
        Command::Sim(args) => sim::run(&args),
        Command::Server(args) => server::run(&args),
        Command::Client(args) => client::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Incast(args) => incast::run(&args),
        Command::Soak(args) => soak::run(&args),
        Command::Hostile(args) => hostile::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => e.report(),
    }
}

//! `homa encode`: JSON packets (the form `homa decode` prints) to hex, one packet a line.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::PathBuf;

use homa_core::wire::fields;
use serde_json::Value;

use crate::error::Error;
use crate::output::Output;

/// Encode JSON packets, as `homa decode` prints them, to hex.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "\
Encode JSON packets, as `homa decode` prints them, to hex.

Reads a stream of JSON values: objects one per line, pretty-printed objects, or arrays of \
objects. Prints one hex line per packet. Only `type`, `sport`, `dport`, `sender_id` and the \
type's own fields are required; the rest default to what the Linux module sends. A packet \
that cannot be encoded is reported on stderr (`error: packet N: ...`, naming the field), the \
others are still printed, and the exit status is 2.",
    after_long_help = "\
Examples:
  echo '{\"type\":\"BUSY\",\"sport\":5000,\"dport\":32768,\"sender_id\":3}' | homa encode
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003 | homa encode
  homa encode packets.json"
)]
pub(crate) struct Args {
    /// Read the JSON from this file instead of standard input (`-` means standard input).
    #[arg(value_name = "FILE", default_value = "-")]
    input: PathBuf,
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    let (reader, name): (Box<dyn BufRead>, String) = if args.input.as_os_str() == "-" {
        (Box::new(io::stdin().lock()), "standard input".into())
    } else {
        let name = args.input.display().to_string();
        let file = File::open(&args.input).map_err(Error::io(format!("opening {name}")))?;
        (Box::new(BufReader::new(file)), name)
    };
    let mut out = Output::new();
    let mut count = 0;
    let mut failed = false;
    for value in serde_json::Deserializer::from_reader(reader).into_iter::<Value>() {
        let value = match value {
            Ok(value) => value,
            Err(e) if e.is_io() => {
                return Err(Error::Io { what: format!("reading {name}"), source: e.into() });
            }
            Err(e) => {
                out.flush()?;
                return Err(Error::Input(format!("{name}: not JSON: {e}")));
            }
        };
        let packets = match value {
            Value::Array(items) => items,
            other => vec![other],
        };
        for packet in &packets {
            count += 1;
            failed |= !encode_one(packet, count, &mut out)?;
        }
    }
    out.flush()?;
    if failed { Err(Error::Reported) } else { Ok(()) }
}

/// Encodes one packet and prints its hex; reports a bad one on stderr and returns false.
fn encode_one(packet: &Value, n: usize, out: &mut Output) -> Result<bool, Error> {
    let result = match packet {
        Value::Object(object) => fields::encode(&object.into()).map_err(|e| e.to_string()),
        _ => Err("expected a JSON object with the packet's fields".to_string()),
    };
    match result {
        Ok(bytes) => out.line(&hex::encode(bytes)).map(|()| true),
        Err(e) => out.warn(&format!("error: packet {n}: {e}")).map(|()| false),
    }
}

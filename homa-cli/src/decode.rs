//! `homa decode`: hex packets (or a capture, see [`crate::pcap`]) to JSON, one object a line.

use std::io::{self, BufRead};
use std::path::PathBuf;

use homa_core::wire;
use homa_core::wire::fields;

use crate::error::Error;
use crate::output::Output;
use crate::pcap;

/// Decode Homa packets, given in hex or found in a capture, to JSON.
#[derive(Debug, clap::Args)]
#[command(
    long_about = "\
Decode Homa packets, given in hex or found in a capture, to JSON.

Prints one JSON object per packet, one per line, with the field names of the Homa wire format \
(the form `homa encode` reads back). A packet that does not decode is reported on stderr \
(`error: packet N: ...`), the others are still printed, and the exit status is 2.",
    after_long_help = "\
Examples:
  homa decode 138880000000000000000014500600008c4ab97d0000000000000003
  homa decode '0x1388 8000 0000 0000 ...'
  homa decode - < packets.txt         (one hex packet per line)
  homa decode --pcap trace.pcapng
  homa decode --pcap trace.pcap --udp-port 4000

With --pcap, each object also has `frame` (1-based), `time` (seconds), `src`, `dst` and \
`transport` (\"ip\" for IP protocol 146, \"udp\"); a Homa packet that does not decode gets \
`error` and `error_class` instead of its fields. A summary goes to stderr."
)]
pub(crate) struct Args {
    /// Packets in hex, or `-` to read one packet per line from standard input.
    ///
    /// Each packet starts at the first byte of the Homa header (the byte after the IP header,
    /// or the UDP payload). Whitespace and a leading 0x are ignored. On standard input, blank
    /// lines and lines starting with # are skipped.
    #[arg(value_name = "HEX", required_unless_present = "pcap", conflicts_with = "pcap")]
    packets: Vec<String>,

    /// Decode the Homa packets in this pcap or pcapng capture (`-` for standard input).
    ///
    /// Finds IP protocol 146 packets and UDP payloads, over IPv4 or IPv6, on Ethernet, raw
    /// IP, Linux cooked (SLL, SLL2) and BSD loopback links.
    #[arg(long, value_name = "FILE")]
    pcap: Option<PathBuf>,

    /// With --pcap: the UDP port Homa runs on.
    ///
    /// Only UDP packets from or to this port are decoded, and those that fail are reported.
    /// Without it every UDP payload is tried, and those that do not decode are skipped
    /// silently.
    #[arg(long, value_name = "PORT", requires = "pcap", conflicts_with = "packets")]
    udp_port: Option<u16>,
}

pub(crate) fn run(args: &Args) -> Result<(), Error> {
    let mut out = Output::new();
    if let Some(path) = &args.pcap {
        return pcap::run(path, args.udp_port, &mut out);
    }
    let mut failed = false;
    for (i, arg) in args.packets.iter().enumerate() {
        if arg == "-" {
            for (n, line) in io::stdin().lock().lines().enumerate() {
                let line = line.map_err(Error::io("reading standard input"))?;
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                failed |= !decode_one(line, &format!("line {}", n + 1), &mut out)?;
            }
        } else {
            failed |= !decode_one(arg, &format!("packet {}", i + 1), &mut out)?;
        }
    }
    out.flush()?;
    if failed { Err(Error::Reported) } else { Ok(()) }
}

/// Decodes one hex packet and prints it; reports a bad one on stderr and returns false.
fn decode_one(text: &str, label: &str, out: &mut Output) -> Result<bool, Error> {
    let bytes = match parse_hex(text) {
        Ok(bytes) => bytes,
        Err(e) => {
            out.warn(&format!("error: {label}: {e}"))?;
            return Ok(false);
        }
    };
    let repr = match wire::Repr::parse(&bytes) {
        Ok(repr) => repr,
        Err(e) => {
            out.warn(&format!("error: {label}: {e}"))?;
            return Ok(false);
        }
    };
    out.json(fields::to_fields(&repr).into())?;
    let used = repr.buffer_len();
    if used < bytes.len() {
        let extra = bytes.len() - used;
        out.warn(&format!(
            "warning: {label}: {extra} bytes after the {used}-byte {} header are ignored \
             (homa encode will not reproduce them)",
            repr.packet_type()
        ))?;
    }
    Ok(true)
}

/// Hex to bytes, ignoring whitespace anywhere and a leading `0x`.
fn parse_hex(text: &str) -> Result<Vec<u8>, String> {
    let text = text.trim_start();
    let text = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")).unwrap_or(text);
    let digits: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(&digits).map_err(|e| match e {
        hex::FromHexError::InvalidHexCharacter { c, index } => {
            format!("not hex: {c:?} at digit {}", index + 1)
        }
        hex::FromHexError::OddLength => {
            format!("not hex: odd number of digits ({})", digits.len())
        }
        hex::FromHexError::InvalidStringLength => "not hex: invalid length".to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_hex;

    #[test]
    fn hex_is_forgiving_about_spacing_and_prefix() {
        assert_eq!(parse_hex("0x01 02\t0a\n"), Ok(vec![1, 2, 10]));
        assert_eq!(parse_hex("  0XfF"), Ok(vec![255]));
        assert_eq!(parse_hex(""), Ok(vec![]));
    }

    #[test]
    fn bad_hex_says_why() {
        assert_eq!(parse_hex("abc"), Err("not hex: odd number of digits (3)".into()));
        assert_eq!(parse_hex("0g"), Err("not hex: 'g' at digit 2".into()));
        assert_eq!(parse_hex("0x0x00"), Err("not hex: 'x' at digit 2".into()));
    }
}

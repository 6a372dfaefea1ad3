//! `homa decode --pcap`: the Homa packets in a pcap or pcapng capture, one JSON object each.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Cursor, Read};
use std::path::Path;

use homa_core::wire::fields;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{PcapError, TsResolution};
use serde_json::{Map, Value, json};

use crate::error::Error;
use crate::net::{self, Link, Transport};
use crate::output::Output;

/// Decodes every Homa packet in the capture at `path` (`-` for standard input) and prints
/// a summary on stderr.
pub(crate) fn run(path: &Path, udp_port: Option<u16>, out: &mut Output) -> Result<(), Error> {
    let live = path.as_os_str() == "-";
    let (mut input, name): (Box<dyn Read>, String) = if live {
        (Box::new(io::stdin().lock()), "standard input".into())
    } else {
        let name = path.display().to_string();
        let file = File::open(path).map_err(Error::io(format!("opening {name}")))?;
        (Box::new(file), name)
    };
    let mut magic = [0; 4];
    if let Err(e) = input.read_exact(&mut magic) {
        return Err(match e.kind() {
            io::ErrorKind::UnexpectedEof => {
                Error::Input(format!("{name} is not a capture: it is shorter than 4 bytes"))
            }
            _ => Error::Io { what: format!("reading {name}"), source: e },
        });
    }
    let reader = Cursor::new(magic).chain(input);
    let mut decoder =
        Decoder { out, udp_port, live, counts: Counts::default(), unsupported: BTreeSet::new() };
    let result = match u32::from_be_bytes(magic) {
        0x0A0D_0D0A => {
            let pcapng = PcapNgReader::new(reader).map_err(|e| header_error(e, &name))?;
            read_pcapng(pcapng, &name, &mut decoder)
        }
        0xA1B2_C3D4 | 0xD4C3_B2A1 | 0xA1B2_3C4D | 0x4D3C_B2A1 => {
            let pcap = PcapReader::new(reader).map_err(|e| header_error(e, &name))?;
            read_pcap(pcap, &name, &mut decoder)
        }
        _ => {
            return Err(Error::Input(format!(
                "{name} is not a pcap or pcapng capture (it starts with {})",
                hex::encode(magic)
            )));
        }
    };
    let Counts { frames, decoded, errors, skipped } = decoder.counts;
    let s = if frames == 1 { "" } else { "s" };
    out.warn(&format!("{frames} frame{s}: decoded {decoded}, errors {errors}, skipped {skipped}"))?;
    result
}

/// Turns frames into JSON lines and counts them.
struct Decoder<'o> {
    out: &'o mut Output,
    udp_port: Option<u16>,
    /// Flush after every frame, for captures piped in while they are taken.
    live: bool,
    counts: Counts,
    /// Link types already warned about.
    unsupported: BTreeSet<u32>,
}

#[derive(Debug, Default)]
struct Counts {
    frames: u64,
    decoded: u64,
    errors: u64,
    skipped: u64,
}

impl Decoder<'_> {
    fn frame(&mut self, linktype: u32, time: Option<f64>, data: &[u8]) -> Result<(), Error> {
        self.counts.frames += 1;
        let frame = self.counts.frames;
        let Some(link) = Link::from_linktype(linktype) else {
            if self.unsupported.insert(linktype) {
                self.out.warn(&format!(
                    "warning: link type {linktype} is not supported; its frames are skipped"
                ))?;
            }
            self.counts.skipped += 1;
            return Ok(());
        };
        let Some(found) = net::find(link, data) else {
            self.counts.skipped += 1;
            return Ok(());
        };
        // Whether the packet must be Homa, so that a failure to decode it is an error.
        let (transport, src, dst, claimed) = match found.transport {
            Transport::Ip => ("ip", found.src.to_string(), found.dst.to_string(), true),
            Transport::Udp { sport, dport } => {
                let on_port = self.udp_port.map(|p| p == sport || p == dport);
                if on_port == Some(false) {
                    self.counts.skipped += 1;
                    return Ok(());
                }
                let src = std::net::SocketAddr::new(found.src, sport).to_string();
                let dst = std::net::SocketAddr::new(found.dst, dport).to_string();
                ("udp", src, dst, on_port.is_some())
            }
        };
        let decoded = fields::decode(found.payload);
        if decoded.is_err() && !claimed {
            self.counts.skipped += 1;
            return Ok(());
        }
        let mut m = Map::new();
        m.insert("frame".into(), json!(frame));
        m.insert("time".into(), time.map_or(Value::Null, |t| json!(t)));
        m.insert("src".into(), json!(src));
        m.insert("dst".into(), json!(dst));
        m.insert("transport".into(), json!(transport));
        if found.truncated {
            m.insert("capture_truncated".into(), json!(true));
        }
        match decoded {
            Ok(fields) => {
                self.counts.decoded += 1;
                let serde_json::Value::Object(fields) = fields.into() else {
                    unreachable!("fields are a map")
                };
                m.extend(fields);
            }
            Err(e) => {
                self.counts.errors += 1;
                m.insert("error".into(), json!(e.to_string()));
                m.insert("error_class".into(), json!(e.class()));
                m.insert("hex".into(), json!(hex::encode(found.payload)));
            }
        }
        self.out.json(Value::Object(m))?;
        if self.live {
            self.out.flush()?;
        }
        Ok(())
    }

    /// Handles an error from the capture reader after its header was read.
    fn capture_error(&mut self, e: PcapError, name: &str) -> Result<(), Error> {
        let last = self.counts.frames;
        match e {
            // The usual end of a capture whose writer was stopped mid-record.
            PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => self.out.warn(
                &format!("warning: {name} ends in the middle of a record (after frame {last})"),
            ),
            PcapError::IoError(source) => {
                Err(Error::Io { what: format!("reading {name}"), source })
            }
            e => Err(Error::Input(format!("{name}: malformed record after frame {last}: {e}"))),
        }
    }
}

/// Maps an error opening a capture (reading its file header).
fn header_error(e: PcapError, name: &str) -> Error {
    match e {
        PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            Error::Input(format!("{name}: the capture's header is truncated"))
        }
        PcapError::IoError(source) => Error::Io { what: format!("reading {name}"), source },
        e => Error::Input(format!("{name} is not a valid capture: {e}")),
    }
}

fn read_pcap<R: Read>(
    mut pcap: PcapReader<R>,
    name: &str,
    decoder: &mut Decoder<'_>,
) -> Result<(), Error> {
    let header = pcap.header();
    let linktype = u32::from(header.datalink);
    let units = match header.ts_resolution {
        TsResolution::MicroSecond => 1e6,
        TsResolution::NanoSecond => 1e9,
    };
    // Raw records: pcap-file's checked `PcapPacket` rejects an `orig_len` above the snap
    // length, which is exactly what a capture taken with a small snap length holds.
    while let Some(record) = pcap.next_raw_packet() {
        match record {
            Ok(r) => {
                let time = f64::from(r.ts_sec) + f64::from(r.ts_frac) / units;
                decoder.frame(linktype, Some(time), &r.data)?;
            }
            Err(e) => return decoder.capture_error(e, name),
        }
    }
    Ok(())
}

fn read_pcapng<R: Read>(
    mut pcapng: PcapNgReader<R>,
    name: &str,
    decoder: &mut Decoder<'_>,
) -> Result<(), Error> {
    // The interfaces of the current section, kept here because a block borrows the reader.
    let mut interfaces = Vec::new();
    while let Some(block) = pcapng.next_block() {
        let block = match block {
            Ok(block) => block,
            Err(e) => return decoder.capture_error(e, name),
        };
        let (interface_id, raw_time, data) = match &block {
            Block::SectionHeader(_) => {
                interfaces.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                interfaces.push(Interface::new(idb));
                continue;
            }
            // pcap-file stores the raw timestamp, in the interface's units, as nanoseconds.
            Block::EnhancedPacket(p) => (p.interface_id, Some(p.timestamp.as_nanos()), &p.data),
            Block::Packet(p) => (u32::from(p.interface_id), Some(u128::from(p.timestamp)), &p.data),
            // The data may end with block padding; the IP length bounds what is read.
            Block::SimplePacket(p) => (0, None, &p.data),
            _ => continue,
        };
        let Some(interface) = interfaces.get(interface_id as usize) else {
            let frame = decoder.counts.frames + 1;
            return Err(Error::Input(format!(
                "{name}: frame {frame} names interface {interface_id}, which the capture does \
                 not describe"
            )));
        };
        let time = raw_time.map(|raw| interface.seconds(raw));
        decoder.frame(interface.linktype, time, data)?;
    }
    Ok(())
}

/// What a pcapng interface description says about its packets.
struct Interface {
    linktype: u32,
    /// Timestamp units per second (`if_tsresol`, microseconds by default).
    units_per_second: u128,
    /// Seconds to add to every timestamp (`if_tsoffset`).
    offset: u64,
}

impl Interface {
    fn new(idb: &InterfaceDescriptionBlock<'_>) -> Interface {
        let mut interface =
            Interface { linktype: idb.linktype.into(), units_per_second: 1_000_000, offset: 0 };
        for option in &idb.options {
            match *option {
                InterfaceDescriptionOption::IfTsResol(r) => {
                    let units = if r & 0x80 != 0 {
                        2u128.checked_pow(u32::from(r & 0x7f))
                    } else {
                        10u128.checked_pow(u32::from(r))
                    };
                    // An absurd resolution keeps the default rather than failing.
                    if let Some(units) = units {
                        interface.units_per_second = units;
                    }
                }
                InterfaceDescriptionOption::IfTsOffset(offset) => interface.offset = offset,
                _ => {}
            }
        }
        interface
    }

    fn seconds(&self, raw: u128) -> f64 {
        let units = self.units_per_second;
        self.offset as f64 + (raw / units) as f64 + (raw % units) as f64 / units as f64
    }
}

#[cfg(test)]
mod tests {
    use super::Interface;

    #[test]
    fn pcapng_time_follows_the_interface_resolution() {
        let micros = Interface { linktype: 1, units_per_second: 1_000_000, offset: 0 };
        assert_eq!(micros.seconds(1_500_000), 1.5);
        let nanos = Interface { linktype: 1, units_per_second: 1_000_000_000, offset: 10 };
        assert_eq!(nanos.seconds(2_250_000_000), 12.25);
    }
}

//! Finding Homa packets in captured frames: link layer, IPv4 / IPv6, UDP.
//!
//! Everything here reads untrusted bytes: each step checks lengths with `get` and gives up
//! on the frame (`None`) rather than panicking.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The IP protocol number of Homa (`IPPROTO_HOMA`).
pub(crate) const IPPROTO_HOMA: u8 = 146;
const IPPROTO_UDP: u8 = 17;

/// The link layers frames can be read from, by pcap `LINKTYPE_*` value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// BSD loopback (0 `NULL`, 108 `LOOP`): a 4-byte address family, then IP.
    Loopback,
    /// 1 `ETHERNET`, with any number of 802.1Q / 802.1ad tags.
    Ethernet,
    /// 101 `RAW`, 228 `IPV4`, 229 `IPV6`: the frame is the IP packet.
    RawIp,
    /// 113 `LINUX_SLL`: a 16-byte header with the EtherType at byte 14.
    LinuxSll,
    /// 276 `LINUX_SLL2`: a 20-byte header with the EtherType at byte 0.
    LinuxSll2,
}

impl Link {
    /// The link layer with this `LINKTYPE_*` number, if supported.
    pub(crate) fn from_linktype(linktype: u32) -> Option<Link> {
        match linktype {
            0 | 108 => Some(Link::Loopback),
            1 => Some(Link::Ethernet),
            101 | 228 | 229 => Some(Link::RawIp),
            113 => Some(Link::LinuxSll),
            276 => Some(Link::LinuxSll2),
            _ => None,
        }
    }
}

/// How a Homa packet travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Directly over IP, protocol 146.
    Ip,
    /// As a UDP payload, between these ports.
    Udp { sport: u16, dport: u16 },
}

/// A possible Homa packet found in a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found<'a> {
    pub(crate) src: IpAddr,
    pub(crate) dst: IpAddr,
    pub(crate) transport: Transport,
    /// The IP protocol 146 payload or the UDP payload, bounded by the IP (and UDP) lengths,
    /// so Ethernet padding and trailers are not part of it.
    pub(crate) payload: &'a [u8],
    /// The capture holds fewer bytes than the IP header says the packet had.
    pub(crate) truncated: bool,
}

/// The Homa-over-IP or UDP payload in `frame`, or `None` for anything else (other protocols,
/// IP fragments, frames too short for their headers).
pub(crate) fn find(link: Link, frame: &[u8]) -> Option<Found<'_>> {
    let ip = match link {
        Link::RawIp => frame,
        Link::Loopback => frame.get(4..)?,
        Link::Ethernet => ethernet(frame)?,
        Link::LinuxSll => ether_type_payload(u16_at(frame, 14)?, frame.get(16..)?)?,
        Link::LinuxSll2 => ether_type_payload(u16_at(frame, 0)?, frame.get(20..)?)?,
    };
    let packet = match ip.first()? >> 4 {
        4 => ipv4(ip)?,
        6 => ipv6(ip)?,
        _ => return None,
    };
    match packet.protocol {
        IPPROTO_HOMA => Some(Found {
            src: packet.src,
            dst: packet.dst,
            transport: Transport::Ip,
            payload: packet.payload,
            truncated: packet.truncated,
        }),
        IPPROTO_UDP => {
            let udp = packet.payload;
            let sport = u16_at(udp, 0)?;
            let dport = u16_at(udp, 2)?;
            let udp_len = usize::from(u16_at(udp, 4)?);
            // A UDP length of 0 happens for jumbograms; trust the IP length then.
            let end = if udp_len >= 8 { udp_len } else { udp.len() };
            let truncated = packet.truncated || end > udp.len();
            let payload = udp.get(8..end.min(udp.len()))?;
            Some(Found {
                src: packet.src,
                dst: packet.dst,
                transport: Transport::Udp { sport, dport },
                payload,
                truncated,
            })
        }
        _ => None,
    }
}

/// An IP packet's addresses, protocol and payload (after any IPv6 extension headers).
struct IpPacket<'a> {
    src: IpAddr,
    dst: IpAddr,
    protocol: u8,
    payload: &'a [u8],
    truncated: bool,
}

fn ethernet(frame: &[u8]) -> Option<&[u8]> {
    let mut at = 12;
    loop {
        let ether_type = u16_at(frame, at)?;
        match ether_type {
            // 802.1Q, 802.1ad and the old QinQ value: skip the tag.
            0x8100 | 0x88a8 | 0x9100 => at += 4,
            _ => return ether_type_payload(ether_type, frame.get(at + 2..)?),
        }
    }
}

fn ether_type_payload(ether_type: u16, payload: &[u8]) -> Option<&[u8]> {
    matches!(ether_type, 0x0800 | 0x86dd).then_some(payload)
}

fn ipv4(ip: &[u8]) -> Option<IpPacket<'_>> {
    let header_len = usize::from(ip.first()? & 0x0f) * 4;
    let total_len = usize::from(u16_at(ip, 2)?);
    // A total length of 0 is what a capture of a TSO/GSO super-packet can show.
    let total_len = if total_len == 0 { ip.len() } else { total_len };
    let fragment = u16_at(ip, 6)?;
    if header_len < 20 || total_len < header_len || fragment & 0x3fff != 0 {
        return None;
    }
    let src: [u8; 4] = ip.get(12..16)?.try_into().ok()?;
    let dst: [u8; 4] = ip.get(16..20)?.try_into().ok()?;
    Some(IpPacket {
        src: Ipv4Addr::from(src).into(),
        dst: Ipv4Addr::from(dst).into(),
        protocol: *ip.get(9)?,
        payload: ip.get(header_len..total_len.min(ip.len()))?,
        truncated: total_len > ip.len(),
    })
}

fn ipv6(ip: &[u8]) -> Option<IpPacket<'_>> {
    const HEADER_LEN: usize = 40;
    let payload_len = usize::from(u16_at(ip, 4)?);
    // A payload length of 0 means a jumbogram (or a GSO super-packet): use the frame.
    let total_len = if payload_len == 0 { ip.len() } else { HEADER_LEN + payload_len };
    let src: [u8; 16] = ip.get(8..24)?.try_into().ok()?;
    let dst: [u8; 16] = ip.get(24..40)?.try_into().ok()?;
    let mut next = *ip.get(6)?;
    let mut rest = ip.get(HEADER_LEN..total_len.min(ip.len()))?;
    loop {
        let skip = match next {
            // Hop-by-hop options, routing, destination options: length in 8-byte units.
            0 | 43 | 60 => (usize::from(*rest.get(1)?) + 1) * 8,
            // Fragment: only a whole packet (offset 0, no more fragments) is a Homa packet.
            44 => {
                if u16_at(rest, 2)? & 0xfff9 != 0 {
                    return None;
                }
                8
            }
            // Authentication header: length in 4-byte units, minus 2.
            51 => (usize::from(*rest.get(1)?) + 2) * 4,
            _ => break,
        };
        next = *rest.first()?;
        rest = rest.get(skip..)?;
    }
    Some(IpPacket {
        src: Ipv6Addr::from(src).into(),
        dst: Ipv6Addr::from(dst).into(),
        protocol: next,
        payload: rest,
        truncated: total_len > ip.len(),
    })
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at + 2)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOMA: &[u8] = &[0xAB; 28];

    fn ipv4_packet(protocol: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut p = vec![0x45, 0];
        p.extend(total.to_be_bytes());
        p.extend([0, 0, 0x40, 0, 64, protocol, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        p.extend(payload);
        p
    }

    fn ipv6_packet(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0];
        p.extend((payload.len() as u16).to_be_bytes());
        p.extend([next, 64]);
        p.extend(Ipv6Addr::LOCALHOST.octets());
        p.extend(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2).octets());
        p.extend(payload);
        p
    }

    #[test]
    fn ethernet_with_vlan_tag_and_padding() {
        let mut frame = vec![0; 12];
        frame.extend([0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        frame.extend(ipv4_packet(IPPROTO_HOMA, &HOMA[..10]));
        frame.resize(64, 0xEE);
        let found = find(Link::Ethernet, &frame).unwrap();
        assert_eq!(found.payload, &HOMA[..10]);
        assert_eq!(found.src, IpAddr::from([10, 0, 0, 1]));
        assert_eq!(found.transport, Transport::Ip);
        assert!(!found.truncated);
    }

    #[test]
    fn ipv6_extension_headers_are_skipped() {
        // Hop-by-hop (8 bytes), destination options (16 bytes), then Homa.
        let mut ext = vec![60, 0, 1, 4, 0, 0, 0, 0];
        ext.extend([IPPROTO_HOMA, 1, 1, 12]);
        ext.extend([0; 12]);
        ext.extend(HOMA);
        let packet = ipv6_packet(0, &ext);
        let found = find(Link::RawIp, &packet).unwrap();
        assert_eq!(found.payload, HOMA);
        assert_eq!(found.src, IpAddr::from(Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn fragments_and_other_protocols_are_not_homa() {
        let mut frag = ipv4_packet(IPPROTO_HOMA, HOMA);
        frag[6] = 0x20; // more fragments
        assert_eq!(find(Link::RawIp, &frag), None);
        assert_eq!(find(Link::RawIp, &ipv4_packet(6, HOMA)), None);
        let mut ext = vec![IPPROTO_HOMA, 0, 0, 8, 0, 0, 0, 0]; // fragment offset 1
        ext.extend(HOMA);
        assert_eq!(find(Link::RawIp, &ipv6_packet(44, &ext)), None);
    }

    #[test]
    fn udp_payload_is_bounded_by_udp_length() {
        let mut udp = vec![0x0f, 0xa0, 0x13, 0x88, 0, 8 + 28, 0, 0];
        udp.extend(HOMA);
        udp.extend([0xEE; 3]); // inside the IP packet but beyond the UDP length
        let mut sll2 = vec![0x86, 0xdd];
        sll2.extend([0; 18]);
        sll2.extend(ipv6_packet(IPPROTO_UDP, &udp));
        let found = find(Link::LinuxSll2, &sll2).unwrap();
        assert_eq!(found.transport, Transport::Udp { sport: 4000, dport: 5000 });
        assert_eq!(found.payload, HOMA);
    }

    #[test]
    fn cooked_and_loopback_links() {
        let ip = ipv4_packet(IPPROTO_HOMA, HOMA);
        let mut sll = vec![0; 14];
        sll.extend([0x08, 0x00]);
        sll.extend(&ip);
        assert_eq!(find(Link::LinuxSll, &sll).unwrap().payload, HOMA);
        let mut null = vec![2, 0, 0, 0];
        null.extend(&ip);
        assert_eq!(find(Link::Loopback, &null).unwrap().payload, HOMA);
        assert_eq!(Link::from_linktype(276), Some(Link::LinuxSll2));
        assert_eq!(Link::from_linktype(105), None);
    }

    #[test]
    fn truncated_capture_is_flagged() {
        let packet = ipv4_packet(IPPROTO_HOMA, HOMA);
        let found = find(Link::RawIp, &packet[..30]).unwrap();
        assert_eq!(found.payload, &HOMA[..10]);
        assert!(found.truncated);
    }

    #[test]
    fn garbage_never_panics() {
        let links = [Link::Loopback, Link::Ethernet, Link::RawIp, Link::LinuxSll, Link::LinuxSll2];
        for len in 0..80 {
            for fill in [0x00, 0x45, 0x60, 0xff] {
                let mut frame = vec![fill; len];
                if len > 0 {
                    frame[0] = 0x46;
                }
                for link in links {
                    let _ = find(link, &frame);
                }
            }
        }
    }
}

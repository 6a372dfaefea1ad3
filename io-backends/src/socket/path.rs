//! Defaults that fit the path: a socket opened without an MTU or a link rate takes them from
//! the network interface its packets leave by. The local address names it: the interface that
//! holds the address, loopback for a loopback address, and for an unspecified address the
//! interface of the default route (or the only interface that is up besides loopback).

use std::collections::HashMap;
use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The pacer's rate on loopback: sends are copies into the receiver's socket, which no
/// queue in between can delay, so the pacer should never hold a packet back there.
const LOOPBACK_MBPS: u32 = 1_000_000;

/// What the defaults are taken from: a network interface, as the kernel describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub(crate) name: String,
    /// The device's MTU.
    pub(crate) mtu: Option<u32>,
    /// The rate to pace for, in Mbit/s: the link speed the driver reports (virtio and
    /// bridges report none), unpaced on loopback; none for an unspecified local address,
    /// which may send over any interface.
    pub(crate) link_mbps: Option<u32>,
}

/// The interface that packets from `local` leave by, if it can be told.
pub(crate) fn interface_for(local: IpAddr) -> Option<Interface> {
    let local = match local {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    let addrs = interface_addresses();
    let name = if local.is_unspecified() {
        default_route(local.is_ipv6()).or_else(|| only_interface_up(&addrs, local.is_ipv6()))?
    } else if local.is_loopback() {
        addrs.iter().find(|a| a.loopback)?.name.clone()
    } else {
        addrs.iter().find(|a| a.ip == Some(local))?.name.clone()
    };
    let loopback = addrs.iter().any(|a| a.name == name && a.loopback);
    // An address of a wider range held by the loopback device (an anycast or service
    // address) sends over whichever interface routes its peers: none to tell.
    if loopback && !local.is_loopback() && !local.is_unspecified() {
        return None;
    }
    let (mtu, speed_mbps) = device_mtu_and_speed(&name);
    let link_mbps = match () {
        () if loopback => Some(LOOPBACK_MBPS),
        () if local.is_unspecified() => None,
        () => speed_mbps,
    };
    Some(Interface { name, mtu, link_mbps })
}

/// The MTU and link speed of device `name`, by ioctl rather than sysfs: sysfs shows the
/// devices of the network namespace it was mounted in, an ioctl those of the caller's.
fn device_mtu_and_speed(name: &str) -> (Option<u32>, Option<u32>) {
    if name.len() >= libc::IFNAMSIZ {
        return (None, None);
    }
    // SAFETY: a plain datagram socket, owned (and closed) by `fd`.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return (None, None);
    }
    // SAFETY: `fd` is a socket we just opened and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `ifreq` is plain data; all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the name and writes `ifru_mtu` of the ifreq we pass.
    let mtu = match unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &mut req) } {
        // SAFETY: the call succeeded, so it wrote `ifru_mtu`.
        0 => u32::try_from(unsafe { req.ifr_ifru.ifru_mtu }).ok().filter(|&m| m > 0),
        _ => None,
    };
    let mut cmd = EthtoolCmd { cmd: ETHTOOL_GSET, ..EthtoolCmd::default() };
    req.ifr_ifru.ifru_data = (&raw mut cmd).cast();
    // SAFETY: SIOCETHTOOL with ETHTOOL_GSET fills the `ethtool_cmd` that `ifru_data` points
    // to, which outlives the call.
    let speed = match unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCETHTOOL, &mut req) } {
        0 => Some(u32::from(cmd.speed) | u32::from(cmd.speed_hi) << 16),
        _ => None,
    };
    // The kernel's SPEED_UNKNOWN is all ones; virtio and bridges report it.
    (mtu, speed.filter(|&s| s != 0 && s != u32::MAX))
}

const ETHTOOL_GSET: u32 = 1;

/// The kernel's `struct ethtool_cmd` (include/uapi/linux/ethtool.h).
#[repr(C)]
#[derive(Default)]
struct EthtoolCmd {
    cmd: u32,
    supported: u32,
    advertising: u32,
    speed: u16,
    duplex: u8,
    port: u8,
    phy_address: u8,
    transceiver: u8,
    autoneg: u8,
    mdio_support: u8,
    maxtxpkt: u32,
    maxrxpkt: u32,
    speed_hi: u16,
    eth_tp_mdix: u8,
    eth_tp_mdix_ctrl: u8,
    lp_advertising: u32,
    reserved: [u32; 2],
}

/// One address of one interface, from `getifaddrs`.
struct IfAddr {
    name: String,
    ip: Option<IpAddr>,
    up: bool,
    loopback: bool,
}

fn interface_addresses() -> Vec<IfAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut at = head;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs returned, alive until freeifaddrs;
        // its name is a NUL-terminated string and its address, when not null, a sockaddr
        // of the family it names.
        unsafe {
            let ifa = &*at;
            let ip = match ifa.ifa_addr.as_ref().map(|a| i32::from(a.sa_family)) {
                Some(libc::AF_INET) => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
                }
                Some(libc::AF_INET6) => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
                }
                _ => None,
            };
            let flags = ifa.ifa_flags as libc::c_int;
            out.push(IfAddr {
                name: CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned(),
                ip,
                up: flags & libc::IFF_UP != 0,
                loopback: flags & libc::IFF_LOOPBACK != 0,
            });
            at = ifa.ifa_next;
        }
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// The device of the default route with the lowest metric, from procfs (the calling
/// thread's network namespace).
fn default_route(ipv6: bool) -> Option<String> {
    let file = if ipv6 { "ipv6_route" } else { "route" };
    let parse = if ipv6 { parse_route_v6 } else { parse_route_v4 };
    let text = std::fs::read_to_string(format!("/proc/thread-self/net/{file}")).ok()?;
    text.lines().filter_map(parse).min_by_key(|(metric, _)| *metric).map(|(_, dev)| dev)
}

/// A line of `/proc/net/route` (`Iface Destination Gateway Flags RefCnt Use Metric Mask ...`,
/// addresses and flags in hexadecimal, the metric in decimal) if it is an IPv4 default route
/// that is up: `(metric, device)`.
fn parse_route_v4(line: &str) -> Option<(u32, String)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let hex = |i: usize| f.get(i).and_then(|s| u32::from_str_radix(s, 16).ok());
    let up = hex(3)? & 1 != 0;
    let metric = f.get(6).and_then(|s| s.parse().ok()).unwrap_or(0);
    (up && hex(1)? == 0 && hex(7)? == 0).then(|| (metric, f[0].to_owned()))
}

/// A line of `/proc/net/ipv6_route` (`dest dest_len src src_len next_hop metric refcnt use
/// flags device`) if it is an IPv6 default route that is up and not loopback's
/// "unreachable" entry: `(metric, device)`.
fn parse_route_v6(line: &str) -> Option<(u32, String)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let hex = |i: usize| f.get(i).and_then(|s| u32::from_str_radix(s, 16).ok());
    let (dest, dev) = (f.first()?, *f.get(9)?);
    let default = dest.bytes().all(|b| b == b'0') && hex(1)? == 0;
    let up = hex(8)? & 1 != 0;
    (default && up && dev != "lo").then(|| (hex(5).unwrap_or(0), dev.to_owned()))
}

/// The one interface that is up with an address of the family, besides loopback; loopback
/// itself when it is the only one; `None` when several are.
fn only_interface_up(addrs: &[IfAddr], ipv6: bool) -> Option<String> {
    let mut up: HashMap<&str, bool> = HashMap::new();
    for a in addrs.iter().filter(|a| a.up && a.ip.is_some_and(|ip| ip.is_ipv6() == ipv6)) {
        up.insert(&a.name, a.loopback);
    }
    let others: Vec<&str> = up.iter().filter(|(_, lo)| !**lo).map(|(n, _)| *n).collect();
    match others[..] {
        [one] => Some(one.to_owned()),
        [] => up.keys().next().map(|n| (*n).to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_addresses_leave_by_the_loopback_device() {
        for ip in ["127.0.0.1", "127.0.0.2", "::1"] {
            let lo = interface_for(ip.parse().unwrap()).expect("this host has loopback");
            assert_eq!(lo.link_mbps, Some(LOOPBACK_MBPS), "{ip}: unpaced");
            assert_eq!(lo.mtu, Some(65_536), "{ip}: loopback's default MTU");
        }
    }

    #[test]
    fn an_address_no_interface_holds_has_no_interface() {
        assert_eq!(interface_for("198.19.255.254".parse().unwrap()), None);
    }

    #[test]
    fn default_routes_are_read_from_procfs() {
        let v4 = "eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0";
        assert_eq!(parse_route_v4(v4), Some((100, "eth0".to_owned())));
        let subnet = "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0";
        assert_eq!(parse_route_v4(subnet), None);
        let down = "eth1\t00000000\t0100A8C0\t0002\t0\t0\t50\t00000000\t0\t0\t0";
        assert_eq!(parse_route_v4(down), None);
        assert_eq!(parse_route_v4("Iface\tDestination\tGateway\tFlags"), None);

        let zero = "00000000000000000000000000000000";
        let v6 = format!(
            "{zero} 00 {zero} 00 fe800000000000000000000000000001 00000400 1 0 00000003 eth0"
        );
        assert_eq!(parse_route_v6(&v6), Some((0x400, "eth0".to_owned())));
        let unreachable = format!("{zero} 00 {zero} 00 {zero} ffffffff 1 0 00200201 lo");
        assert_eq!(parse_route_v6(&unreachable), None);
        let prefix = format!(
            "fe800000000000000000000000000000 40 {zero} 00 {zero} 00000100 1 0 00000001 eth0"
        );
        assert_eq!(parse_route_v6(&prefix), None);
    }
}

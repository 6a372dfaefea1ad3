//! [`Cidr`]: an address prefix such as `198.18.0.0/15`, for a socket's peer allow-list.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 prefix. Parses `a.b.c.d/n`, `x:y::/n`, or a bare address (a single
/// host). IPv4-mapped IPv6 peers (`::ffff:a.b.c.d`) match IPv4 prefixes.
///
/// ```
/// use homa_io::Cidr;
/// let net: Cidr = "198.18.0.0/15".parse().unwrap();
/// assert!(net.contains("198.19.255.1".parse().unwrap()));
/// assert!(!net.contains("198.20.0.1".parse().unwrap()));
/// assert!(net.contains("::ffff:198.18.0.7".parse().unwrap()));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

/// A string that is not an address prefix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid address prefix {0:?} (expected e.g. 198.18.0.0/15 or fd00::/8)")]
pub struct CidrParseError(String);

impl Cidr {
    /// The prefix of `prefix` bits of `addr`; `None` if `prefix` is too long for the family.
    pub fn new(addr: IpAddr, prefix: u8) -> Option<Cidr> {
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        (prefix <= bits).then(|| Cidr { addr: mask(addr, prefix), prefix })
    }

    /// Whether `ip` lies inside the prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(a) => {
            let m = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl FromStr for Cidr {
    type Err = CidrParseError;

    fn from_str(s: &str) -> Result<Cidr, CidrParseError> {
        let err = || CidrParseError(s.to_owned());
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| err())?;
        let full = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse().map_err(|_| err())?,
            None => full,
        };
        Cidr::new(addr, prefix).ok_or_else(err)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_matches() {
        let c: Cidr = "10.1.2.3/8".parse().unwrap();
        assert_eq!(c.to_string(), "10.0.0.0/8");
        assert!(c.contains("10.255.0.1".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("1.2.3.4".parse().unwrap()));
        let host: Cidr = "::1".parse().unwrap();
        assert!(host.contains("::1".parse().unwrap()));
        assert!(!host.contains("::2".parse().unwrap()));
        let v6: Cidr = "fd00::/8".parse().unwrap();
        assert!(v6.contains("fdff::1".parse().unwrap()));
        for bad in ["", "1.2.3.4/33", "::/129", "1.2.3/8", "1.2.3.4/x"] {
            assert!(bad.parse::<Cidr>().is_err(), "{bad}");
        }
    }
}

//! EDNS Client Subnet (RFC 7871): parse and validate the option of a query,
//! and build the option echoed in the response.
//!
//! hickory-proto's `ClientSubnet` reads the option leniently (it accepts extra
//! address octets, bits beyond the source prefix and a non-zero scope) and
//! turns an unknown family into a parse error of the whole OPT record, so the
//! option bytes are read here, from the raw OPT RDATA, and the echoed option
//! is written here too, octet for octet what the XDP fast path writes.
//!
//! Wire format (RFC 7871 §6):
//! ```text
//!    0: FAMILY (2 octets) | 2: SOURCE PREFIX-LENGTH | 3: SCOPE PREFIX-LENGTH | 4: ADDRESS...
//! ```

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// EDNS option code of ECS (RFC 7871 §6, IANA "DNS EDNS0 Option Codes").
pub const OPTION_CODE: u16 = 8;
/// Address family number of IPv4 (IANA "Address Family Numbers").
pub const FAMILY_IPV4: u16 = 1;
/// Address family number of IPv6.
pub const FAMILY_IPV6: u16 = 2;

/// Why an ECS option was rejected (each one is answered FORMERR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EcsError {
    /// Fewer than the 4 fixed octets (FAMILY, SOURCE, SCOPE).
    TooShort(usize),
    /// A FAMILY other than 1 (IPv4) or 2 (IPv6).
    UnknownFamily(u16),
    /// SOURCE PREFIX-LENGTH longer than the family's address (32 or 128 bits).
    SourceTooLong { family: u16, source: u8 },
    /// ADDRESS is not exactly ceil(SOURCE / 8) octets long.
    AddressLength { expected: usize, got: usize },
    /// ADDRESS has bits set beyond SOURCE PREFIX-LENGTH.
    BitsBeyondSource,
    /// SCOPE PREFIX-LENGTH is not 0 in a query.
    NonZeroScope(u8),
    /// More than one ECS option in the OPT record.
    Duplicate,
}

impl fmt::Display for EcsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EcsError::TooShort(n) => write!(f, "ECS option of {n} octets is shorter than 4"),
            EcsError::UnknownFamily(fam) => write!(f, "ECS family {fam} is unknown"),
            EcsError::SourceTooLong { family, source } => {
                write!(f, "ECS source prefix /{source} is too long for family {family}")
            }
            EcsError::AddressLength { expected, got } => {
                write!(f, "ECS address has {got} octets, the source prefix needs {expected}")
            }
            EcsError::BitsBeyondSource => write!(f, "ECS address has bits set beyond the source prefix"),
            EcsError::NonZeroScope(s) => write!(f, "ECS scope prefix /{s} is not 0 in a query"),
            EcsError::Duplicate => write!(f, "more than one ECS option"),
        }
    }
}

impl std::error::Error for EcsError {}

/// A validated ECS option from a query.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ecs {
    family: u16,
    source: u8,
    /// The address octets, zero-padded to 16.
    octets: [u8; 16],
    /// How many octets the query carried: ceil(source / 8).
    len: u8,
}

impl fmt::Debug for Ecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Ecs({}/{})", self.address(), self.source)
    }
}

impl fmt::Display for Ecs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address(), self.source)
    }
}

impl Ecs {
    /// Parses and validates the option data (the bytes after OPTION-CODE and
    /// OPTION-LENGTH).
    pub fn parse(data: &[u8]) -> Result<Ecs, EcsError> {
        if data.len() < 4 {
            return Err(EcsError::TooShort(data.len()));
        }
        let family = u16::from_be_bytes([data[0], data[1]]);
        let source = data[2];
        let scope = data[3];
        let address = &data[4..];
        // RFC 7871 §7.2.1: "A query with a wrongly formatted option (e.g., an
        // unknown FAMILY) MUST be rejected and a FORMERR response MUST be
        // returned to the sender".
        let max = match family {
            FAMILY_IPV4 => 32,
            FAMILY_IPV6 => 128,
            other => return Err(EcsError::UnknownFamily(other)),
        };
        if source > max {
            return Err(EcsError::SourceTooLong { family, source });
        }
        // RFC 7871 §6: "A server receiving an ECS option that uses either too
        // few or too many ADDRESS octets, or that has non-zero ADDRESS bits set
        // beyond SOURCE PREFIX-LENGTH, SHOULD return FORMERR to reject the
        // packet, as a signal to the software developer making the request to
        // fix their implementation."
        let expected = (source as usize).div_ceil(8);
        if address.len() != expected {
            return Err(EcsError::AddressLength { expected, got: address.len() });
        }
        if !source.is_multiple_of(8) {
            let last = address[expected - 1];
            let host_bits = 8 - (source % 8);
            if last & ((1u8 << host_bits) - 1) != 0 {
                return Err(EcsError::BitsBeyondSource);
            }
        }
        // RFC 7871 §6: "SCOPE PREFIX-LENGTH, an unsigned octet representing the
        // leftmost number of significant bits of ADDRESS that the response
        // covers.  In queries, it MUST be set to 0."
        if scope != 0 {
            return Err(EcsError::NonZeroScope(scope));
        }
        let mut octets = [0u8; 16];
        octets[..expected].copy_from_slice(address);
        Ok(Ecs { family, source, octets, len: expected as u8 })
    }

    /// An option as a resolver would send it: `addr` truncated to `source` bits.
    /// `source` is clamped to the family's width.
    pub fn new(addr: IpAddr, source: u8) -> Ecs {
        let (family, max, full): (u16, u8, [u8; 16]) = match addr {
            IpAddr::V4(a) => {
                let mut o = [0u8; 16];
                o[..4].copy_from_slice(&a.octets());
                (FAMILY_IPV4, 32, o)
            }
            IpAddr::V6(a) => (FAMILY_IPV6, 128, a.octets()),
        };
        let source = source.min(max);
        let len = (source as usize).div_ceil(8);
        let mut octets = [0u8; 16];
        octets[..len].copy_from_slice(&full[..len]);
        if !source.is_multiple_of(8) {
            octets[len - 1] &= !((1u8 << (8 - source % 8)) - 1);
        }
        Ecs { family, source, octets, len: len as u8 }
    }

    pub fn family(&self) -> u16 {
        self.family
    }

    /// SOURCE PREFIX-LENGTH as received.
    pub fn source(&self) -> u8 {
        self.source
    }

    /// The ADDRESS octets as received.
    pub fn address_octets(&self) -> &[u8] {
        &self.octets[..self.len as usize]
    }

    /// The address, zero-padded to the family's width.
    pub fn address(&self) -> IpAddr {
        if self.family == FAMILY_IPV4 {
            IpAddr::V4(Ipv4Addr::new(self.octets[0], self.octets[1], self.octets[2], self.octets[3]))
        } else {
            IpAddr::V6(Ipv6Addr::from(self.octets))
        }
    }

    /// The address to look the client up by: `Some` when SOURCE PREFIX-LENGTH > 0.
    ///
    /// RFC 7871 §7.1.2: "A SOURCE PREFIX-LENGTH value of 0 means that the
    /// Recursive Resolver MUST NOT add the client's address information to its
    /// queries." — such a query carries no client information, so the packet's
    /// source address is used instead.
    pub fn client(&self) -> Option<IpAddr> {
        (self.source > 0).then(|| self.address())
    }

    /// The longest SCOPE PREFIX-LENGTH this family allows.
    pub fn max_prefix(&self) -> u8 {
        if self.family == FAMILY_IPV4 { 32 } else { 128 }
    }

    /// Length of the whole option on the wire (code, length, data).
    pub fn wire_len(&self) -> usize {
        4 + 4 + self.len as usize
    }

    /// Appends the option echoed in a response: OPTION-CODE 8, OPTION-LENGTH,
    /// FAMILY, SOURCE PREFIX-LENGTH and ADDRESS as received, and `scope`.
    ///
    /// RFC 7871 §7.2.1: "FAMILY, SOURCE PREFIX-LENGTH, and ADDRESS in the
    /// response MUST match those in the query."
    pub fn write_option(&self, scope: u8, out: &mut Vec<u8>) {
        let data_len = 4 + self.len as u16;
        out.extend_from_slice(&OPTION_CODE.to_be_bytes());
        out.extend_from_slice(&data_len.to_be_bytes());
        out.extend_from_slice(&self.family.to_be_bytes());
        out.push(self.source);
        out.push(scope.min(self.max_prefix()));
        out.extend_from_slice(self.address_octets());
    }

    /// The option data (no code/length) as a query carries it: scope 0.
    pub fn query_data(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(4 + self.len as usize);
        v.extend_from_slice(&self.family.to_be_bytes());
        v.push(self.source);
        v.push(0);
        v.extend_from_slice(self.address_octets());
        v
    }
}

/// Walks the options of an OPT RDATA and returns the ECS option, if any.
///
/// Options other than ECS (cookies, NSID, padding, …) are skipped; a truncated
/// option list is an error (`Err(None)`), as is a malformed or repeated ECS
/// option (`Err(Some(_))`).
pub fn find_in_opt(rdata: &[u8]) -> Result<Option<Ecs>, Option<EcsError>> {
    let mut ecs = None;
    let mut i = 0usize;
    while i < rdata.len() {
        if rdata.len() - i < 4 {
            return Err(None);
        }
        let code = u16::from_be_bytes([rdata[i], rdata[i + 1]]);
        let len = u16::from_be_bytes([rdata[i + 2], rdata[i + 3]]) as usize;
        let start = i + 4;
        if rdata.len() - start < len {
            return Err(None);
        }
        if code == OPTION_CODE {
            if ecs.is_some() {
                return Err(Some(EcsError::Duplicate));
            }
            ecs = Some(Ecs::parse(&rdata[start..start + len]).map_err(Some)?);
        }
        i = start + len;
    }
    Ok(ecs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_and_v6() {
        let e = Ecs::parse(&[0, 1, 24, 0, 1, 2, 3]).unwrap();
        assert_eq!(e.address(), "1.2.3.0".parse::<IpAddr>().unwrap());
        assert_eq!(e.source(), 24);
        assert_eq!(e.client(), Some("1.2.3.0".parse().unwrap()));
        let e = Ecs::parse(&[0, 2, 48, 0, 0x24, 0, 0xcb, 0, 0, 1]).unwrap();
        assert_eq!(e.address(), "2400:cb00:1::".parse::<IpAddr>().unwrap());
        let e = Ecs::parse(&[0, 1, 0, 0]).unwrap();
        assert_eq!(e.client(), None);
        assert_eq!(e.address_octets(), &[] as &[u8]);
        // /17: three octets, the last one with only its top bit usable
        assert!(Ecs::parse(&[0, 1, 17, 0, 10, 0, 0x80]).is_ok());
        assert_eq!(Ecs::parse(&[0, 1, 17, 0, 10, 0, 0x40]), Err(EcsError::BitsBeyondSource));
    }

    #[test]
    fn rejects_malformed_options() {
        assert_eq!(Ecs::parse(&[0, 1, 24]), Err(EcsError::TooShort(3)));
        assert_eq!(Ecs::parse(&[0, 3, 0, 0]), Err(EcsError::UnknownFamily(3)));
        assert_eq!(Ecs::parse(&[0, 0, 0, 0]), Err(EcsError::UnknownFamily(0)));
        assert_eq!(Ecs::parse(&[0, 1, 33, 0, 1, 2, 3, 4, 5]), Err(EcsError::SourceTooLong { family: 1, source: 33 }));
        let mut v6 = vec![0, 2, 129, 0];
        v6.extend_from_slice(&[0; 17]);
        assert_eq!(Ecs::parse(&v6), Err(EcsError::SourceTooLong { family: 2, source: 129 }));
        assert_eq!(Ecs::parse(&[0, 1, 24, 0, 1, 2, 3, 0]), Err(EcsError::AddressLength { expected: 3, got: 4 }));
        assert_eq!(Ecs::parse(&[0, 1, 24, 0, 1, 2]), Err(EcsError::AddressLength { expected: 3, got: 2 }));
        assert_eq!(Ecs::parse(&[0, 1, 0, 0, 0]), Err(EcsError::AddressLength { expected: 0, got: 1 }));
        assert_eq!(Ecs::parse(&[0, 1, 23, 0, 1, 2, 3]), Err(EcsError::BitsBeyondSource));
        assert_eq!(Ecs::parse(&[0, 1, 24, 5, 1, 2, 3]), Err(EcsError::NonZeroScope(5)));
    }

    #[test]
    fn echo_keeps_family_source_and_address() {
        let e = Ecs::parse(&[0, 1, 20, 0, 10, 1, 0x30]).unwrap();
        let mut out = Vec::new();
        e.write_option(16, &mut out);
        assert_eq!(out, vec![0, 8, 0, 7, 0, 1, 20, 16, 10, 1, 0x30]);
        assert_eq!(out.len(), e.wire_len());
        // scope never exceeds the family's width
        let mut out = Vec::new();
        e.write_option(200, &mut out);
        assert_eq!(out[7], 32);
    }

    #[test]
    fn new_truncates_to_source() {
        let e = Ecs::new("10.1.255.7".parse().unwrap(), 20);
        assert_eq!(e.address_octets(), &[10, 1, 0xf0]);
        assert_eq!(Ecs::parse(&e.query_data()).unwrap(), e);
        let e = Ecs::new("2001:db8::1".parse().unwrap(), 200);
        assert_eq!(e.source(), 128);
    }

    #[test]
    fn options_are_walked() {
        // cookie (10) then ECS
        let rdata = [0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0, 8, 0, 7, 0, 1, 24, 0, 1, 2, 3];
        assert_eq!(find_in_opt(&rdata).unwrap().unwrap().source(), 24);
        assert_eq!(find_in_opt(&[]).unwrap(), None);
        assert_eq!(find_in_opt(&[0, 10, 0, 8, 1]), Err(None));
        assert_eq!(find_in_opt(&[0, 10, 0]), Err(None));
        let twice = [0, 8, 0, 4, 0, 1, 0, 0, 0, 8, 0, 4, 0, 1, 0, 0];
        assert_eq!(find_in_opt(&twice), Err(Some(EcsError::Duplicate)));
        assert_eq!(find_in_opt(&[0, 8, 0, 4, 0, 9, 0, 0]), Err(Some(EcsError::UnknownFamily(9))));
    }
}

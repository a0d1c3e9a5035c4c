//! The client subnets measurements are reported for: an IPv4 /24 or longer,
//! an IPv6 /48 or longer (what a resolver's ECS and an edge's aggregation
//! carry), normalised to their network address.

use ipnet::IpNet;

/// Why a subnet is refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum SubnetError {
    #[error("{0:?} is not a CIDR subnet like 58.60.0.0/24")]
    Syntax(String),
    #[error("{0} is wider than a client subnet: IPv4 needs /24 or longer, IPv6 /48 or longer")]
    TooWide(IpNet),
}

/// `text` as a client subnet, its host bits cleared.
pub fn client_subnet(text: &str) -> Result<IpNet, SubnetError> {
    let net: IpNet = text.trim().parse().map_err(|_| SubnetError::Syntax(text.to_string()))?;
    let longest = match net {
        IpNet::V4(_) => 24,
        IpNet::V6(_) => 48,
    };
    if net.prefix_len() < longest {
        return Err(SubnetError::TooWide(net));
    }
    Ok(net.trunc())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_checked_and_normalised() {
        assert_eq!(client_subnet("58.60.0.7/24").unwrap().to_string(), "58.60.0.0/24");
        assert_eq!(client_subnet(" 240e:1:2::/48 ").unwrap().to_string(), "240e:1:2::/48");
        assert_eq!(client_subnet("1.2.3.4/32").unwrap().to_string(), "1.2.3.4/32");
        assert!(matches!(client_subnet("58.60.0.0/16"), Err(SubnetError::TooWide(_))));
        assert!(matches!(client_subnet("240e::/32"), Err(SubnetError::TooWide(_))));
        assert!(matches!(client_subnet("58.60.0.0"), Err(SubnetError::Syntax(_))));
        assert!(matches!(client_subnet("banana/24"), Err(SubnetError::Syntax(_))));
    }
}

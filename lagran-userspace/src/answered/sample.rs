//! Addresses drawn the way the answered traffic falls: a prefix with twice
//! the queries is drawn twice as often, and the address is then uniform
//! inside it. This is what a geo reload's check compares old and new data on,
//! so the share of changed samples is the share of queries whose partition
//! would change.

use ipnet::IpNet;
use rand::Rng;

/// Queries a family needs before its sample is drawn from traffic (fewer:
/// random addresses, as before there is any).
pub const MIN_QUERIES: u64 = 100;

/// Prefixes with their running query totals, per family.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrafficSample {
    /// (network address of the /24, queries up to and including it).
    v4: Vec<(u32, u64)>,
    /// (network address of the /48, queries up to and including it).
    v6: Vec<(u128, u64)>,
}

impl TrafficSample {
    /// From (prefix, queries) pairs; a prefix listed twice counts twice.
    /// IPv4 prefixes are taken as /24s, IPv6 as /48s.
    pub fn new(counts: impl IntoIterator<Item = (IpNet, u64)>) -> Self {
        let mut s = TrafficSample::default();
        for (net, queries) in counts.into_iter().filter(|&(_, q)| q > 0) {
            match net {
                IpNet::V4(n) => {
                    let total = s.v4.last().map_or(0, |l| l.1) + queries;
                    s.v4.push((u32::from(n.network()) & !0xff, total));
                }
                IpNet::V6(n) => {
                    let total = s.v6.last().map_or(0, |l| l.1) + queries;
                    s.v6.push((u128::from(n.network()) & !((1u128 << 80) - 1), total));
                }
            }
        }
        s
    }

    /// The IPv4 queries behind the sample.
    pub fn queries_v4(&self) -> u64 {
        self.v4.last().map_or(0, |l| l.1)
    }

    /// The IPv6 queries behind the sample.
    pub fn queries_v6(&self) -> u64 {
        self.v6.last().map_or(0, |l| l.1)
    }

    /// An IPv4 address drawn by query weight; `None` below [`MIN_QUERIES`].
    pub fn draw_v4(&self, rng: &mut impl Rng) -> Option<u32> {
        let net = pick(&self.v4, rng)?;
        Some(net | rng.gen_range(0..=0xff))
    }

    /// An IPv6 address drawn by query weight; `None` below [`MIN_QUERIES`].
    pub fn draw_v6(&self, rng: &mut impl Rng) -> Option<u128> {
        let net = pick(&self.v6, rng)?;
        Some(net | rng.gen_range(0..(1u128 << 80)))
    }
}

fn pick<T: Copy>(running: &[(T, u64)], rng: &mut impl Rng) -> Option<T> {
    let total = running.last().map_or(0, |l| l.1);
    if total < MIN_QUERIES {
        return None;
    }
    let at = rng.gen_range(0..total);
    Some(running[running.partition_point(|&(_, upto)| upto <= at)].0)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }

    #[test]
    fn draws_follow_the_query_counts() {
        let s = TrafficSample::new([(net("1.2.3.0/24"), 900), (net("5.6.7.0/24"), 100), (net("9.9.9.0/24"), 0)]);
        assert_eq!(s.queries_v4(), 1_000);
        let mut rng = StdRng::seed_from_u64(7);
        let mut heavy = 0;
        for _ in 0..10_000 {
            let a = s.draw_v4(&mut rng).unwrap();
            match a >> 8 {
                0x01_0203 => heavy += 1,
                0x05_0607 => {}
                other => panic!("{other:x} was never queried"),
            }
        }
        assert!((8_700..9_300).contains(&heavy), "about 90 % from the heavy prefix: {heavy}");
    }

    #[test]
    fn too_little_traffic_draws_nothing_so_the_caller_falls_back() {
        let s = TrafficSample::new([(net("1.2.3.0/24"), MIN_QUERIES - 1), (net("240e:1:2::/48"), 5_000)]);
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(s.draw_v4(&mut rng), None);
        let a = s.draw_v6(&mut rng).unwrap();
        assert_eq!(a >> 80, 0x240e_0001_0002, "inside the /48");
        assert_eq!(TrafficSample::default().draw_v6(&mut rng), None);
    }
}

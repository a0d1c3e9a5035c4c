//! The XDP fast path's sampled answers into the query log: reads the
//! program's ring buffer (`lagran_tap_ring`, see `lagran_common::tap`) and
//! hands each record to the dnstap [`Tap`] as a UDP exchange
//! ([`Source::Xdp`]). Records the full ring refused are summed from
//! `lagran_tap_drops` every second into the same drop counter.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use aya::Ebpf;
use aya::maps::{MapData, PerCpuArray, RingBuf};
use lagran_common::tap::{self, TapRecord};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio_util::sync::CancellationToken;

use super::XdpError;
use crate::dnstap::{Exchange, Protocol, Source, Tap};

/// The ring and the drop counts of a loaded program.
pub struct TapMaps {
    ring: RingBuf<MapData>,
    drops: PerCpuArray<MapData, u64>,
}

impl TapMaps {
    /// Takes them out of a loaded object (`None`: an object without them).
    pub fn from_ebpf(ebpf: &mut Ebpf) -> Result<Option<TapMaps>, XdpError> {
        let (Some(ring), Some(drops)) = (ebpf.take_map(tap::RING_MAP_NAME), ebpf.take_map(tap::DROPS_MAP_NAME)) else {
            return Ok(None);
        };
        let ring = RingBuf::try_from(ring)
            .map_err(|source| XdpError::Map { map: tap::RING_MAP_NAME, source: Box::new(source) })?;
        let drops = PerCpuArray::try_from(drops)
            .map_err(|source| XdpError::Map { map: tap::DROPS_MAP_NAME, source: Box::new(source) })?;
        Ok(Some(TapMaps { ring, drops }))
    }

    /// The next record the program wrote, if any (an item that is not a
    /// whole record, which this program never writes, is skipped).
    pub fn next_record(&mut self) -> Option<TapRecord> {
        loop {
            let item = self.ring.next()?;
            if let Some(r) = record(&item) {
                return Some(r);
            }
        }
    }

    /// Records the full ring refused, summed over the CPUs.
    pub fn dropped(&self) -> u64 {
        self.drops.get(&0, 0).map(|v| v.iter().sum()).unwrap_or(0)
    }
}

impl AsRawFd for TapMaps {
    /// The ring's: readable when it holds records.
    fn as_raw_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }
}

/// The exchange a record tells of. `unix_minus_monotonic_ns` turns the
/// program's clock (`bpf_ktime_get_ns`, CLOCK_MONOTONIC) into wall time.
pub fn exchange(r: &TapRecord, unix_minus_monotonic_ns: i64) -> Exchange {
    let ip = |a: &[u8; 16]| -> IpAddr {
        if r.v6 != 0 { Ipv6Addr::from(*a).into() } else { Ipv4Addr::new(a[0], a[1], a[2], a[3]).into() }
    };
    let client = SocketAddr::new(ip(&r.client), u16::from_be_bytes(r.client_port));
    let server = SocketAddr::new(ip(&r.server), u16::from_be_bytes(r.server_port));
    let unix_ns = (r.time_ns as i64).saturating_add(unix_minus_monotonic_ns).max(0) as u64;
    let time = UNIX_EPOCH + Duration::from_nanos(unix_ns);
    Exchange {
        protocol: Protocol::Udp,
        client,
        server: Some(server),
        query_time: time,
        query: r.query().to_vec(),
        response: Some((time, r.response().to_vec())),
    }
}

/// The record in a ring item, if it is one.
fn record(bytes: &[u8]) -> Option<TapRecord> {
    if bytes.len() < size_of::<TapRecord>() {
        return None;
    }
    // SAFETY: `TapRecord` is plain data of integers and arrays (any bit
    // pattern is a value), and `bytes` holds at least one.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<TapRecord>()) })
}

/// Reads the ring until `shutdown`, logging every record to `tap`.
pub async fn run(maps: TapMaps, tap: Arc<Tap>, shutdown: CancellationToken) {
    // SAFETY: the fd is the ring's map, owned by `maps` and open for as long
    // as it lives; the AsyncFd owns the maps and never hands them out.
    let mut fd = match unsafe { AsyncFd::register_with_interest(maps, Interest::READABLE) } {
        Ok(fd) => fd,
        Err(e) => {
            let (_, e) = e.into_parts();
            tracing::error!(error = %e, "cannot poll the XDP query log ring; its samples are lost");
            return;
        }
    };
    let mut counted = fd.get_ref().dropped();
    let mut offset = super::maps::unix_minus_monotonic_ns();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            ready = fd.readable_mut() => {
                let Ok(mut guard) = ready else { return };
                while let Some(r) = guard.get_inner_mut().next_record() {
                    tap.log(Source::Xdp, exchange(&r, offset));
                }
                guard.clear_ready();
            }
            _ = tick.tick() => {
                // NTP may have stepped the wall clock.
                offset = super::maps::unix_minus_monotonic_ns();
                let now = fd.get_ref().dropped();
                tap.count_dropped(Source::Xdp, now.saturating_sub(counted));
                counted = now;
            }
        }
    }
}

/// When the query log runs: tells the program to sample one answer in
/// `every` and spawns the reader of its ring.
pub fn start(handle: &mut super::XdpHandle, tap: Arc<Tap>, every: u32, shutdown: CancellationToken) {
    let maps = match handle.take_tap() {
        Ok(Some(maps)) => maps,
        Ok(None) => {
            tracing::warn!(
                "the XDP object has no query log ring (built from an older tree): XDP answers are not logged"
            );
            return;
        }
        Err(e) => {
            tracing::error!(error = %e, "the XDP query log ring is unusable: XDP answers are not logged");
            return;
        }
    };
    if let Err(e) = handle.writer().set_tap_every(every) {
        tracing::error!(error = %e, "turning XDP answer sampling on failed: XDP answers are not logged");
        return;
    }
    tracing::info!(xdp_sample = %crate::dnstap::XdpSample::one_in(every), "XDP answers sampled into dnstap");
    tokio::spawn(run(maps, tap, shutdown));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(v6: u32) -> TapRecord {
        let mut r = TapRecord {
            time_ns: 5_000_000_000,
            client: [0; 16],
            server: [0; 16],
            client_port: 40000u16.to_be_bytes(),
            server_port: 53u16.to_be_bytes(),
            v6,
            query_len: 20,
            response_len: 700,
            _pad: 0,
            query: [1; tap::MESSAGE_MAX],
            response: [2; tap::MESSAGE_MAX],
        };
        if v6 != 0 {
            r.client = "2001:db8::1".parse::<Ipv6Addr>().unwrap().octets();
            r.server = "2001:db8::53".parse::<Ipv6Addr>().unwrap().octets();
        } else {
            r.client[..4].copy_from_slice(&[198, 18, 0, 1]);
            r.server[..4].copy_from_slice(&[198, 18, 0, 2]);
        }
        r
    }

    #[test]
    fn a_record_becomes_a_udp_exchange_at_wall_time_with_its_messages_cut_to_the_copy() {
        let e = exchange(&sample(0), 1_700_000_000_000_000_000);
        assert_eq!(e.protocol, Protocol::Udp);
        assert_eq!(e.client, "198.18.0.1:40000".parse().unwrap());
        assert_eq!(e.server, Some("198.18.0.2:53".parse().unwrap()));
        assert_eq!(e.query_time, UNIX_EPOCH + Duration::from_nanos(1_700_000_005_000_000_000));
        assert_eq!(e.query, vec![1; 20]);
        let (t, response) = e.response.unwrap();
        assert_eq!(t, e.query_time);
        assert_eq!(response, vec![2; tap::MESSAGE_MAX], "a 700-octet response was cut to what the program copied");

        let e = exchange(&sample(1), 0);
        assert_eq!(e.client, "[2001:db8::1]:40000".parse().unwrap());
        assert_eq!(e.server, Some("[2001:db8::53]:53".parse().unwrap()));
    }

    #[test]
    fn ring_items_shorter_than_a_record_are_not_read() {
        let r = sample(0);
        // SAFETY: viewing a plain-data struct as its bytes.
        let bytes = unsafe { std::slice::from_raw_parts((&raw const r).cast::<u8>(), size_of::<TapRecord>()) };
        assert_eq!(record(bytes), Some(r));
        assert_eq!(record(&bytes[..100]), None);
    }
}

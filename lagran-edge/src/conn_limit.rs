//! How many client connections the edge holds: `max_connections` in all
//! (HTTP and HTTPS together) and `max_connections_per_client` from one client
//! (an IPv4 address, an IPv6 /64 as the rate limiter counts them), so one
//! client cannot take every slot. A connection holds a [`ConnPermit`] for as
//! long as it lives; past either cap it is closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::rate_limit::client_key;

/// Why a connection was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` are open.
    Full,
    /// This client has `max_connections_per_client` open.
    ClientFull,
}

/// The edge's connection slots.
#[derive(Debug)]
pub struct ConnLimit {
    total: Arc<Semaphore>,
    per_client: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max_per_client: usize,
}

/// One connection's slots, given back when dropped.
#[derive(Debug)]
pub struct ConnPermit {
    _total: OwnedSemaphorePermit,
    client: IpAddr,
    per_client: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl ConnLimit {
    pub fn new(max_connections: usize, max_per_client: usize) -> ConnLimit {
        ConnLimit { total: Arc::new(Semaphore::new(max_connections)), per_client: Arc::default(), max_per_client }
    }

    /// A slot for a connection from `ip`, or why there is none.
    pub fn claim(&self, ip: IpAddr) -> Result<ConnPermit, Refusal> {
        let client = client_key(ip);
        let mut counts = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if counts.get(&client).is_some_and(|&n| n >= self.max_per_client) {
            return Err(Refusal::ClientFull);
        }
        let total = self.total.clone().try_acquire_owned().map_err(|_| Refusal::Full)?;
        *counts.entry(client).or_insert(0) += 1;
        Ok(ConnPermit { _total: total, client, per_client: self.per_client.clone() })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.per_client.lock().unwrap_or_else(|p| p.into_inner()).values().sum()
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut counts = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = counts.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_and_total_caps() {
        let limit = ConnLimit::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let (a1, _a2) = (limit.claim(a).unwrap(), limit.claim(a).unwrap());
        assert_eq!(limit.claim(a).unwrap_err(), Refusal::ClientFull, "the third from one client");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let _b = limit.claim(v6).unwrap();
        assert_eq!(limit.claim("192.0.2.9".parse().unwrap()).unwrap_err(), Refusal::Full, "three in all");
        drop(a1);
        let same_64: IpAddr = "2001:db8::2".parse().unwrap();
        let _c = limit.claim(same_64).expect("a freed slot serves another client");
        assert_eq!(limit.claim(a).unwrap_err(), Refusal::Full);
        assert_eq!(limit.open(), 3);
        assert_eq!(limit.per_client.lock().unwrap().len(), 2, "refused clients leave nothing behind");
        let limit = ConnLimit::new(10, 1);
        let _one = limit.claim(v6).unwrap();
        assert_eq!(limit.claim(same_64).unwrap_err(), Refusal::ClientFull, "an IPv6 client is its /64");
    }
}

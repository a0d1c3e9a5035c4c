//! Health checks: every `origin_health_secs`, each site with more than one
//! origin has each of them asked for its health path, so a dead origin is
//! passed over before a client meets it and a revived one takes its place again.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use hyper::http::uri::Scheme;
use tokio_util::sync::CancellationToken;

use super::Forward;
use crate::Edge;

pub async fn run(edge: Arc<Edge>, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        for site in edge.sites() {
            if site.origins.len() < 2 {
                continue;
            }
            let forward =
                Forward { host: &site.host, client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST), scheme: &Scheme::HTTP };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = site.origins.check(forward) => {}
            }
        }
    }
}

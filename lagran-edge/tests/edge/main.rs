//! Black-box tests of the edge over real sockets on 127.0.0.1: a small hyper origin,
//! the edge's own `server::run`/`run_tls` (or the `lagran-edge` binary: the restart
//! test), and a fake control plane for heartbeats and measurements.

mod agent;
mod cdn;
mod flow;
mod hit_path;
mod large;
mod limits;
mod measurements;
mod origins;
mod restart;
mod support;
mod tls;

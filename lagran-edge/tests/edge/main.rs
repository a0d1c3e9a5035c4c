//! Black-box tests of the edge over real sockets on 127.0.0.1: a small hyper origin,
//! the edge's own `server::run`/`run_tls`, and a fake control plane for heartbeats.

mod agent;
mod flow;
mod limits;
mod support;
mod tls;

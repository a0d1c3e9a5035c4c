//! The load runs of the edge comparison (`wrk`, `h2load`, each bounded in time
//! by `timeout`, pinned to the generator CPU), what their output says, and the
//! memory of a server's process tree.

use std::path::Path;
use std::process::Command;

use anyhow::Context as _;

use super::edge_peers::SITE;
use crate::util;

/// Clients of the cached-object runs (wrk: connections; h2load: connections,
/// each with `H2_STREAMS` streams at once).
const H1_CONNECTIONS: u32 = 64;
const H2_CONNECTIONS: u32 = 16;
const H2_STREAMS: u32 = 16;
const LARGE_CONNECTIONS: u32 = 8;
/// The fixed-rate run: `RATE_CONNECTIONS` connections, each sending one request
/// every `RATE_DELAY_MS` (wrk's `delay()`), about 2 000 requests/s in all.
pub(super) const RATE_CONNECTIONS: u32 = 20;
pub(super) const RATE_DELAY_MS: u32 = 10;
/// The miss storm: this many clients, one request each, all at once.
pub(super) const STORM_CLIENTS: u32 = 1_000;

#[derive(Clone, Copy)]
pub(super) struct Load<'a> {
    pub(super) dir: &'a Path,
    pub(super) cpu: u32,
    pub(super) seconds: u32,
}

/// What one `wrk` run printed.
#[derive(Debug, Default, Clone)]
pub(super) struct WrkRun {
    pub(super) rps: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    /// Non-2xx/3xx responses plus socket errors.
    pub(super) errors: u64,
}

/// What one `h2load` run printed.
#[derive(Debug, Default, Clone)]
pub(super) struct H2Run {
    pub(super) rps: f64,
    pub(super) succeeded: u64,
    pub(super) failed: u64,
}

impl Load<'_> {
    fn pinned(&self, tool: &str, bound_secs: u32) -> Command {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", &bound_secs.to_string(), "taskset", "-c", &self.cpu.to_string(), tool]);
        cmd
    }

    /// `wrk` against `url` with `connections`, optionally at a fixed rate.
    pub(super) fn wrk(&self, url: &str, connections: u32, fixed_rate: bool) -> anyhow::Result<(WrkRun, String)> {
        let mut cmd = self.pinned("wrk", self.seconds + 30);
        cmd.args(["-t1", &format!("-c{connections}"), &format!("-d{}s", self.seconds), "--latency"]);
        cmd.args(["-H", &format!("Host: {SITE}")]);
        if fixed_rate {
            let script = self.dir.join("fixed-rate.lua");
            std::fs::write(&script, format!("function delay()\n  return {RATE_DELAY_MS}\nend\n"))?;
            cmd.arg("-s").arg(script);
        }
        let out = util::output(cmd.arg(url))?;
        Ok((parse_wrk(&out).with_context(|| format!("wrk printed:\n{out}"))?, out))
    }

    pub(super) fn h1_small(&self, url: &str) -> anyhow::Result<(WrkRun, String)> {
        self.wrk(url, H1_CONNECTIONS, false)
    }

    pub(super) fn h1_large(&self, url: &str) -> anyhow::Result<(WrkRun, String)> {
        self.wrk(url, LARGE_CONNECTIONS, false)
    }

    pub(super) fn fixed_rate(&self, url: &str) -> anyhow::Result<(WrkRun, String)> {
        self.wrk(url, RATE_CONNECTIONS, true)
    }

    /// `wrk` over TLS to the listener on `port`, with `SITE` as SNI and Host:
    /// the URL names the site and a script makes wrk connect to loopback
    /// instead of resolving it (wrk takes its SNI from the URL's host).
    pub(super) fn h1_tls(&self, port: u16, path: &str) -> anyhow::Result<(WrkRun, String)> {
        let mut cmd = self.pinned("wrk", self.seconds + 30);
        cmd.args(["-t1", &format!("-c{H1_CONNECTIONS}"), &format!("-d{}s", self.seconds), "--latency"]);
        let script = self.dir.join("loopback.lua");
        std::fs::write(
            &script,
            "function wrk.resolve(host, service)\n  wrk.addrs = wrk.lookup(\"127.0.0.1\", service)\nend\n",
        )?;
        cmd.arg("-s").arg(script).arg(format!("https://{SITE}:{port}{path}"));
        let out = util::output(&mut cmd)?;
        Ok((parse_wrk(&out).with_context(|| format!("wrk printed:\n{out}"))?, out))
    }

    /// `h2load` over TLS (HTTP/2 by ALPN) to the listener on `port`, with
    /// `SITE` as SNI and authority, for `seconds`.
    pub(super) fn h2_tls(&self, port: u16, path: &str) -> anyhow::Result<(H2Run, String)> {
        let mut cmd = self.pinned("h2load", self.seconds + 30);
        cmd.args(["-t1", "-c", &H2_CONNECTIONS.to_string(), "-m", &H2_STREAMS.to_string()]);
        cmd.args(["-D", &self.seconds.to_string(), &format!("--connect-to=127.0.0.1:{port}")]);
        cmd.arg(format!("https://{SITE}:{port}{path}"));
        let out = util::output(&mut cmd)?;
        Ok((parse_h2load(&out).with_context(|| format!("h2load printed:\n{out}"))?, out))
    }

    /// `h2load` over h2c (prior knowledge) for `seconds`.
    pub(super) fn h2_small(&self, url: &str) -> anyhow::Result<(H2Run, String)> {
        let mut cmd = self.pinned("h2load", self.seconds + 30);
        cmd.args(["-t1", "-c", &H2_CONNECTIONS.to_string(), "-m", &H2_STREAMS.to_string()]);
        cmd.args(["-D", &self.seconds.to_string(), "-H", &format!(":authority: {SITE}"), url]);
        let out = util::output(&mut cmd)?;
        Ok((parse_h2load(&out).with_context(|| format!("h2load printed:\n{out}"))?, out))
    }

    /// `STORM_CLIENTS` HTTP/1.1 clients, one request each, all at once.
    pub(super) fn storm(&self, url: &str) -> anyhow::Result<(H2Run, String)> {
        let mut cmd = self.pinned("h2load", 60);
        let n = STORM_CLIENTS.to_string();
        cmd.args(["--h1", "-t1", "-n", &n, "-c", &n, "-H", &format!(":authority: {SITE}"), url]);
        let out = util::output(&mut cmd)?;
        Ok((parse_h2load(&out).with_context(|| format!("h2load printed:\n{out}"))?, out))
    }
}

pub(super) const RATE_TARGET: u32 = RATE_CONNECTIONS * 1000 / RATE_DELAY_MS;

fn parse_wrk(out: &str) -> anyhow::Result<WrkRun> {
    let mut run = WrkRun::default();
    for line in out.lines().map(str::trim) {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("Requests/sec:"), Some(v)) => run.rps = v.parse()?,
            (Some("50%"), Some(v)) => run.p50_ms = millis(v)?,
            (Some("99%"), Some(v)) => run.p99_ms = millis(v)?,
            _ => {}
        }
        if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses:") {
            run.errors += n.trim().parse::<u64>()?;
        }
        if let Some(errs) = line.strip_prefix("Socket errors:") {
            run.errors += errs.split(',').filter_map(|e| e.split_whitespace().last()?.parse::<u64>().ok()).sum::<u64>();
        }
    }
    anyhow::ensure!(run.rps > 0.0, "no Requests/sec line");
    Ok(run)
}

/// wrk's latency ("812.00us", "1.20ms", "2.01s") in milliseconds.
fn millis(v: &str) -> anyhow::Result<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e3)
    } else {
        anyhow::bail!("latency {v:?} has no unit")
    };
    Ok(num.parse::<f64>().with_context(|| format!("latency {v:?}"))? * scale)
}

fn parse_h2load(out: &str) -> anyhow::Result<H2Run> {
    let mut run = H2Run::default();
    for line in out.lines().map(str::trim) {
        // "finished in 10.00s, 51234.50 req/s, 60.12MB/s"
        if let Some(rest) = line.strip_prefix("finished in ") {
            let rps = rest.split(", ").nth(1).and_then(|r| r.strip_suffix(" req/s"));
            run.rps = rps.context("no req/s")?.parse()?;
        }
        // "requests: 100 total, 100 started, 100 done, 100 succeeded, 0 failed, 0 errored, 0 timeout"
        if let Some(rest) = line.strip_prefix("requests: ") {
            for part in rest.split(", ") {
                match part.split_once(' ') {
                    Some((n, "succeeded")) => run.succeeded = n.parse()?,
                    Some((n, "failed")) => run.failed = n.parse()?,
                    _ => {}
                }
            }
        }
    }
    Ok(run)
}

/// Resident memory of `pid` and its descendants, MiB (shared pages counted in
/// each process).
pub(super) fn tree_rss_mib(pid: u32) -> f64 {
    let mut pids = vec![pid];
    let mut i = 0;
    while i < pids.len() {
        let parent = pids[i];
        if let Ok(dir) = std::fs::read_dir("/proc") {
            for e in dir.flatten() {
                let Some(p) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
                if !pids.contains(&p) && ppid(p) == Some(parent) {
                    pids.push(p);
                }
            }
        }
        i += 1;
    }
    pids.iter().filter_map(|p| vm_rss_kib(*p)).sum::<u64>() as f64 / 1024.0
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: fields follow the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_wrk_output() {
        let out = "  Latency Distribution\n     50%  812.00us\n     75%    1.10ms\n     99%    2.50ms\n\
                   Non-2xx or 3xx responses: 3\nSocket errors: connect 0, read 2, write 0, timeout 1\n\
                   Requests/sec:  51234.56\nTransfer/sec:     60.00MB\n";
        let r = parse_wrk(out).unwrap();
        assert_eq!(r.rps, 51234.56);
        assert!((r.p50_ms - 0.812).abs() < 1e-9);
        assert_eq!(r.p99_ms, 2.5);
        assert_eq!(r.errors, 6);
    }

    #[test]
    fn reads_h2load_output() {
        let out = "finished in 10.00s, 51234.50 req/s, 60.12MB/s\n\
                   requests: 1000 total, 1000 started, 1000 done, 998 succeeded, 2 failed, 2 errored, 0 timeout\n";
        let r = parse_h2load(out).unwrap();
        assert_eq!(r.rps, 51234.5);
        assert_eq!((r.succeeded, r.failed), (998, 2));
    }
}

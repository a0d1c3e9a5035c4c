//! The fixed-rate latency of the edge comparison, measured in interleaved
//! rounds: every server is running, each gets an unmeasured warm-up run, then
//! each round runs every server once at the fixed rate, in an order rotated
//! from round to round (so that no server is always first or last). A server's
//! figures are the medians over the rounds, so one slow stretch of the machine
//! moves one round and not the result.

use std::fmt::Write as _;

use super::check_interrupted;
use super::edge_load::{Load, RATE_CONNECTIONS, RATE_DELAY_MS, RATE_TARGET, WrkRun};
use super::edge_peers::EdgeServer;

/// Longest run of a round, seconds. At about 2 000 requests/s, 5 s is 10 000
/// requests, the p99 read from the 100 slowest; what moves a p99 between runs
/// is the machine's slow stretches, which more and shorter interleaved rounds
/// spread over the servers better than fewer long ones.
const ROUND_SECONDS_MAX: u32 = 5;
/// The unmeasured run of each server before the rounds (new connections,
/// page faults and cold caches of the fixed-rate path land there).
const WARM_UP_SECONDS: u32 = 2;

/// The fixed-rate runs: `runs[round][i]` is the run of `servers[i]`.
pub(super) struct Rounds {
    pub(super) servers: Vec<EdgeServer>,
    pub(super) runs: Vec<Vec<WrkRun>>,
    /// Seconds of each measured run.
    pub(super) seconds: u32,
}

/// One server's fixed-rate figures over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Summary {
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) p99_min_ms: f64,
    pub(super) p99_max_ms: f64,
    pub(super) rps: f64,
    pub(super) errors: u64,
}

/// Warms every server up, then runs `rounds` rounds against `targets` (each
/// server with the URL of its cached small object over HTTP/1.1).
pub(super) fn measure(targets: &[(EdgeServer, String)], load: &Load, rounds: u32) -> anyhow::Result<Rounds> {
    let warm = Load { seconds: WARM_UP_SECONDS, ..*load };
    for (server, url) in targets {
        check_interrupted()?;
        let (_, out) = warm.fixed_rate(url)?;
        eprintln!("--- {} rate warm-up (not measured)\n{}", server.label(), out.trim_end());
    }
    let seconds = load.seconds.min(ROUND_SECONDS_MAX);
    let timed = Load { seconds, ..*load };
    let mut runs = Vec::new();
    for round in 0..rounds as usize {
        let mut this = vec![WrkRun::default(); targets.len()];
        for i in order(round, targets.len()) {
            check_interrupted()?;
            let (server, url) = &targets[i];
            let (run, out) = timed.fixed_rate(url)?;
            eprintln!("--- {} rate, round {} of {rounds}\n{}", server.label(), round + 1, out.trim_end());
            this[i] = run;
        }
        runs.push(this);
    }
    Ok(Rounds { servers: targets.iter().map(|(s, _)| *s).collect(), runs, seconds })
}

/// The servers' indices in round `round`: `0..n` rotated left by `round`.
fn order(round: usize, n: usize) -> impl Iterator<Item = usize> {
    (0..n).map(move |k| (round + k) % n)
}

/// The median of `values` (the mean of the middle two for an even count);
/// 0 for none.
pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Rounds {
    fn column(&self, i: usize, get: fn(&WrkRun) -> f64) -> Vec<f64> {
        self.runs.iter().map(|r| get(&r[i])).collect()
    }

    /// The figures of `servers[i]`.
    pub(super) fn summary(&self, i: usize) -> Summary {
        let p99 = self.column(i, |r| r.p99_ms);
        Summary {
            p50_ms: median(&self.column(i, |r| r.p50_ms)),
            p99_ms: median(&p99),
            p99_min_ms: p99.iter().copied().fold(f64::INFINITY, f64::min),
            p99_max_ms: p99.iter().copied().fold(0.0, f64::max),
            rps: median(&self.column(i, |r| r.rps)),
            errors: self.runs.iter().map(|r| r[i].errors).sum(),
        }
    }

    /// Per round, the p99 of `servers[a]` over that of `servers[b]`.
    fn p99_ratios(&self, a: usize, b: usize) -> Vec<f64> {
        self.runs.iter().map(|r| if r[b].p99_ms > 0.0 { r[a].p99_ms / r[b].p99_ms } else { f64::INFINITY }).collect()
    }

    /// The notes under the table: how the rounds ran, and per round the p99
    /// of the first server (lagran-edge) over the second's (nginx).
    pub(super) fn notes(&self) -> String {
        let names: Vec<&str> = self.servers.iter().map(|s| s.label()).collect();
        let ratios = self.p99_ratios(0, 1);
        let at_most = ratios.iter().filter(|r| **r <= 1.0).count();
        let listed: Vec<String> = ratios.iter().map(|r| format!("{r:.2}×")).collect();
        let mut md = String::new();
        let _ = writeln!(
            md,
            "- Latency at a fixed rate: {RATE_TARGET} requests/s offered by {RATE_CONNECTIONS} wrk connections, each \
             waiting {RATE_DELAY_MS} ms between requests, to the three servers running at once; after an unmeasured {WARM_UP_SECONDS} s run \
             of each, {n} rounds, each running every server once for {s} s in an order rotated by one from round \
             to round (round 1: {order}). The latency rows are the medians over the rounds (the p99 row's spread \
             is the lowest and highest round), the ratios those of the medians; the rate row is the median too.",
            n = self.runs.len(),
            s = self.seconds,
            order = names.join(", "),
        );
        let _ = writeln!(
            md,
            "- {} p99 / {} p99, round by round: {}: {} p99 ≤ {}'s in {at_most} of {} rounds.",
            names[0],
            names[1],
            listed.join(", "),
            names[0],
            names[1],
            ratios.len(),
        );
        md.push_str(
            "- wrk with `delay()` is closed-loop: a connection sends its next request only after the answer and \
             its delay, so a stall of the server delays the requests that should have been sent meanwhile \
             instead of timing them (coordinated omission), and the high percentiles read low. No open-loop \
             generator (wrk2, oha, vegeta) is packaged for Debian 12; `hey -q` paces each worker the same \
             closed-loop way. The three servers are measured the same way, but one with rare long stalls reads \
             better than it is.\n",
        );
        md
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(p50_ms: f64, p99_ms: f64) -> WrkRun {
        WrkRun { rps: 2000.0, p50_ms, p99_ms, errors: 1 }
    }

    #[test]
    fn median_of_odd_even_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&[0.7]), 0.7);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn every_round_runs_each_server_once_and_the_first_rotates() {
        let rounds: Vec<Vec<usize>> = (0..7).map(|r| order(r, 3).collect()).collect();
        for r in &rounds {
            let mut sorted = r.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2]);
        }
        assert_eq!(rounds[0], [0, 1, 2]);
        assert_eq!(rounds[1], [1, 2, 0]);
        assert_eq!(rounds[2], [2, 0, 1]);
        for s in 0..3 {
            assert!((2..=3).contains(&rounds.iter().filter(|r| r[0] == s).count()));
            assert!((2..=3).contains(&rounds.iter().filter(|r| r[2] == s).count()));
        }
    }

    fn three_rounds() -> Rounds {
        Rounds {
            servers: vec![EdgeServer::Lagran, EdgeServer::Nginx, EdgeServer::Varnish],
            runs: vec![
                vec![run(0.2, 0.5), run(0.1, 1.0), run(0.3, 0.9)],
                vec![run(0.3, 2.0), run(0.2, 0.8), run(0.3, 0.9)],
                vec![run(0.1, 0.6), run(0.2, 0.6), run(0.3, 0.9)],
            ],
            seconds: 5,
        }
    }

    #[test]
    fn summary_takes_medians_and_the_p99_spread() {
        let s = three_rounds().summary(0);
        assert_eq!((s.p50_ms, s.p99_ms), (0.2, 0.6));
        assert_eq!((s.p99_min_ms, s.p99_max_ms), (0.5, 2.0));
        assert_eq!((s.rps, s.errors), (2000.0, 3));
    }

    #[test]
    fn notes_count_the_rounds_the_edge_was_not_slower() {
        let r = three_rounds();
        assert_eq!(r.p99_ratios(0, 1), [0.5, 2.5, 1.0]);
        let notes = r.notes();
        assert!(notes.contains("0.50×, 2.50×, 1.00×"), "{notes}");
        assert!(notes.contains("in 2 of 3 rounds"), "{notes}");
        assert!(notes.contains("3 rounds, each running every server once for 5 s"), "{notes}");
    }
}

//! The running kernel's tick length, for the XDP program's RRL clock.
//!
//! The program times rate-limiting accounts by the tick counter
//! (`bpf_jiffies64`), which the verifier turns into one load on 64-bit JITs,
//! where the clock helpers are calls: the coarse clock helper was about 15 ns
//! of the RRL path's 25 ns (docs/bench.md). A tick lasts `TICK_NSEC` =
//! (10⁹ + HZ/2) / HZ nanoseconds, and HZ is a build option of the kernel that
//! no system call reports. It is found, in order:
//!
//! 1. `CONFIG_HZ` in `/boot/config-<release>` or `/proc/config.gz`, as libbpf
//!    resolves `__kconfig` externs;
//! 2. else measured from `/proc/timer_list` (the tick counter and
//!    CLOCK_MONOTONIC, read twice [`SAMPLE_GAP`] apart), and taken only when
//!    it is within [`TOLERANCE`] of a HZ the common architectures offer
//!    ([`MEASURED_HZ`]);
//! 3. else unknown: the program keeps reading a clock helper, as before.
//!
//! The answer is computed once per process.

use std::io::Read as _;
use std::sync::OnceLock;
use std::time::Duration;

/// HZ values x86 and arm64 kernels can be built with: the only ones a
/// measurement is rounded to (two of them are 20 % apart; a measurement
/// over [`SAMPLE_GAP`] is good to a tick or two).
pub const MEASURED_HZ: [u64; 4] = [100, 250, 300, 1000];
/// Between the two reads of `/proc/timer_list`.
pub const SAMPLE_GAP: Duration = Duration::from_millis(100);
/// Largest relative distance of a measured HZ from the one it is taken for.
pub const TOLERANCE: f64 = 0.12;

/// Where the tick length came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `CONFIG_HZ` of the kernel's build configuration.
    Config,
    /// Measured from `/proc/timer_list`.
    Measured,
}

/// The kernel's tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tick {
    pub hz: u64,
    pub source: Source,
}

impl Tick {
    /// Nanoseconds per tick, as the kernel computes `TICK_NSEC`.
    pub fn ns(&self) -> u64 {
        tick_nsec(self.hz)
    }
}

/// `TICK_NSEC` for `hz`.
pub fn tick_nsec(hz: u64) -> u64 {
    (1_000_000_000 + hz / 2) / hz
}

/// The running kernel's tick, found once per process (see the module doc);
/// `None` when neither source tells it.
pub fn kernel_tick() -> Option<Tick> {
    static TICK: OnceLock<Option<Tick>> = OnceLock::new();
    *TICK.get_or_init(|| {
        let tick = from_config().or_else(measure);
        match tick {
            Some(t) => tracing::debug!(hz = t.hz, source = ?t.source, "kernel tick"),
            None => tracing::info!(
                "the kernel's HZ is unknown (no kernel config in /boot or /proc/config.gz, \
                 /proc/timer_list unreadable or inconclusive): XDP rate limiting reads the clock helper"
            ),
        }
        tick
    })
}

fn from_config() -> Option<Tick> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let boot = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok();
    let text = boot.or_else(|| {
        let gz = std::fs::read("/proc/config.gz").ok()?;
        let mut text = String::new();
        flate2::read::GzDecoder::new(&gz[..]).read_to_string(&mut text).ok()?;
        Some(text)
    })?;
    hz_of_config(&text).map(|hz| Tick { hz, source: Source::Config })
}

fn measure() -> Option<Tick> {
    let first = timer_list_sample(&std::fs::read_to_string("/proc/timer_list").ok()?)?;
    std::thread::sleep(SAMPLE_GAP);
    let second = timer_list_sample(&std::fs::read_to_string("/proc/timer_list").ok()?)?;
    hz_of_samples(first, second).map(|hz| Tick { hz, source: Source::Measured })
}

/// `CONFIG_HZ=N` of a kernel configuration.
pub fn hz_of_config(text: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix("CONFIG_HZ=")).and_then(|v| v.trim().parse().ok()).filter(|&hz| hz > 0)
}

/// (tick counter, CLOCK_MONOTONIC ns) of one read of `/proc/timer_list`:
/// its `now at N nsecs` header and the first `jiffies: N` line.
pub fn timer_list_sample(text: &str) -> Option<(u64, u64)> {
    let now = text
        .lines()
        .find_map(|l| l.strip_prefix("now at ")?.strip_suffix(" nsecs"))
        .and_then(|v| v.trim().parse().ok())?;
    let jiffies = text.lines().find_map(|l| l.trim().strip_prefix("jiffies:")).and_then(|v| v.trim().parse().ok())?;
    Some((jiffies, now))
}

/// The HZ two samples show, rounded to one of [`MEASURED_HZ`] within [`TOLERANCE`].
pub fn hz_of_samples((j0, t0): (u64, u64), (j1, t1): (u64, u64)) -> Option<u64> {
    let (ticks, ns) = (j1.checked_sub(j0)?, t1.checked_sub(t0)?);
    if ns < 10_000_000 {
        return None;
    }
    let measured = ticks as f64 * 1e9 / ns as f64;
    let near =
        MEASURED_HZ.into_iter().min_by(|a, b| (measured - *a as f64).abs().total_cmp(&(measured - *b as f64).abs()))?;
    ((measured / near as f64 - 1.0).abs() <= TOLERANCE).then_some(near)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_nsec_is_the_kernels() {
        assert_eq!(tick_nsec(250), 4_000_000);
        assert_eq!(tick_nsec(300), 3_333_333);
        assert_eq!(tick_nsec(1000), 1_000_000);
        assert_eq!(tick_nsec(1024), 976_563);
    }

    #[test]
    fn config_hz_is_read_from_a_kernel_config() {
        let text = "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\nCONFIG_SCHED_HRTICK=y\n";
        assert_eq!(hz_of_config(text), Some(250));
        assert_eq!(hz_of_config("CONFIG_HZ_1000=y\n"), None, "the choice alone does not give the number");
        assert_eq!(hz_of_config("CONFIG_HZ=0\n"), None);
        assert_eq!(hz_of_config("CONFIG_HZ=abc\n"), None);
    }

    #[test]
    fn a_timer_list_gives_the_tick_counter_and_the_clock() {
        let text = "Timer List Version: v0.10\nHRTIMER_MAX_CLOCK_BASES: 8\nnow at 2806166112140 nsecs\n\n\
                    cpu: 0\n  clock 0:\n   .resolution: 1 nsecs\n  .idle_jiffies   : 4294925291\n\
                    jiffies: 4295593779\n\njiffies: 4295593780\n";
        assert_eq!(timer_list_sample(text), Some((4_295_593_779, 2_806_166_112_140)));
        assert_eq!(timer_list_sample("now at 12 nsecs\n"), None);
        assert_eq!(timer_list_sample("jiffies: 12\n"), None);
    }

    #[test]
    fn measured_samples_round_to_a_common_hz_or_to_nothing() {
        let at = |j: u64, ms: u64| (4_294_892_296 + j, 5_000_000_000 + ms * 1_000_000);
        // 100 ms: 25 ticks at 250 Hz, 30 at 300, give or take a tick.
        assert_eq!(hz_of_samples(at(0, 0), at(25, 100)), Some(250));
        assert_eq!(hz_of_samples(at(0, 0), at(27, 100)), Some(250));
        assert_eq!(hz_of_samples(at(0, 0), at(30, 100)), Some(300));
        assert_eq!(hz_of_samples(at(0, 0), at(29, 101)), Some(300));
        assert_eq!(hz_of_samples(at(0, 0), at(10, 100)), Some(100));
        assert_eq!(hz_of_samples(at(0, 0), at(101, 100)), Some(1000));
        // Between choices, or too short a gap, or going backwards: unknown.
        assert_eq!(hz_of_samples(at(0, 0), at(14, 100)), None, "140 Hz is no common choice");
        assert_eq!(hz_of_samples(at(0, 0), at(60, 100)), None, "600 Hz is no common choice");
        assert_eq!(hz_of_samples(at(0, 0), at(1, 5)), None);
        assert_eq!(hz_of_samples(at(5, 100), at(0, 200)), None);
    }

    #[test]
    fn this_kernels_tick_is_found_and_matches_its_clock() {
        // Wherever the tick is known, the tick counter advances at its rate.
        let Some(tick) = kernel_tick() else { return };
        let (Some(a), Some(b)) =
            (std::fs::read_to_string("/proc/timer_list").ok().and_then(|t| timer_list_sample(&t)), {
                std::thread::sleep(Duration::from_millis(300));
                std::fs::read_to_string("/proc/timer_list").ok().and_then(|t| timer_list_sample(&t))
            })
        else {
            return;
        };
        let measured = (b.0 - a.0) as f64 * 1e9 / (b.1 - a.1) as f64;
        assert!(
            (measured / tick.hz as f64 - 1.0).abs() < 0.1,
            "HZ {} ({:?}), measured {measured:.1}",
            tick.hz,
            tick.source
        );
    }
}

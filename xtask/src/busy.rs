//! How busy one CPU was over a window: the bench's CPU per answered query
//! (the goal: the XDP path uses ≥ 5× less CPU per answered query than the
//! userspace path), read on the server's core while a load run holds a
//! steady rate.
//!
//! Busy time is the window less the CPU's idle time. The idle time comes from
//! cpuidle's per-state residency (`/sys/devices/system/cpu/cpuN/cpuidle/state*/time`,
//! microseconds) where the kernel has a cpuidle driver (`haltpoll` on these
//! guests), else from `/proc/stat`'s idle and iowait columns (USER_HZ ticks,
//! 10 ms: coarse over a 2 s window, so the residency is preferred).

use std::time::{Duration, Instant};

/// A CPU's cumulative idle time, and when it was read.
#[derive(Clone, Copy, Debug)]
pub struct Mark {
    at: Instant,
    idle_ns: u64,
}

/// Busy time over a window and the window's length.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Busy {
    pub busy: Duration,
    pub window: Duration,
}

impl Busy {
    /// The share of the window the CPU was busy, 0–1.
    pub fn share(&self) -> f64 {
        self.busy.as_secs_f64() / self.window.as_secs_f64().max(1e-9)
    }
}

/// Reads `cpu`'s idle time now (`None`: neither source is readable).
pub fn mark(cpu: u32) -> Option<Mark> {
    let idle_ns = cpuidle_ns(cpu).or_else(|| proc_stat_idle_ns(cpu))?;
    Some(Mark { at: Instant::now(), idle_ns })
}

/// What happened on the CPU between two marks.
pub fn between(a: Mark, b: Mark) -> Busy {
    let window = b.at.saturating_duration_since(a.at);
    let idle = Duration::from_nanos(b.idle_ns.saturating_sub(a.idle_ns));
    Busy { busy: window.saturating_sub(idle), window }
}

/// The busy time of `cpu` from `skip` after now for `length` (the steady part
/// of a load run that starts now), on a thread of its own.
pub fn watch(cpu: u32, skip: Duration, length: Duration) -> std::thread::JoinHandle<Option<Busy>> {
    std::thread::spawn(move || {
        std::thread::sleep(skip);
        let a = mark(cpu)?;
        std::thread::sleep(length);
        Some(between(a, mark(cpu)?))
    })
}

/// Sum of cpuidle's state residencies (µs) as ns.
fn cpuidle_ns(cpu: u32) -> Option<u64> {
    let dir = std::fs::read_dir(format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle")).ok()?;
    let mut total = 0u64;
    let mut states = 0;
    for e in dir.flatten() {
        if !e.file_name().to_string_lossy().starts_with("state") {
            continue;
        }
        let t = std::fs::read_to_string(e.path().join("time")).ok()?;
        total += t.trim().parse::<u64>().ok()?;
        states += 1;
    }
    (states > 0).then_some(total * 1_000)
}

/// `/proc/stat`'s idle + iowait of `cpu`, as ns.
fn proc_stat_idle_ns(cpu: u32) -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    parse_proc_stat_idle(&stat, cpu)
}

fn parse_proc_stat_idle(stat: &str, cpu: u32) -> Option<u64> {
    let name = format!("cpu{cpu}");
    let line = stat.lines().find(|l| l.split_whitespace().next() == Some(name.as_str()))?;
    // user nice system idle iowait irq softirq steal guest guest_nice
    let v: Vec<u64> = line.split_whitespace().skip(1).map(str::parse).collect::<Result<_, _>>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some((v.get(3)? + v.get(4)?) * 1_000_000_000 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_idle_is_the_idle_and_iowait_columns() {
        let stat = "cpu  10 0 5 900 3 0 1 0 0 0\ncpu0 5 0 2 450 1 0 0 0 0 0\ncpu1 5 0 3 450 2 0 1 0 0 0\n";
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
        assert_eq!(parse_proc_stat_idle(stat, 1), Some(452 * 1_000_000_000 / hz));
        assert_eq!(parse_proc_stat_idle(stat, 2), None, "no such CPU");
    }

    #[test]
    fn a_window_is_busy_for_what_was_not_idle() {
        let at = Instant::now();
        let a = Mark { at, idle_ns: 1_000 };
        let b = Mark { at: at + Duration::from_millis(100), idle_ns: 1_000 + 75_000_000 };
        let busy = between(a, b);
        assert_eq!(busy.busy, Duration::from_millis(25));
        assert!((busy.share() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn this_cpu_can_be_read() {
        assert!(mark(0).is_some(), "cpu0's idle time is readable on Linux");
    }
}

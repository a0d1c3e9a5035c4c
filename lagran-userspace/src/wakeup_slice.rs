//! A short scheduler slice for the threads that answer DNS, so that a woken
//! responder runs at once instead of waiting for another thread's turn to end.
//!
//! Linux's fair scheduler (EEVDF, 6.6+) protects a running thread until its
//! slice is used (`base_slice` × (1 + log₂ CPUs): 1.5 ms on two CPUs), whatever
//! its `nice`. A query landing while the API, the store or a build holds the
//! daemon's core waits that long: on a one-core NS host under a fleet's
//! heartbeats, the userspace responder's p99 went from a few hundred
//! microseconds to milliseconds. Since 6.12 a thread may ask for its own slice
//! (`sched_attr.sched_runtime` with `SCHED_OTHER`, 0.1–100 ms), and a woken
//! thread with a shorter slice than the running one cancels that protection
//! (the `PREEMPT_SHORT` feature): the responder then runs as soon as it is
//! woken, and each of its turns is short, so it does not take more of the CPU
//! than its `nice` gives it. Older kernels ignore the field: nothing changes
//! there.

/// The slice asked for a responder thread: the shortest the kernel grants.
pub const RESPONDER_SLICE_NS: u64 = 100_000;

/// `struct sched_attr` of sched_setattr(2), `SCHED_ATTR_SIZE_VER1`.
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
    sched_util_min: u32,
    sched_util_max: u32,
}

/// Asks for a `slice_ns` slice for the calling thread, keeping its policy
/// (`SCHED_OTHER`) and its `nice`. Errors are the kernel's (none expected:
/// no privilege is needed to shorten one's own slice).
pub fn set_own_slice(slice_ns: u64) -> std::io::Result<()> {
    // SAFETY: gettid(2) and getpriority(2) on this thread; no memory is passed.
    let (tid, nice) = unsafe {
        let tid = libc::gettid();
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        if nice == -1 && *libc::__errno_location() != 0 {
            return Err(std::io::Error::last_os_error());
        }
        (tid, nice)
    };
    let attr = SchedAttr {
        size: size_of::<SchedAttr>() as u32,
        sched_policy: libc::SCHED_OTHER as u32,
        sched_nice: nice,
        sched_runtime: slice_ns,
        ..SchedAttr::default()
    };
    // SAFETY: sched_setattr(2) reads `size` octets of `attr`, a live value of
    // that size, and writes nothing.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, tid, &attr as *const SchedAttr, 0u32) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's slice as the kernel reports it (`sched_runtime`;
/// 0 on kernels without custom slices), for tests and diagnostics.
pub fn own_slice() -> std::io::Result<u64> {
    let mut attr = SchedAttr::default();
    // SAFETY: sched_getattr(2) writes at most `size` octets into `attr`, a
    // live value of that size.
    let rc = unsafe {
        libc::syscall(libc::SYS_sched_getattr, 0, &mut attr as *mut SchedAttr, size_of::<SchedAttr>() as u32, 0u32)
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(attr.sched_runtime)
}

/// [`set_own_slice`] with [`RESPONDER_SLICE_NS`]; a refusal is logged once
/// per thread at debug (the responder works the same, only less promptly
/// under contention).
pub fn prefer_wakeups() {
    if let Err(e) = set_own_slice(RESPONDER_SLICE_NS) {
        tracing::debug!(error = %e, "could not shorten the responder thread's scheduler slice");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (major, minor) of the running kernel.
    fn kernel_version() -> (u32, u32) {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").expect("reading the kernel release");
        let mut parts = release.trim().split(|c: char| !c.is_ascii_digit()).map(|p| p.parse().unwrap_or(0));
        (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
    }

    #[test]
    fn a_thread_gets_the_slice_it_asks_for_and_keeps_its_nice() {
        std::thread::spawn(|| {
            // SAFETY: getpriority(2) on this thread.
            let before = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            set_own_slice(RESPONDER_SLICE_NS).expect("sched_setattr with SCHED_OTHER needs no privilege");
            // SAFETY: as above.
            let after = unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) };
            assert_eq!(before, after, "asking for a slice must not change the thread's nice");
            let got = own_slice().expect("sched_getattr on this thread");
            if kernel_version() >= (6, 12) {
                assert_eq!(got, RESPONDER_SLICE_NS, "Linux 6.12+ grants a custom slice to SCHED_OTHER threads");
            }
        })
        .join()
        .unwrap();
    }
}

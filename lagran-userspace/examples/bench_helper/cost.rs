//! What a piece of work costs, measured so that a busy machine does not skew
//! it: the calling thread's CPU time (not wall time) and the heap allocations
//! made (a counting global allocator; one relaxed atomic add per allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting allocations (realloc counts as one).
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// The cost of one piece of work.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub cpu_ms: f64,
    pub allocations: u64,
}

/// Runs `f`, returning its result and what it cost this thread.
pub fn measure<T>(f: impl FnOnce() -> T) -> (T, Cost) {
    let (cpu, allocs) = (thread_cpu_ms(), ALLOCATIONS.load(Ordering::Relaxed));
    let out = f();
    let cost = Cost { cpu_ms: thread_cpu_ms() - cpu, allocations: ALLOCATIONS.load(Ordering::Relaxed) - allocs };
    (out, cost)
}

/// The median CPU time and allocation count of several runs.
pub fn median(costs: &[Cost]) -> Cost {
    let mut cpu: Vec<f64> = costs.iter().map(|c| c.cpu_ms).collect();
    let mut allocs: Vec<u64> = costs.iter().map(|c| c.allocations).collect();
    cpu.sort_by(f64::total_cmp);
    allocs.sort_unstable();
    Cost {
        cpu_ms: cpu.get(cpu.len() / 2).copied().unwrap_or(0.0),
        allocations: allocs.get(allocs.len() / 2).copied().unwrap_or(0),
    }
}

/// `RESULT <label>_cpu_ms` and `RESULT <label>_allocs` lines.
pub fn report(label: &str, c: Cost) {
    crate::result(&format!("{label}_cpu_ms"), format!("{:.1}", c.cpu_ms));
    crate::result(&format!("{label}_allocs"), c.allocations);
}

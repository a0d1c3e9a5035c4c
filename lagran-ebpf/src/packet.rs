//! Bounds-checked access to the frame. Every read or write of packet memory goes
//! through one check, which compares the end of the access with `data_end` — the
//! comparison the verifier needs to see before the access.

use lagran_common::counters::Counter;

/// Largest frame offset an access may start at; larger datagrams are passed
/// (`ipv4::parse` checks the total length first), so no offset in a frame we
/// answer is ever masked.
pub const MAX_OFF: usize = 0x3fff;

/// `off` with a constant upper bound the verifier can see. Verifiers before 6.x
/// mark a packet range as checked only when the variable part of the pointer is
/// at most 64 KiB, and they do not carry a bound checked on one register over to
/// a copy of it: the mask on the very register added to `data` does both.
#[inline(always)]
pub fn bound(off: usize) -> usize {
    off & MAX_OFF
}

/// The frame as the program sees it: `[data, end)`.
#[derive(Clone, Copy)]
pub struct Frame {
    pub data: usize,
    pub end: usize,
}

impl Frame {
    #[inline(always)]
    pub fn new(ctx: &aya_ebpf::programs::XdpContext) -> Self {
        Frame { data: ctx.data(), end: ctx.data_end() }
    }

    /// The same frame, with `data` and `data_end` read again from the context.
    ///
    /// For the verifier: a packet pointer carries the range already checked
    /// through it, and a state with a wider range does not cover one with a
    /// narrower range. After a loop that reads a variable number of bytes, each
    /// exit would be verified on its own; fresh pointers make the exits equal.
    /// The reads are volatile so the compiler keeps them.
    #[inline(always)]
    pub fn reload(ctx: &aya_ebpf::programs::XdpContext) -> Self {
        // SAFETY: `ctx.ctx` is the program's context pointer.
        unsafe {
            let md = ctx.ctx;
            let data = core::ptr::read_volatile(&(*md).data) as usize;
            let end = core::ptr::read_volatile(&(*md).data_end) as usize;
            Frame { data, end }
        }
    }

    /// Length of the frame in bytes.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.end - self.data
    }

    /// The address of `n` bytes at `off`, if they are inside the frame (`n` is a
    /// constant once inlined).
    ///
    /// One byte is checked as the two bytes ending at it (`off` ≥ 1 at every
    /// call: the headers come first): LLVM turns `p + 1 > end` into
    /// `p >= end`, from which verifiers before 6.x learn no range at all.
    #[inline(always)]
    fn check(&self, off: usize, n: usize) -> Option<usize> {
        if n == 1 {
            let b = self.data + bound(off - 1);
            if b + 2 > self.end {
                return None;
            }
            return Some(b + 1);
        }
        let p = self.data + bound(off);
        if p + n > self.end {
            return None;
        }
        Some(p)
    }

    /// The address of `N` bytes at `off`, if they are inside the frame.
    #[inline(always)]
    pub fn at<const N: usize>(&self, off: usize) -> Result<usize, Counter> {
        self.check(off, N).ok_or(Counter::TooShort)
    }

    /// The `N` bytes at `off`, checked once: fields at constant offsets inside
    /// them are read and written without a check each.
    #[inline(always)]
    pub fn window<const N: usize>(&self, off: usize) -> Result<Window<N>, Counter> {
        Ok(Window { p: self.at::<N>(off)? })
    }

    /// Reads `N` bytes at `off`.
    #[inline(always)]
    pub fn bytes<const N: usize>(&self, off: usize) -> Result<[u8; N], Counter> {
        let p = self.at::<N>(off)?;
        // SAFETY: `at` checked `[p, p + N)` against the frame end.
        Ok(unsafe { core::ptr::read_unaligned(p as *const [u8; N]) })
    }

    /// Reads an integer of type `T` at `off` in one load, in the machine's byte
    /// order (little-endian: `from_be` turns a network-order field into a value).
    /// The build allows misaligned packet access (see xtask's `build_ebpf`).
    #[inline(always)]
    pub fn load<T: Copy>(&self, off: usize) -> Result<T, Counter> {
        let p = self.check(off, size_of::<T>()).ok_or(Counter::TooShort)?;
        // SAFETY: checked against the frame end just above.
        Ok(unsafe { core::ptr::read_unaligned(p as *const T) })
    }

    /// Stores an integer of type `T` at `off` in one store (machine byte order).
    #[inline(always)]
    pub fn store<T: Copy>(&self, off: usize, v: T) -> Result<(), Counter> {
        let p = self.check(off, size_of::<T>()).ok_or(Counter::Malformed)?;
        // SAFETY: checked against the frame end just above.
        unsafe { core::ptr::write_unaligned(p as *mut T, v) };
        Ok(())
    }

    #[inline(always)]
    pub fn u8(&self, off: usize) -> Result<u8, Counter> {
        Ok(self.bytes::<1>(off)?[0])
    }

    /// Reads a `#[repr(C)]` header at `off`.
    #[inline(always)]
    pub fn header<T: Copy>(&self, off: usize) -> Result<T, Counter> {
        self.load(off)
    }

    /// Writes `bytes` at `off`.
    #[inline(always)]
    pub fn write<const N: usize>(&self, off: usize, bytes: [u8; N]) -> Result<(), Counter> {
        let p = self.check(off, N).ok_or(Counter::Malformed)?;
        // SAFETY: checked against the frame end just above.
        unsafe { core::ptr::write_unaligned(p as *mut [u8; N], bytes) };
        Ok(())
    }
}

/// `N` bytes of the frame whose end was checked against `data_end` once
/// ([`Frame::window`]). An access at a constant offset `AT` is proven inside the
/// window when the program is compiled, and the verifier sees it inside the
/// range that one check gave the window's pointer: a header's fields cost one
/// comparison, not one each.
#[derive(Clone, Copy)]
pub struct Window<const N: usize> {
    p: usize,
}

impl<const N: usize> Window<N> {
    /// Reads a `T` at `AT` in one load (machine byte order).
    #[inline(always)]
    pub fn load<T: Copy, const AT: usize>(&self) -> T {
        const { assert!(AT + size_of::<T>() <= N) };
        // SAFETY: `[p, p + N)` was checked against the frame end, and the
        // access lies inside it (asserted above).
        unsafe { core::ptr::read_unaligned((self.p + AT) as *const T) }
    }

    /// Stores a `T` at `AT` in one store (machine byte order).
    #[inline(always)]
    pub fn store<T: Copy, const AT: usize>(&self, v: T) {
        const { assert!(AT + size_of::<T>() <= N) };
        // SAFETY: as in `load`.
        unsafe { core::ptr::write_unaligned((self.p + AT) as *mut T, v) }
    }
}

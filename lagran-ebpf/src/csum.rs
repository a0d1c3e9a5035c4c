//! One's-complement sums (RFC 1071) for the IPv4 header and UDP checksums.
//!
//! The UDP checksum of a response is assembled from parts we already know
//! (pseudo-header, headers we write, the name bytes summed while parsing them,
//! the records we append), so the packet is never walked a second time. Bytes
//! are added at their parity in the message: a byte at an even offset is the high
//! half of a 16-bit word.

#[derive(Clone, Copy)]
pub struct Sum(u32);

impl Sum {
    #[inline(always)]
    pub fn new() -> Self {
        Sum(0)
    }

    /// Adds a big-endian 16-bit word at an even offset.
    #[inline(always)]
    pub fn word(&mut self, w: u16) {
        self.0 += w as u32;
    }

    /// Adds a byte sitting at offset `pos` (only its parity matters). Branch-free,
    /// so the verifier walks one path.
    #[inline(always)]
    pub fn byte_at(&mut self, b: u8, pos: usize) {
        let shift = (((pos as u32) & 1) ^ 1) << 3;
        self.0 += (b as u32) << shift;
    }

    #[inline(always)]
    pub fn add(&mut self, other: u32) {
        self.0 += other;
    }

    /// The unfolded sum (safe to add to another sum: < 2^24 for our sizes).
    #[inline(always)]
    pub fn value(&self) -> u32 {
        self.0
    }

    /// The folded, complemented checksum.
    #[inline(always)]
    pub fn finish(&self) -> u16 {
        let mut s = self.0;
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        !(s as u16)
    }
}

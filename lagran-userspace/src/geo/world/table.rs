//! Sorted, non-overlapping inclusive address ranges per family, each naming a
//! value by index: the shape the MaxMind and ASN readers return and the merge
//! walks.

/// Ranges of both families over one list of values.
#[derive(Clone, Debug, PartialEq)]
pub struct RangeTable<T> {
    /// IPv4 ranges (addresses below 2^32), sorted, non-overlapping, value index.
    pub v4: Vec<(u128, u128, u32)>,
    /// IPv6 ranges, sorted, non-overlapping, value index.
    pub v6: Vec<(u128, u128, u32)>,
    /// The values the ranges name.
    pub values: Vec<T>,
}

impl<T> Default for RangeTable<T> {
    fn default() -> Self {
        RangeTable { v4: Vec::new(), v6: Vec::new(), values: Vec::new() }
    }
}

impl<T> RangeTable<T> {
    /// The ranges of one family.
    pub fn family(&self, v6: bool) -> &[(u128, u128, u32)] {
        if v6 { &self.v6 } else { &self.v4 }
    }

    /// The value holding `addr` in one family (binary search).
    pub fn get(&self, v6: bool, addr: u128) -> Option<&T> {
        let ranges = self.family(v6);
        let i = ranges.partition_point(|r| r.0 <= addr).checked_sub(1)?;
        let (_, end, idx) = ranges[i];
        (addr <= end).then(|| &self.values[idx as usize])
    }

    /// Adds the ranges and values of `other` (another file of the same kind): its
    /// ranges replace this table's where they overlap, so a later file in a path
    /// list wins.
    pub fn extend(&mut self, other: RangeTable<T>) {
        let base = self.values.len() as u32;
        self.values.extend(other.values);
        let shift = |v: Vec<(u128, u128, u32)>| v.into_iter().map(|(s, e, i)| (s, e, i + base)).collect::<Vec<_>>();
        self.v4 = overlay_sorted(std::mem::take(&mut self.v4), &shift(other.v4));
        self.v6 = overlay_sorted(std::mem::take(&mut self.v6), &shift(other.v6));
    }

    /// Sorts and clips a family's ranges so they do not overlap (a later start
    /// cuts the range before it).
    pub fn normalise(&mut self) {
        for ranges in [&mut self.v4, &mut self.v6] {
            ranges.sort_by_key(|r| (r.0, r.1));
            let mut out: Vec<(u128, u128, u32)> = Vec::with_capacity(ranges.len());
            for &(s, e, i) in ranges.iter() {
                if s > e {
                    continue;
                }
                if let Some(last) = out.last_mut()
                    && last.1 >= s
                {
                    if last.0 == s {
                        *last = (s, e, i);
                        continue;
                    }
                    last.1 = s - 1;
                }
                out.push((s, e, i));
            }
            *ranges = out;
        }
    }
}

/// Lays the sorted, non-overlapping `over` ranges on top of `base` (also sorted and
/// non-overlapping); gaps stay gaps.
fn overlay_sorted(base: Vec<(u128, u128, u32)>, over: &[(u128, u128, u32)]) -> Vec<(u128, u128, u32)> {
    if over.is_empty() {
        return base;
    }
    let mut out = Vec::with_capacity(base.len() + over.len() * 2);
    let mut oi = 0;
    for (mut s, e, id) in base {
        loop {
            while oi < over.len() && over[oi].1 < s {
                out.push(over[oi]);
                oi += 1;
            }
            if oi >= over.len() || over[oi].0 > e {
                out.push((s, e, id));
                break;
            }
            let (os, oe, _) = over[oi];
            if os > s {
                out.push((s, os - 1, id));
            }
            if oe >= e {
                break;
            }
            s = oe + 1;
        }
    }
    out.extend_from_slice(&over[oi..]);
    out.sort_by_key(|r| r.0);
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_file_wins_where_it_overlaps() {
        let mut a = RangeTable { v4: vec![(0, 99, 0), (200, 299, 1)], v6: vec![], values: vec!["a0", "a1"] };
        let b = RangeTable { v4: vec![(50, 59, 0), (250, 400, 1)], v6: vec![(5, 6, 0)], values: vec!["b0", "b1"] };
        a.extend(b);
        assert_eq!(a.v4, vec![(0, 49, 0), (50, 59, 2), (60, 99, 0), (200, 249, 1), (250, 400, 3)]);
        assert_eq!(a.get(false, 55), Some(&"b0"));
        assert_eq!(a.get(false, 150), None);
        assert_eq!(a.get(true, 6), Some(&"b0"));
    }

    #[test]
    fn normalise_clips_overlaps() {
        let mut t: RangeTable<()> = RangeTable { v4: vec![(10, 20, 1), (0, 15, 0), (30, 20, 2)], ..Default::default() };
        t.normalise();
        assert_eq!(t.v4, vec![(0, 9, 0), (10, 20, 1)]);
    }
}

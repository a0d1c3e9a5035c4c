//! Writes `lagran_names`, the array of name slots the program finds query
//! names in (`lagran_common::names`): places each served name in a free slot
//! of its hash's probe window and keeps the slots equal to the names served,
//! through a shared mapping, in the order the program's readers need:
//!
//! - a new name is written into a slot whose `hash` no reader accepts
//!   (`EMPTY` or `TOMBSTONE`), and its `hash` last, after a release fence;
//! - a name that stays but gets another id or block gets both in one 8-byte store;
//! - a name given up gets `hash` = `TOMBSTONE` and nothing else; its slot is
//!   reused only from the next sync on, when no packet can still be reading it.
//!
//! A probe stops at the first `EMPTY` slot, so a slot never goes back to
//! `EMPTY` (only [`NameSlots::reset`] does that, to every slot at once); and a
//! name is placed in the first reusable slot of its window, so every slot
//! before it holds a name or a tombstone.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{Ordering, fence};

use aya::maps::Map;
use lagran_common::names::{self, EMPTY, MAP_NAME, NameValue, PROBES, SLOTS, TOMBSTONE, WORDS, hash_wire};

use super::{XdpError, mapping::Mapping};

/// Bytes of one slot in the mapping (the array's element size: the value
/// rounded up to 8 bytes, which it already is).
const STRIDE: usize = size_of::<NameValue>();
const _: () = assert!(STRIDE.is_multiple_of(8));

/// What [`NameSlots`] knows about a slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// Never used: `hash` is `EMPTY`.
    Empty,
    /// A tombstone that may take a name.
    Free,
    /// Holds a name.
    Used,
    /// Given up during this sync: a tombstone, reusable from the next sync on.
    Retired,
}

/// Where a name went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Put {
    /// Written (a new slot, or a new id or block in its slot).
    Written,
    /// Already there as asked.
    Unchanged,
    /// Every slot of its window holds another name (or one given up in this
    /// sync), or its hash is one of the two markers: userspace answers it.
    NoRoom,
}

pub struct NameSlots {
    mapping: Mapping,
    writable: bool,
    slots: Vec<Slot>,
    /// Wire name -> (slot, id, route4, signed) as written.
    placed: HashMap<Vec<u8>, (u32, u32, u32, u32)>,
    /// Slots given up during this sync.
    retired: Vec<u32>,
    /// Names that found no room at their last attempt (warned once).
    unfit: HashSet<Vec<u8>>,
}

impl NameSlots {
    /// The slots of `map` (`lagran_names`), as a map made by this load (every
    /// slot `EMPTY`); read-only unless `writable` (maps opened from pins).
    pub fn new(map: Map, writable: bool) -> Result<NameSlots, XdpError> {
        Ok(NameSlots {
            mapping: Mapping::new(map, MAP_NAME, SLOTS as usize * STRIDE, writable)?,
            writable,
            slots: vec![Slot::Empty; SLOTS as usize],
            placed: HashMap::new(),
            retired: Vec::new(),
            unfit: HashSet::new(),
        })
    }

    fn check_writable(&self) -> Result<(), XdpError> {
        match self.writable {
            true => Ok(()),
            false => Err(XdpError::Mmap { map: MAP_NAME, reason: "opened read-only".into() }),
        }
    }

    /// Makes the slots given up in the last sync reusable. Call at the start of a sync.
    pub fn begin_sync(&mut self) {
        for s in self.retired.drain(..) {
            self.slots[s as usize] = Slot::Free;
        }
    }

    /// Serves `wire` (lowercased wire format) as name `id` with flat block
    /// `route4`; `signed` (0 or 1): its zone is signed (`NameValue::signed`).
    pub fn put(&mut self, wire: &[u8], id: u32, route4: u32, signed: u32) -> Result<Put, XdpError> {
        self.check_writable()?;
        let target = NameValue::target_word(id, route4);
        if let Some(p) = self.placed.get_mut(wire) {
            if (p.1, p.2, p.3) == (id, route4, signed) {
                return Ok(Put::Unchanged);
            }
            let base = p.0 as usize * STRIDE;
            if (p.1, p.2) != (id, route4) {
                // One store: a packet reads the old pair or the new one.
                self.mapping.u64(base + NameValue::TARGET_OFFSET).store(target, Ordering::Relaxed);
            }
            if p.3 != signed {
                // Length and flag share a word: the length stays, the flag flips in one store.
                let word = wire.len() as u64 | u64::from(signed) << 32;
                self.mapping.u64(base + NameValue::LEN_OFFSET).store(word, Ordering::Relaxed);
            }
            (p.1, p.2, p.3) = (id, route4, signed);
            return Ok(Put::Written);
        }
        let hash = hash_wire(wire);
        let Some(slot) = self.reusable(hash).filter(|_| hash != EMPTY && hash != TOMBSTONE) else {
            if self.unfit.insert(wire.to_vec()) {
                tracing::warn!(
                    name = %super::wire_name::wire_to_text(wire),
                    "no free slot in lagran_names for this name's hash ({PROBES} slots tried); userspace answers it"
                );
            }
            return Ok(Put::NoRoom);
        };
        self.unfit.remove(wire);
        self.publish(slot, &NameValue { route4, signed, ..NameValue::new(id, wire) });
        self.placed.insert(wire.to_vec(), (slot, id, route4, signed));
        Ok(Put::Written)
    }

    /// The first slot of `hash`'s window that may take a name.
    fn reusable(&self, hash: u64) -> Option<u32> {
        (0..PROBES).map(|i| names::slot(hash, i)).find(|&s| matches!(self.slots[s as usize], Slot::Empty | Slot::Free))
    }

    /// Writes `value` into reusable `slot`: everything but the hash while the
    /// slot's hash is one no reader accepts, then the hash.
    fn publish(&mut self, slot: u32, value: &NameValue) {
        let base = slot as usize * STRIDE;
        let target = NameValue::target_word(value.id, value.route4);
        self.mapping.u64(base + NameValue::TARGET_OFFSET).store(target, Ordering::Relaxed);
        let len_word = u64::from(value.len) | u64::from(value.signed) << 32;
        self.mapping.u64(base + NameValue::LEN_OFFSET).store(len_word, Ordering::Relaxed);
        for (i, w) in value.name.iter().enumerate() {
            self.mapping.u64(base + NameValue::NAME_OFFSET + 8 * i).store(*w, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        self.mapping.u64(base + NameValue::HASH_OFFSET).store(value.hash, Ordering::Relaxed);
        self.slots[slot as usize] = Slot::Used;
    }

    /// Stops serving `wire`; true when it was served.
    pub fn remove(&mut self, wire: &[u8]) -> Result<bool, XdpError> {
        self.check_writable()?;
        self.unfit.remove(wire);
        let Some((slot, ..)) = self.placed.remove(wire) else { return Ok(false) };
        self.mapping.u64(slot as usize * STRIDE + NameValue::HASH_OFFSET).store(TOMBSTONE, Ordering::Relaxed);
        self.slots[slot as usize] = Slot::Retired;
        self.retired.push(slot);
        Ok(true)
    }

    /// Every slot `EMPTY` again (maps reused from anything), nothing placed.
    pub fn reset(&mut self) -> Result<(), XdpError> {
        self.check_writable()?;
        for off in (0..SLOTS as usize * STRIDE).step_by(8) {
            self.mapping.u64(off).store(0, Ordering::Relaxed);
        }
        self.slots.fill(Slot::Empty);
        self.placed.clear();
        self.retired.clear();
        self.unfit.clear();
        Ok(())
    }

    /// Slot `i` as it is in the map now.
    fn read(&self, i: u32) -> NameValue {
        let base = i as usize * STRIDE;
        let word = |off: usize| self.mapping.u64(base + off).load(Ordering::Relaxed);
        let target = word(NameValue::TARGET_OFFSET);
        let mut name = [0u64; WORDS];
        for (k, w) in name.iter_mut().enumerate() {
            *w = word(NameValue::NAME_OFFSET + 8 * k);
        }
        NameValue {
            hash: word(NameValue::HASH_OFFSET),
            id: target as u32,
            route4: (target >> 32) as u32,
            len: word(NameValue::LEN_OFFSET) as u32,
            signed: (word(NameValue::LEN_OFFSET) >> 32) as u32,
            name,
        }
    }

    /// The entry the program finds for `wire`, read as it reads the slots
    /// (`lagran-ebpf/src/maps.rs`, `name`): the first slot of the window
    /// holding its hash, then the exact name.
    pub fn find(&self, wire: &[u8]) -> Option<NameValue> {
        let hash = hash_wire(wire);
        for i in 0..PROBES {
            let v = self.read(names::slot(hash, i));
            if v.hash == hash {
                return (v.wire().eq(wire.iter().copied())).then_some(v);
            }
            if v.hash == EMPTY {
                return None;
            }
        }
        None
    }

    /// Every slot that holds a name, as it is in the map now.
    pub fn entries(&self) -> impl Iterator<Item = NameValue> + '_ {
        (0..SLOTS).map(|i| self.read(i)).filter(|v| v.hash != EMPTY && v.hash != TOMBSTONE)
    }

    /// Writes `value` under `hash` as given, into the first reusable slot of
    /// the hash's window (else its home slot), bypassing the placement: for
    /// tests that plant a colliding hash.
    pub fn put_raw(&mut self, hash: u64, value: NameValue) -> Result<(), XdpError> {
        self.check_writable()?;
        let slot = self.reusable(hash).unwrap_or(names::slot(hash, 0));
        self.publish(slot, &NameValue { hash, ..value });
        Ok(())
    }
}

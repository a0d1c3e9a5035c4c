//! `lagran_names`: hash map from a query name to the name's id.
//! Written by userspace (the map writer) on every route-table sync.

/// Map name as `bpftool` shows it.
pub const MAP_NAME: &str = "lagran_names";
pub const MAX_ENTRIES: u32 = 4096;
/// Longest wire-format name (RFC 1035 §2.3.4: 255 octets, length bytes included).
pub const NAME_MAX: usize = 255;
/// Key size: a whole wire-format name fits, plus zero padding.
pub const KEY_LEN: usize = 256;

/// A query name in DNS wire format (`04 e d g e 06 l a g r a n 03 n e t 00`),
/// ASCII letters lowercased, the root label included, zero-padded to `KEY_LEN`.
/// The wire format is self-delimiting, so the padding is unambiguous.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NameKey {
    pub name: [u8; KEY_LEN],
}

impl NameKey {
    pub const fn zeroed() -> Self {
        NameKey { name: [0; KEY_LEN] }
    }
}

/// What the fast path knows about a name.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NameValue {
    /// The name's id: the leading 32 bits of its `lagran_route_v4` keys (host order here).
    pub id: u32,
}

const _: () = assert!(core::mem::size_of::<NameKey>() == KEY_LEN);
const _: () = assert!(core::mem::size_of::<NameValue>() == 4);

crate::impl_pod!(NameKey, NameValue);

//! The geo data in force, the operators' overrides, and the partitions
//! compiled from both.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;

use crate::geo::GeoDb;
use crate::partition::{Override, PartitionTable};

/// The geo data, the overrides and their partitions, replaced together: a
/// new geo file or a new override list recompiles the partitions at once
/// and marks them changed, so the next build starts over.
pub struct Geography {
    geo: ArcSwap<GeoDb>,
    overrides: ArcSwap<Vec<Override>>,
    partitions: ArcSwap<PartitionTable>,
    /// The partitions changed since the last build took them.
    changed: AtomicBool,
}

impl Geography {
    pub fn new(geo: GeoDb) -> Geography {
        let partitions = PartitionTable::build(&geo, &[]);
        Geography {
            geo: ArcSwap::from_pointee(geo),
            overrides: ArcSwap::from_pointee(Vec::new()),
            partitions: ArcSwap::from_pointee(partitions),
            changed: AtomicBool::new(true),
        }
    }

    pub fn geo(&self) -> Arc<GeoDb> {
        self.geo.load_full()
    }

    pub fn partitions(&self) -> Arc<PartitionTable> {
        self.partitions.load_full()
    }

    pub fn overrides(&self) -> Arc<Vec<Override>> {
        self.overrides.load_full()
    }

    /// Replaces the geo data and recompiles the partitions with the current overrides.
    pub fn set_geo(&self, geo: GeoDb) {
        let overrides = self.overrides.load();
        self.partitions.store(Arc::new(PartitionTable::build(&geo, &overrides)));
        self.changed.store(true, Ordering::SeqCst);
        self.geo.store(Arc::new(geo));
    }

    /// Replaces the overrides and recompiles the partitions.
    pub fn set_overrides(&self, overrides: Vec<Override>) {
        let geo = self.geo.load();
        self.partitions.store(Arc::new(PartitionTable::build(&geo, &overrides)));
        self.changed.store(true, Ordering::SeqCst);
        self.overrides.store(Arc::new(overrides));
    }

    /// Whether the partitions changed since the last call.
    pub fn take_changed(&self) -> bool {
        self.changed.swap(false, Ordering::SeqCst)
    }
}

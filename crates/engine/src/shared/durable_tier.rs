//! What the page file of a tiered store must keep for the checkpoints that depend on it, and the
//! log ranges that hold dead records of crashed runs (`checkpoint/incremental.rs`).
//!
//! Invariants:
//! - `floors` holds, for each retained incremental checkpoint (published by this run, or the one
//!   recovery loaded), the page of its begin address. Compaction of the page file deletes no
//!   segment at or above the lowest of them ([`DurableTier::keep_from_page`]): a checkpoint a
//!   restart may choose must find every page it points into.
//! - `holes` are the ranges recovery left behind (see [`LogHole`]); log scans skip their dead
//!   records, and each incremental checkpoint carries those still at or above the begin address.

use std::collections::BTreeMap;

use crate::checkpoint_files::{LogHole, MAX_LOG_HOLES};

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct DurableTier {
    /// Checkpoint version → the page of its begin address.
    floors: BTreeMap<u64, u64>,
    holes: Vec<LogHole>,
}

impl DurableTier {
    /// Records that incremental checkpoint `version` needs the pages from `begin_page` on.
    pub(crate) fn retain(&mut self, version: u64, begin_page: u64) {
        self.floors.insert(version, begin_page);
    }

    /// Forgets checkpoints that were pruned (or never published).
    pub(crate) fn forget(&mut self, versions: &[u64]) {
        for version in versions {
            self.floors.remove(version);
        }
    }

    /// The lowest page a retained checkpoint needs (`u64::MAX` when none does).
    pub(crate) fn keep_from_page(&self) -> u64 {
        self.floors.values().copied().min().unwrap_or(u64::MAX)
    }

    /// Adds a hole (recovery); refuses past [`MAX_LOG_HOLES`].
    pub(crate) fn add_hole(&mut self, hole: LogHole) -> Result<(), String> {
        if self.holes.len() >= MAX_LOG_HOLES {
            return Err(format!(
                "{MAX_LOG_HOLES} crashed runs' log ranges are still above the begin address; \
                 compact the page file (or take a non-incremental checkpoint) first"
            ));
        }
        if hole.from < hole.until {
            self.holes.push(hole);
        }
        Ok(())
    }

    /// The holes still at or above `begin` (the ones below it are dropped).
    pub(crate) fn holes_from(&mut self, begin: u64) -> Vec<LogHole> {
        self.holes.retain(|hole| hole.until > begin);
        self.holes.clone()
    }

    /// Whether a record of `version` at `address` is a dead record of a crashed run.
    pub(crate) fn is_dead(holes: &[LogHole], address: u64, version: u64) -> bool {
        holes.iter().any(|hole| hole.holds(address, version))
    }
}

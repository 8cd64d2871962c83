//! The common insert without decoding: an append (a stream's XADD, a list's tail push) or an
//! ordered insert (a sorted set's new member) whose leaf has room and does not get a new first
//! entry changes the leaf by one entry and each ancestor by one count, nothing else. This path
//! reads the nodes of the path as bytes (checked by `node::scan` exactly as decoding checks
//! them), splices the entry into the leaf's bytes, patches each ancestor's 8-byte count in
//! place and rewrites those records in place: no allocation per entry, `height` writes. Any
//! other case (a split, a new first entry, a cut separator the probe extends) is left to the
//! general path, before anything is written.

use super::node::{child_at, compare_separator, scan};
use super::Tree;
use crate::{capacity_hint, Error, Records, Result};

/// Where [`Tree::insert_fast`] puts the entry.
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    /// After the last entry.
    End,
    /// At its place in byte order (ordered trees; no equal entry present).
    Sorted(&'a [u8]),
}

/// Reusable buffers of the fast path: one record per level, the item ranges of the node being
/// looked at, and per ancestor the offset of the count it patches.
#[derive(Default)]
pub(super) struct Scratch {
    nodes: Vec<Vec<u8>>,
    items: Vec<(usize, usize)>,
    counts: Vec<usize>,
    ids: Vec<u64>,
}

impl Tree {
    /// Inserts `entry` at `target` when the fast path applies (see the module docs): its rank,
    /// or `None` with nothing written when the general path must do it.
    pub(super) fn insert_fast(
        &mut self,
        records: &mut impl Records,
        target: Target<'_>,
        entry: &[u8],
        scratch: &mut Scratch,
    ) -> Result<Option<u64>> {
        if self.is_empty() {
            return Ok(None);
        }
        let height = self.height as usize;
        scratch.nodes.resize_with(height, Vec::new);
        scratch.counts.clear();
        scratch.ids.clear();
        let (mut id, mut expected, mut rank) = (self.root, self.len, 0u64);
        for depth in 0..height {
            let bytes = &mut scratch.nodes[depth];
            let (leaf, count) = self.read_scanned(records, id, bytes, &mut scratch.items)?;
            if leaf != (depth + 1 == height) || count != expected {
                // The general path reads the same node and reports it precisely.
                return Ok(None);
            }
            scratch.ids.push(id);
            let items = &scratch.items;
            if leaf {
                let index = match target {
                    Target::End => items.len(),
                    Target::Sorted(probe) => {
                        items.partition_point(|&(start, end)| &bytes[start..end] <= probe)
                    }
                };
                if index == 0 && height > 1 {
                    // A new first entry changes the separators above.
                    return Ok(None);
                }
                let new_len = bytes.len() + 4 + entry.len();
                if items.len() >= self.limits.max_leaf_items || new_len > self.limits.max_node_bytes
                {
                    return Ok(None);
                }
                debug_assert!(
                    index == 0 || {
                        let (start, end) = items[index - 1];
                        matches!(target, Target::End) || &bytes[start..end] < entry
                    },
                    "Tree::insert_sorted: an equal entry is present"
                );
                let at = items
                    .get(index)
                    .map_or(bytes.len(), |&(start, _)| start - 4);
                let prefix = (entry.len() as u32).to_le_bytes();
                bytes.splice(at..at, prefix.iter().chain(entry).copied());
                bytes[1..5].copy_from_slice(&(items.len() as u32 + 1).to_le_bytes());
                rank += index as u64;
                break;
            }
            let index = match target {
                Target::End => items.len() - 1,
                Target::Sorted(probe) => {
                    // The last child whose first entry is <= probe, else the first.
                    let (mut low, mut high) = (1, items.len());
                    while low < high {
                        let middle = low + (high - low) / 2;
                        let (_, _, cut, separator) = child_at(bytes, items[middle]);
                        let Some(order) = compare_separator(separator, cut, probe) else {
                            return Ok(None);
                        };
                        if order.is_le() {
                            low = middle + 1;
                        } else {
                            high = middle;
                        }
                    }
                    low - 1
                }
            };
            for &range in &items[..index] {
                rank += child_at(bytes, range).1;
            }
            let (child, count, _, _) = child_at(bytes, items[index]);
            scratch.counts.push(items[index].0 + 8);
            (id, expected) = (child, count);
        }
        // Every record must fit the store before the first write (the general path then
        // reports the one that does not).
        if let Some(max) = records.max_value_bytes() {
            if scratch.nodes[..height]
                .iter()
                .any(|bytes| bytes.len() > max)
            {
                return Ok(None);
            }
        }
        // Every check passed: write the leaf, then each ancestor's new count, in place.
        for depth in (0..height).rev() {
            let bytes = &mut scratch.nodes[depth];
            if depth + 1 < height {
                let at = scratch.counts[depth];
                let count = u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
                bytes[at..at + 8].copy_from_slice(&(count + 1).to_le_bytes());
            }
            let capacity = capacity_hint(bytes.len(), self.limits.max_node_bytes);
            records.put_with_capacity(&self.key(scratch.ids[depth]), bytes, capacity)?;
        }
        self.len += 1;
        Ok(Some(rank))
    }

    /// Reads node `id` into `bytes` and checks it with `scan` (filling `items`): whether it is
    /// a leaf and the entries it holds. A bad id, a missing record or damaged bytes are
    /// [`Error::Corrupt`] naming the tree and the node.
    fn read_scanned(
        &self,
        records: &mut impl Records,
        id: u64,
        bytes: &mut Vec<u8>,
        items: &mut Vec<(usize, usize)>,
    ) -> Result<(bool, u64)> {
        let damaged = |what: String| Error::Corrupt(format!("tree {} node {id}: {what}", self.id));
        if id == 0 || id >= self.next_node {
            return Err(damaged(format!(
                "id not below next_node {}",
                self.next_node
            )));
        }
        if !records.get(&self.key(id), bytes)? {
            return Err(damaged("missing".into()));
        }
        scan(bytes, items).map_err(|error| match error {
            Error::Corrupt(what) => damaged(what),
            other => other,
        })
    }

    /// [`Tree::first_leaf`] (with `last`) or [`Tree::first_leaf_len`] (without): the left edge
    /// read as bytes, each node checked by `scan`. Without `last` the leaf itself is not read:
    /// its parent's pointer holds its count (the root's is `len`).
    pub(super) fn scan_first_leaf(
        &self,
        records: &mut impl Records,
        mut last: Option<&mut Vec<u8>>,
        scratch: &mut Scratch,
    ) -> Result<Option<u64>> {
        if self.is_empty() {
            return Ok(None);
        }
        let height = self.height as usize;
        if last.is_none() && height == 1 {
            return Ok(Some(self.len));
        }
        scratch.nodes.resize_with(1, Vec::new);
        let (mut id, mut expected) = (self.root, self.len);
        for depth in 0..height {
            let damaged =
                |what: String| Error::Corrupt(format!("tree {} node {id}: {what}", self.id));
            let bytes = &mut scratch.nodes[0];
            let (leaf, count) = self.read_scanned(records, id, bytes, &mut scratch.items)?;
            if leaf != (depth + 1 == height) {
                return Err(damaged(format!(
                    "a leaf or internal node at the wrong depth {depth}"
                )));
            }
            if count != expected {
                return Err(damaged(format!(
                    "holds {count} entries, its parent says {expected}"
                )));
            }
            if leaf {
                let &(start, end) = scratch.items.last().expect("scan: a leaf has an entry");
                let last = last
                    .as_mut()
                    .expect("a count-only walk stops above the leaf");
                last.clear();
                last.extend_from_slice(&bytes[start..end]);
                return Ok(Some(count));
            }
            let (child, entries, _, _) = child_at(bytes, scratch.items[0]);
            if last.is_none() && depth + 2 == height {
                return Ok(Some(entries));
            }
            (id, expected) = (child, entries);
        }
        unreachable!("a descent of `height` levels ends at a leaf")
    }
}

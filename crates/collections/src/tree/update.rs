//! Updates: the edited path is settled bottom-up (each node brought within the limits: split, or
//! merged with or balanced against a sibling) into a [`Plan`] of writes, made only once the
//! whole plan is known to fit the store: changed nodes keep their ids and are rewritten in place,
//! split-off pieces and new roots get fresh ids, merged-away nodes are deleted (the parent
//! module's docs, "Errors and crash safety").

use std::ops::Range;

use prefixkv_store::{EngineError, StoreError};

use super::node::{Child, Node};
use super::{Frame, Tree, MAX_HEIGHT};
use crate::{capacity_hint, Error, Records, Result, RECORD_KEY_BYTES};

/// Where an update cuts a leaf over its item limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Split {
    /// In halves: room on both sides for inserts anywhere.
    Halves,
    /// The update appended after the last entry: the leaf is cut after `max_leaf_items`
    /// entries, so the left one is full and the new one holds the appended entry. An append-only tree
    /// (a stream) so packs its leaves full, not half: half the leaves to read and write, and
    /// half the splits and the whole-leaf trims per entry. Internal nodes and leaves over the
    /// byte budget are still halved (an internal node keeps two children on each side).
    Append,
}

/// The writes of one update, decided before any is made.
struct Plan {
    /// How an overfull leaf is cut.
    split: Split,
    /// The header's `next_node` once the plan is applied.
    next_node: u64,
    /// Nodes to write, in the order they were settled.
    writes: Vec<Write>,
    /// Nodes no longer reachable.
    deletes: Vec<u64>,
}

/// One node of a [`Plan`].
struct Write {
    id: u64,
    node: Node,
    /// A fresh id: no record exists under it yet, so writing it cannot disturb the old tree.
    fresh: bool,
}

impl Plan {
    /// Plans `node` under the first of `reuse` (in place) or else a fresh id; the pointer its
    /// parent stores.
    fn place(&mut self, tree: &Tree, node: Node, reuse: &mut impl Iterator<Item = u64>) -> Child {
        debug_assert!(
            node.items() >= if node.is_leaf() { 1 } else { 2 },
            "a written leaf has an entry, an internal node two children"
        );
        let (id, fresh) = match reuse.next() {
            Some(id) => (id, false),
            None => {
                let id = self.next_node;
                self.next_node = id.checked_add(1).expect("node ids (u64) never run out");
                (id, true)
            }
        };
        let child = Child {
            id,
            count: node.count(),
            first: node.first(tree.limits.separator_bytes),
        };
        self.writes.push(Write { id, node, fresh });
        child
    }
}

impl Tree {
    /// Settles the path `frames` (root first), whose leaf the caller edited, and writes it,
    /// keeping the limits (an overfull leaf cut as `split` says); then updates the header (length `len`). On an error before the first
    /// in-place write (a node too large for the store, a refused write of a fresh node), `self`
    /// and every record are as they were.
    pub(super) fn rewrite(
        &mut self,
        records: &mut impl Records,
        frames: Vec<Frame>,
        len: u64,
        split: Split,
    ) -> Result<()> {
        let mut plan = Plan {
            split,
            next_node: self.next_node,
            writes: Vec::new(),
            deletes: Vec::new(),
        };
        let root = self.rebuild(records, frames, &mut plan)?;
        self.apply(records, &plan)?;
        self.next_node = plan.next_node;
        self.len = len;
        (self.root, self.height) = match root {
            Some(NewRoot {
                id,
                height,
                entries,
            }) => {
                debug_assert_eq!(entries, len, "the new root holds every entry");
                (id, height)
            }
            None => {
                debug_assert_eq!(len, 0, "only an empty tree loses its root");
                (0, 0)
            }
        };
        Ok(())
    }

    /// Makes the writes of `plan`: sizes first, then the fresh nodes (undone on failure), then
    /// the in-place rewrites, then the deletes.
    fn apply(&self, records: &mut impl Records, plan: &Plan) -> Result<()> {
        if let Some(max) = records.max_value_bytes() {
            if let Some(write) = plan.writes.iter().find(|w| w.node.encoded_len() > max) {
                return Err(Error::Store(StoreError::Engine(
                    EngineError::RecordTooLarge {
                        key_bytes: RECORD_KEY_BYTES,
                        value_bytes: write.node.encoded_len(),
                        max_value_bytes: max,
                    },
                )));
            }
        }
        let mut buf = Vec::new();
        let fresh = plan.writes.iter().filter(|write| write.fresh);
        for (done, write) in fresh.enumerate() {
            if let Err(error) = self.put_node(records, write, &mut buf) {
                // The old header never reaches these, but they would linger as garbage. The
                // error to report is the first one.
                let written = plan.writes.iter().filter(|write| write.fresh).take(done);
                for write in written {
                    let _ = records.delete(&self.key(write.id));
                }
                return Err(error);
            }
        }
        for write in plan.writes.iter().filter(|write| !write.fresh) {
            self.put_node(records, write, &mut buf)?;
        }
        for &id in &plan.deletes {
            records.delete(&self.key(id))?;
        }
        Ok(())
    }

    /// Writes one planned node, with room to grow (a leaf gains an entry per insert, a parent
    /// a child per split below it) so that most rewrites go in place.
    fn put_node(&self, records: &mut impl Records, write: &Write, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        write.node.encode(buf);
        let capacity = capacity_hint(buf.len(), self.limits.max_node_bytes);
        records.put_with_capacity(&self.key(write.id), buf, capacity)
    }

    /// Settles each node of the path from the leaf up into `plan`, stopping at the first
    /// ancestor whose pointer to the settled node did not change; the new root, if any entry is
    /// left.
    fn rebuild(
        &self,
        records: &mut impl Records,
        mut frames: Vec<Frame>,
        plan: &mut Plan,
    ) -> Result<Option<NewRoot>> {
        let levels = frames.len();
        let mut buf = Vec::new();
        let mut current = frames.pop().expect("a path ends at a leaf");
        loop {
            let depth = frames.len();
            let Some(parent) = frames.last_mut() else {
                return Ok(self.plan_root(current, levels, plan));
            };
            let (span, pieces, reuse) =
                self.settle(records, current, parent, depth, plan.split, &mut buf)?;
            let mut children = Vec::with_capacity(pieces.len());
            let mut ids = reuse.into_iter();
            for piece in pieces {
                children.push(plan.place(self, piece, &mut ids));
            }
            // A merge that fits one node frees the other's id.
            plan.deletes.extend(ids);
            let unchanged = parent.node.children()[span.clone()] == children[..];
            parent.node.children_mut().splice(span, children);
            current = frames.pop().expect("the parent frame was just used");
            if unchanged {
                // Same ids, counts and separators: nothing above needs rewriting.
                return Ok(Some(NewRoot {
                    id: self.root,
                    height: self.height,
                    entries: self.len,
                }));
            }
        }
    }

    /// Brings the edited non-root node `current` (`depth` levels down, child `parent.index` of
    /// `parent`) within the limits: dropped when empty, split when over them, merged with a sibling (or split evenly
    /// with it when the two do not fit in one node) when underfull. Returns the range of the
    /// parent's children the result replaces, the nodes to write and the ids they may reuse.
    fn settle(
        &self,
        records: &mut impl Records,
        current: Frame,
        parent: &Frame,
        depth: usize,
        split: Split,
        buf: &mut Vec<u8>,
    ) -> Result<(Range<usize>, Vec<Node>, Vec<u64>)> {
        let index = parent.index;
        let (id, node) = (current.id, current.node);
        if node.items() == 0 {
            // An emptied node leaves its parent (which may then be merged in turn).
            return Ok((index..index + 1, Vec::new(), vec![id]));
        }
        if !self.limits.fits(&node) {
            return Ok((index..index + 1, self.split(node, split), vec![id]));
        }
        if !self.limits.underfull(&node) {
            return Ok((index..index + 1, vec![node], vec![id]));
        }
        // An internal node has at least two children (invariant 4, checked by decoding).
        let children = parent.node.children();
        let sibling = if index + 1 < children.len() {
            index + 1
        } else {
            index - 1
        };
        let link = &children[sibling];
        let sibling_node = self.read(records, link.id, depth, link.count, buf)?;
        let (merged, start, ids) = if sibling > index {
            let mut merged = node;
            merged.append(sibling_node);
            (merged, index, vec![id, link.id])
        } else {
            let mut merged = sibling_node;
            merged.append(node);
            (merged, sibling, vec![link.id, id])
        };
        Ok((start..start + 2, self.split(merged, Split::Halves), ids))
    }

    /// Plans the rewritten root `current` (`levels` levels high): none when it is an empty
    /// leaf, its only child when it has one, new roots above it while it splits.
    fn plan_root(&self, current: Frame, levels: usize, plan: &mut Plan) -> Option<NewRoot> {
        let mut height = u8::try_from(levels).expect("a path is at most MAX_HEIGHT long");
        let (id, node) = (current.id, current.node);
        match &node {
            Node::Leaf(entries) if entries.is_empty() => {
                if id != 0 {
                    plan.deletes.push(id);
                }
                return None;
            }
            Node::Internal(children) if children.len() == 1 => {
                plan.deletes.push(id);
                return Some(NewRoot {
                    id: children[0].id,
                    height: height - 1,
                    entries: children[0].count,
                });
            }
            _ => {}
        }
        // The empty tree's root (id 0) was never written: it gets a fresh id.
        let mut reuse = Some(id).filter(|&id| id != 0).into_iter();
        let mut pieces = self.split(node, plan.split);
        loop {
            let mut children = Vec::with_capacity(pieces.len());
            for piece in pieces {
                children.push(plan.place(self, piece, &mut reuse));
            }
            if let [root] = children.as_slice() {
                return Some(NewRoot {
                    id: root.id,
                    height,
                    entries: root.count,
                });
            }
            assert!(
                height < MAX_HEIGHT,
                "a tree of height {MAX_HEIGHT} holds at least 2^63 entries"
            );
            height += 1;
            pieces = self.split(Node::Internal(children), Split::Halves);
        }
    }

    /// `node` cut into nodes that each fit the limits or hold a single item (in order).
    fn split(&self, node: Node, split: Split) -> Vec<Node> {
        let count = node.count();
        let mut pieces = Vec::with_capacity(2);
        self.split_into(node, split, &mut pieces);
        debug_assert_eq!(
            pieces.iter().map(Node::count).sum::<u64>(),
            count,
            "splitting keeps every entry"
        );
        pieces
    }

    fn split_into(&self, mut node: Node, split: Split, pieces: &mut Vec<Node>) {
        if node.items() <= 1 || self.limits.fits(&node) {
            pieces.push(node);
            return;
        }
        let right = node.split_off(self.split_point(&node, split));
        self.split_into(node, split, pieces);
        self.split_into(right, split, pieces);
    }

    /// Where to cut an oversized node (of at least two items): at the byte midpoint when it
    /// is over the byte budget, else at the item midpoint, or before the last entry of a leaf
    /// an append overfilled ([`Split::Append`]). Both sides get an item.
    fn split_point(&self, node: &Node, split: Split) -> usize {
        let items = node.items();
        if node.encoded_len() <= self.limits.max_node_bytes {
            return match split {
                // Full leaves from the left: an appended entry alone on the right, and a leaf
                // written under larger limits cut into full ones.
                Split::Append if node.is_leaf() => self.limits.max_leaf_items.clamp(1, items - 1),
                _ => items / 2,
            };
        }
        let total: usize = (0..items).map(|index| node.item_bytes(index)).sum();
        let mut before = 0;
        for index in 0..items {
            before += node.item_bytes(index);
            if 2 * before >= total {
                return (index + 1).clamp(1, items - 1);
            }
        }
        items - 1
    }
}

/// Where a rewrite left the root.
struct NewRoot {
    id: u64,
    height: u8,
    entries: u64,
}

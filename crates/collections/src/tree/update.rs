//! Updates: the edited path is written bottom-up under new node ids, each node brought within
//! the limits on the way (split, or merged with or balanced against a sibling), and the replaced
//! nodes are deleted last (the parent module's docs, "Errors and crash safety").

use std::ops::Range;

use super::node::{Child, Node};
use super::{Frame, Tree, MAX_HEIGHT};
use crate::{Records, Result};

/// The writes of one update: new nodes go under fresh ids, replaced ones are deleted last.
struct Writer {
    next_node: u64,
    written: Vec<u64>,
    replaced: Vec<u64>,
    buf: Vec<u8>,
}

impl Tree {
    /// Writes the path `frames` (root first), whose leaf the caller edited, under new ids from
    /// the leaf up, keeping the limits; then points the header at the new root and deletes the
    /// nodes it replaced. On a failed write, `self` and the old nodes are untouched.
    pub(super) fn rewrite(
        &mut self,
        records: &mut impl Records,
        frames: Vec<Frame>,
        len: u64,
    ) -> Result<()> {
        let mut writer = Writer {
            next_node: self.next_node,
            written: Vec::new(),
            replaced: Vec::new(),
            buf: Vec::new(),
        };
        let root = match self.rebuild(records, frames, &mut writer) {
            Ok(root) => root,
            Err(error) => {
                // The old header never reaches these, but they would linger as garbage. The
                // error to report is the first one.
                for id in writer.written {
                    let _ = records.delete(&self.key(id));
                }
                return Err(error);
            }
        };
        self.next_node = writer.next_node;
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
        for id in writer.replaced {
            records.delete(&self.key(id))?;
        }
        Ok(())
    }

    /// Settles and writes each node of the path from the leaf up; the new root, if any entry is
    /// left.
    fn rebuild(
        &self,
        records: &mut impl Records,
        mut frames: Vec<Frame>,
        writer: &mut Writer,
    ) -> Result<Option<NewRoot>> {
        let levels = frames.len();
        let mut buf = Vec::new();
        let mut current = frames.pop().expect("a path ends at a leaf");
        loop {
            if current.id != 0 {
                writer.replaced.push(current.id);
            }
            let depth = frames.len();
            let Some(parent) = frames.last_mut() else {
                return self.write_root(records, current.node, levels, writer);
            };
            let (span, pieces) =
                self.settle(records, current.node, parent, depth, writer, &mut buf)?;
            let mut children = Vec::with_capacity(pieces.len());
            for piece in pieces {
                children.push(writer.write(records, self, piece)?);
            }
            parent.node.children_mut().splice(span, children);
            current = frames.pop().expect("the parent frame was just used");
        }
    }

    /// Brings the rewritten non-root `node` (`depth` levels down, child `parent.index` of
    /// `parent`) within the limits: split when over them, merged with a sibling (or split evenly
    /// with it when the two do not fit in one node) when underfull. Returns the range of the
    /// parent's children the result replaces, and the nodes to write.
    fn settle(
        &self,
        records: &mut impl Records,
        node: Node,
        parent: &Frame,
        depth: usize,
        writer: &mut Writer,
        buf: &mut Vec<u8>,
    ) -> Result<(Range<usize>, Vec<Node>)> {
        let index = parent.index;
        if !self.limits.fits(&node) {
            return Ok((index..index + 1, self.split(node)));
        }
        if !self.limits.underfull(&node) {
            return Ok((index..index + 1, vec![node]));
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
        writer.replaced.push(link.id);
        let (merged, start) = if sibling > index {
            let mut merged = node;
            merged.append(sibling_node);
            (merged, index)
        } else {
            let mut merged = sibling_node;
            merged.append(node);
            (merged, sibling)
        };
        Ok((start..start + 2, self.split(merged)))
    }

    /// Writes the rewritten root `node` (`levels` levels high): none when it is an empty leaf,
    /// its only child when it has one, new roots above it while it splits.
    fn write_root(
        &self,
        records: &mut impl Records,
        node: Node,
        levels: usize,
        writer: &mut Writer,
    ) -> Result<Option<NewRoot>> {
        let mut height = u8::try_from(levels).expect("a path is at most MAX_HEIGHT long");
        match &node {
            Node::Leaf(entries) if entries.is_empty() => return Ok(None),
            Node::Internal(children) if children.len() == 1 => {
                return Ok(Some(NewRoot {
                    id: children[0].id,
                    height: height - 1,
                    entries: children[0].count,
                }));
            }
            _ => {}
        }
        let mut pieces = self.split(node);
        loop {
            let mut children = Vec::with_capacity(pieces.len());
            for piece in pieces {
                children.push(writer.write(records, self, piece)?);
            }
            if let [root] = children.as_slice() {
                return Ok(Some(NewRoot {
                    id: root.id,
                    height,
                    entries: root.count,
                }));
            }
            assert!(
                height < MAX_HEIGHT,
                "a tree of height {MAX_HEIGHT} holds at least 2^63 entries"
            );
            height += 1;
            pieces = self.split(Node::Internal(children));
        }
    }

    /// `node` cut into nodes that each fit the limits or hold a single item (in order).
    fn split(&self, node: Node) -> Vec<Node> {
        let count = node.count();
        let mut pieces = Vec::with_capacity(2);
        self.split_into(node, &mut pieces);
        debug_assert_eq!(
            pieces.iter().map(Node::count).sum::<u64>(),
            count,
            "splitting keeps every entry"
        );
        pieces
    }

    fn split_into(&self, mut node: Node, pieces: &mut Vec<Node>) {
        if node.items() <= 1 || self.limits.fits(&node) {
            pieces.push(node);
            return;
        }
        let right = node.split_off(self.split_point(&node));
        self.split_into(node, pieces);
        self.split_into(right, pieces);
    }

    /// Where to halve an oversized node (of at least two items): at the byte midpoint when it
    /// is over the byte budget, else at the item midpoint. Both sides get an item.
    fn split_point(&self, node: &Node) -> usize {
        let items = node.items();
        if node.encoded_len() <= self.limits.max_node_bytes {
            return items / 2;
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

impl Writer {
    /// Writes `node` under a fresh id; the pointer its parent stores.
    fn write(&mut self, records: &mut impl Records, tree: &Tree, node: Node) -> Result<Child> {
        debug_assert!(
            node.items() >= if node.is_leaf() { 1 } else { 2 },
            "a written leaf has an entry, an internal node two children"
        );
        let id = self.next_node;
        self.next_node = id.checked_add(1).expect("node ids (u64) never run out");
        self.buf.clear();
        node.encode(&mut self.buf);
        records.put(&tree.key(id), &self.buf)?;
        self.written.push(id);
        Ok(Child {
            id,
            count: node.count(),
            first: node.first(tree.limits.separator_bytes),
        })
    }
}

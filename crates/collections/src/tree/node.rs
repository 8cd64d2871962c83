//! Node records of a [`super::Tree`]: their encoding and decoding, and the byte and item
//! arithmetic that the tree's split and merge rules are stated in.
//!
//! Formats (integers little-endian, `bytes` = `[len u32][bytes]`):
//! - leaf: `[kind u8 = 0][count u32]` then `count` entries as `bytes`;
//! - internal: `[kind u8 = 1][count u32]` then `count` children, each
//!   `[node id u64][subtree entries u64][truncated u8][separator bytes]`.
//!
//! Decoding accepts only what the tree writes: a leaf has at least one entry, an internal node at
//! least two children, each child a non-zero id and at least one entry, the counts sum within a
//! `u64`, a truncated flag is 0 or 1, and no byte is left over.

use std::cmp::Ordering;

use crate::{put_bytes, take_bytes, take_u32, take_u64, Error, Result};

/// Kind byte of a leaf.
const LEAF: u8 = 0;
/// Kind byte of an internal node.
const INTERNAL: u8 = 1;
/// Kind and count.
pub(super) const NODE_HEAD_BYTES: usize = 1 + 4;
/// Length prefix of a leaf entry.
const ENTRY_OVERHEAD: usize = 4;
/// Id, entry count, truncated flag and separator length of a child.
pub(super) const CHILD_OVERHEAD: usize = 8 + 8 + 1 + 4;

/// A subtree's smallest entry as its parent stores it: whole when it is at most the tree's
/// separator limit long, else its first `limit` bytes with `truncated` set. Bounding it keeps
/// internal nodes small and their fanout high whatever the entries' sizes (a list of 1 MiB
/// elements would otherwise copy whole elements into every internal node on the path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Separator {
    pub(super) bytes: Vec<u8>,
    pub(super) truncated: bool,
}

impl Separator {
    /// The separator of a subtree whose smallest entry is `entry`.
    pub(super) fn of(entry: &[u8], limit: usize) -> Separator {
        Separator {
            bytes: entry[..entry.len().min(limit)].to_vec(),
            truncated: entry.len() > limit,
        }
    }

    /// How the subtree's smallest entry compares with `probe`, or `None` when the stored prefix
    /// cannot tell (it is truncated and `probe` extends it): then only the entry itself can.
    pub(super) fn compare(&self, probe: &[u8]) -> Option<Ordering> {
        compare_separator(&self.bytes, self.truncated, probe)
    }
}

/// A child pointer of an internal node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Child {
    pub(super) id: u64,
    /// Entries in the child's subtree.
    pub(super) count: u64,
    /// The subtree's smallest entry (in position order: its first).
    pub(super) first: Separator,
}

/// A decoded node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Node {
    Leaf(Vec<Vec<u8>>),
    Internal(Vec<Child>),
}

impl Node {
    pub(super) fn is_leaf(&self) -> bool {
        matches!(self, Node::Leaf(_))
    }

    /// Entries (leaf) or children (internal).
    pub(super) fn items(&self) -> usize {
        match self {
            Node::Leaf(entries) => entries.len(),
            Node::Internal(children) => children.len(),
        }
    }

    /// Encoded bytes of item `index`.
    pub(super) fn item_bytes(&self, index: usize) -> usize {
        match self {
            Node::Leaf(entries) => ENTRY_OVERHEAD + entries[index].len(),
            Node::Internal(children) => CHILD_OVERHEAD + children[index].first.bytes.len(),
        }
    }

    /// Bytes of the encoded node.
    pub(super) fn encoded_len(&self) -> usize {
        NODE_HEAD_BYTES
            + (0..self.items())
                .map(|index| self.item_bytes(index))
                .sum::<usize>()
    }

    /// Entries in the subtree (decoding checked that the sum fits).
    pub(super) fn count(&self) -> u64 {
        match self {
            Node::Leaf(entries) => entries.len() as u64,
            Node::Internal(children) => children.iter().map(|child| child.count).sum(),
        }
    }

    /// The separator a parent stores for this node.
    pub(super) fn first(&self, limit: usize) -> Separator {
        match self {
            Node::Leaf(entries) => Separator::of(
                entries
                    .first()
                    .expect("a node being written is never empty"),
                limit,
            ),
            Node::Internal(children) => children
                .first()
                .expect("a node being written is never empty")
                .first
                .clone(),
        }
    }

    pub(super) fn entries(&self) -> &[Vec<u8>] {
        match self {
            Node::Leaf(entries) => entries,
            Node::Internal(_) => panic!("a path's last node is a leaf"),
        }
    }

    pub(super) fn entries_mut(&mut self) -> &mut Vec<Vec<u8>> {
        match self {
            Node::Leaf(entries) => entries,
            Node::Internal(_) => panic!("a path's last node is a leaf"),
        }
    }

    pub(super) fn children(&self) -> &[Child] {
        match self {
            Node::Internal(children) => children,
            Node::Leaf(_) => panic!("a node above the leaf level is internal"),
        }
    }

    pub(super) fn children_mut(&mut self) -> &mut Vec<Child> {
        match self {
            Node::Internal(children) => children,
            Node::Leaf(_) => panic!("a node above the leaf level is internal"),
        }
    }

    /// Moves items `at..` into a new node of the same kind.
    pub(super) fn split_off(&mut self, at: usize) -> Node {
        match self {
            Node::Leaf(entries) => Node::Leaf(entries.split_off(at)),
            Node::Internal(children) => Node::Internal(children.split_off(at)),
        }
    }

    /// Appends the items of `other`, a node of the same level.
    pub(super) fn append(&mut self, other: Node) {
        match (self, other) {
            (Node::Leaf(entries), Node::Leaf(mut more)) => entries.append(&mut more),
            (Node::Internal(children), Node::Internal(mut more)) => children.append(&mut more),
            _ => panic!("siblings are of one level, hence of one kind"),
        }
    }

    /// Appends the encoded node.
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        match self {
            Node::Leaf(entries) => {
                out.push(LEAF);
                out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
                for entry in entries {
                    put_bytes(out, entry);
                }
            }
            Node::Internal(children) => {
                out.push(INTERNAL);
                out.extend_from_slice(&(children.len() as u32).to_le_bytes());
                for child in children {
                    out.extend_from_slice(&child.id.to_le_bytes());
                    out.extend_from_slice(&child.count.to_le_bytes());
                    out.push(u8::from(child.first.truncated));
                    put_bytes(out, &child.first.bytes);
                }
            }
        }
    }

    /// Decodes a whole node record: [`scan`]'s checks, then the items copied out.
    pub(super) fn decode(bytes: &[u8]) -> Result<Node> {
        let mut items = Vec::new();
        let (leaf, _) = scan(bytes, &mut items)?;
        Ok(if leaf {
            Node::Leaf(
                items
                    .iter()
                    .map(|&(start, end)| bytes[start..end].to_vec())
                    .collect(),
            )
        } else {
            Node::Internal(
                items
                    .iter()
                    .map(|&range| {
                        let (id, count, truncated, separator) = child_at(bytes, range);
                        Child {
                            id,
                            count,
                            first: Separator {
                                bytes: separator.to_vec(),
                                truncated,
                            },
                        }
                    })
                    .collect(),
            )
        })
    }
}

/// Checks a node record (every decode goes through it), without copying its items: fills
/// `items` with each item's byte range in `bytes` (a leaf entry's after its length prefix, a
/// child's whole) and returns whether it is a leaf and the entries it holds. For paths that
/// read a node and change a few bytes of it.
pub(super) fn scan(bytes: &[u8], items: &mut Vec<(usize, usize)>) -> Result<(bool, u64)> {
    items.clear();
    let (&kind, mut rest) = bytes
        .split_first()
        .ok_or_else(|| Error::Corrupt("empty tree node".into()))?;
    let count = take_u32(&mut rest, "tree node count")? as usize;
    let offset = |rest: &[u8]| bytes.len() - rest.len();
    let total = match kind {
        LEAF => {
            if count == 0 {
                return Err(Error::Corrupt("tree leaf without entries".into()));
            }
            for _ in 0..count {
                let entry = take_bytes(&mut rest, "tree leaf entry")?;
                let end = offset(rest);
                items.push((end - entry.len(), end));
            }
            count as u64
        }
        INTERNAL => {
            if count < 2 {
                return Err(Error::Corrupt(format!(
                    "tree internal node with {count} children"
                )));
            }
            let mut total = 0u64;
            for _ in 0..count {
                let start = offset(rest);
                let id = take_u64(&mut rest, "tree child id")?;
                let entries = take_u64(&mut rest, "tree child count")?;
                let (&flag, tail) = rest
                    .split_first()
                    .ok_or_else(|| Error::Corrupt("tree child cut short".into()))?;
                rest = tail;
                if flag > 1 {
                    return Err(Error::Corrupt(format!("tree separator flag {flag}")));
                }
                take_bytes(&mut rest, "tree separator")?;
                if id == 0 || entries == 0 {
                    return Err(Error::Corrupt(format!(
                        "tree child {id} with {entries} entries"
                    )));
                }
                total = total
                    .checked_add(entries)
                    .ok_or_else(|| Error::Corrupt("tree child counts overflow".into()))?;
                items.push((start, offset(rest)));
            }
            total
        }
        kind => return Err(Error::Corrupt(format!("unknown tree node kind {kind}"))),
    };
    if !rest.is_empty() {
        return Err(Error::Corrupt(format!(
            "tree node: {} bytes after its {count} items",
            rest.len()
        )));
    }
    Ok((kind == LEAF, total))
}

/// The parts of child `range` (from [`scan`]) of an internal node's `bytes`: id, entry count,
/// whether the separator is cut, and the separator's bytes.
pub(super) fn child_at(bytes: &[u8], (start, end): (usize, usize)) -> (u64, u64, bool, &[u8]) {
    let word = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let separator = &bytes[start + CHILD_OVERHEAD..end];
    (
        word(start),
        word(start + 8),
        bytes[start + 16] == 1,
        separator,
    )
}

/// [`Separator::compare`] over a separator's bytes in place.
pub(super) fn compare_separator(bytes: &[u8], truncated: bool, probe: &[u8]) -> Option<Ordering> {
    if !truncated {
        return Some(bytes.cmp(probe));
    }
    let common = bytes.len().min(probe.len());
    match bytes.cmp(&probe[..common]) {
        // The entry is `bytes` followed by at least one more byte.
        Ordering::Equal if probe.len() > bytes.len() => None,
        Ordering::Equal => Some(Ordering::Greater),
        order => Some(order),
    }
}

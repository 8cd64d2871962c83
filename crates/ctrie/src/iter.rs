//! Iteration over a read-only snapshot.
//!
//! The walker keeps a stack of `Arc`s to the main nodes it is inside, so it owns what it walks
//! and pins the epoch only for the instant it reads a child INode's main node: a long iteration
//! never holds back memory reclamation for the rest of the process.
//!
//! Invariant: it runs only on read-only cores, whose main nodes are frozen (`gcas_read` on a
//! read-only core aborts any pending GCAS), and it yields TNode entries too — a TNode's entry is
//! live until its parent is compressed (skipping them lost keys in an earlier port).

use crate::node::{Branch, Kind, Leaf, MainNode};
use crate::protocol::Core;
use crate::sync::{clone_arc, pin};
use std::sync::Arc;

/// Walks every leaf of a read-only core.
pub(crate) struct Leaves<K, V, S> {
    core: Arc<Core<K, V, S>>,
    /// Main nodes being walked, each with the index of its next entry.
    stack: Vec<(Arc<MainNode<K, V>>, usize)>,
}

impl<K, V, S> Leaves<K, V, S>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    pub(crate) fn new(core: Arc<Core<K, V, S>>) -> Self {
        debug_assert!(core.read_only, "iteration runs on read-only snapshots only");
        let main = {
            let guard = pin();
            let root = core.read_root(false, &guard);
            let main = core.gcas_read(root, &guard);
            // SAFETY: from `gcas_read` under `guard`.
            unsafe { clone_arc(std::ptr::from_ref(main)) }
        };
        Leaves {
            core,
            stack: vec![(main, 0)],
        }
    }
}

impl<K, V, S> Iterator for Leaves<K, V, S>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    type Item = Arc<Leaf<K, V>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (node, index) = self.stack.last_mut()?;
            let position = *index;
            *index += 1;
            let child = match &node.kind {
                Kind::Branches(cnode) => match cnode.branches.get(position) {
                    Some(Branch::Single(leaf)) => return Some(leaf.clone()),
                    Some(Branch::Indirect(inode)) => inode.clone(),
                    None => {
                        self.stack.pop();
                        continue;
                    }
                },
                Kind::Tomb(leaf) => {
                    if position == 0 {
                        return Some(leaf.clone());
                    }
                    self.stack.pop();
                    continue;
                }
                Kind::List(list) => match list.entries.get(position) {
                    Some(leaf) => return Some(leaf.clone()),
                    None => {
                        self.stack.pop();
                        continue;
                    }
                },
                Kind::Failed(_) => unreachable!("gcas_read never returns a FailedNode"),
            };
            let main = {
                let guard = pin();
                let main = self.core.gcas_read(&child, &guard);
                // SAFETY: from `gcas_read` under `guard`.
                unsafe { clone_arc(std::ptr::from_ref(main)) }
            };
            self.stack.push((main, 0));
        }
    }
}

/// Iterator over `(key, value)` clones of a [`crate::ReadOnlySnapshot`]'s entries.
pub struct Iter<K, V, S> {
    leaves: Leaves<K, V, S>,
}

impl<K, V, S> Iter<K, V, S> {
    pub(crate) fn new(leaves: Leaves<K, V, S>) -> Self {
        Iter { leaves }
    }
}

impl<K, V, S> Iterator for Iter<K, V, S>
where
    K: Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    type Item = (K, V);

    fn next(&mut self) -> Option<(K, V)> {
        self.leaves
            .next()
            .map(|leaf| (leaf.key.clone(), leaf.value.clone()))
    }
}

impl<K, V, S> std::fmt::Debug for Iter<K, V, S> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Iter")
            .field("depth", &self.leaves.stack.len())
            .finish()
    }
}

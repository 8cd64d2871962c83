//! Lookup, conditional insert and conditional remove, with renewal, cleaning and contraction.
//!
//! Every operation reads the root once, takes its generation as `start_generation`, and walks
//! down. Any GCAS that fails, and any TNode met on a writable trie, *restarts* the operation
//! from a fresh root read (the `None` results below); nothing ever waits.
//!
//! - **Renewal.** An INode child older than `start_generation` belongs to a subtree shared with
//!   a snapshot. Before descending into it, the parent CNode is replaced (GCAS) by a copy whose
//!   child INodes are fresh-generation copies pointing at the same main nodes. Each CNode is so
//!   copied at most once per generation and per trie: this is the lazy, amortised part of the
//!   O(1) snapshot.
//! - **Contraction / compression.** A removal that leaves a non-root CNode with a lone SNode
//!   turns it into a TNode; the remover (or whoever meets the TNode later) replaces the dead
//!   INode in its parent by the plain SNode (`clean_parent`, `clean`).

use crate::node::{dual, locate, Branch, CNode, INode, Kind, Leaf, MainNode, BITS_PER_LEVEL};
use crate::protocol::Core;
use crate::sync::{clone_arc, Guard};
use std::borrow::Borrow;
use std::sync::Arc;

/// When a conditional insert or remove applies, given the current value (if any).
pub(crate) enum Condition<'c, V> {
    /// Always (plain `insert` / `remove`).
    Always,
    /// Only if the key is absent (`put_if_absent`).
    IfAbsent,
    /// Only if the key is present (`replace`).
    IfPresent,
    /// Only if the key is present and its value passes the test (`compare_and_replace`,
    /// `remove_if`).
    IfValue(&'c dyn Fn(&V) -> bool),
}

impl<V> Condition<'_, V> {
    fn allows(&self, current: Option<&V>) -> bool {
        match (self, current) {
            (Condition::Always, _) => true,
            (Condition::IfAbsent, current) => current.is_none(),
            (Condition::IfPresent, current) => current.is_some(),
            (Condition::IfValue(test), Some(value)) => test(value),
            (Condition::IfValue(_), None) => false,
        }
    }
}

/// Result of a conditional update: whether it applied, and the value the key had before.
pub(crate) struct Updated<V> {
    pub(crate) applied: bool,
    pub(crate) previous: Option<V>,
}

impl<K, V, S> Core<K, V, S>
where
    K: Eq + Clone + Send + Sync + 'static,
    V: Clone + Send + Sync + 'static,
{
    /// A copy of `cnode` in `generation` whose INode children are fresh copies (same main nodes)
    /// in `generation`.
    fn renewed(&self, cnode: &CNode<K, V>, generation: u64, guard: &Guard) -> CNode<K, V> {
        let branches = cnode
            .branches
            .iter()
            .map(|branch| match branch {
                Branch::Indirect(inode) => {
                    let main = self.gcas_read(inode, guard);
                    // SAFETY: `main` came from `gcas_read` under `guard`.
                    let main = unsafe { clone_arc(std::ptr::from_ref(main)) };
                    Branch::Indirect(Arc::new(INode::new(generation, main)))
                }
                Branch::Single(leaf) => Branch::Single(leaf.clone()),
            })
            .collect();
        CNode {
            bitmap: cnode.bitmap,
            branches,
            generation,
        }
    }

    /// `cnode` with every dead (TNode) child INode replaced by its entry, then contracted.
    fn compressed(
        &self,
        cnode: &CNode<K, V>,
        level: u32,
        generation: u64,
        guard: &Guard,
    ) -> MainNode<K, V> {
        let branches = cnode
            .branches
            .iter()
            .map(|branch| match branch {
                Branch::Indirect(inode) => match &self.gcas_read(inode, guard).kind {
                    Kind::Tomb(leaf) => Branch::Single(leaf.clone()),
                    _ => branch.clone(),
                },
                Branch::Single(_) => branch.clone(),
            })
            .collect();
        CNode {
            bitmap: cnode.bitmap,
            branches,
            generation,
        }
        .contracted(level)
    }

    /// Compresses the CNode under `inode` (at `level`), once; failure is fine (someone else
    /// changed it, and the caller restarts anyway).
    fn clean(&self, inode: &INode<K, V>, level: u32, guard: &Guard) {
        let main = self.gcas_read(inode, guard);
        if let Kind::Branches(cnode) = &main.kind {
            let compressed = self.compressed(cnode, level, inode.generation, guard);
            self.gcas(inode, main, compressed, guard);
        }
    }

    /// Replaces the dead `child` (whose main node is the TNode holding `tomb`) in `parent` (at
    /// `parent_level`) by the plain entry, retrying while the trie stays in `start_generation`.
    fn clean_parent(
        &self,
        parent: &INode<K, V>,
        child: &INode<K, V>,
        tomb: &Arc<Leaf<K, V>>,
        parent_level: u32,
        start_generation: u64,
        guard: &Guard,
    ) {
        loop {
            let parent_main = self.gcas_read(parent, guard);
            let Kind::Branches(cnode) = &parent_main.kind else {
                return;
            };
            let (flag, position) = locate(cnode.bitmap, tomb.hash, parent_level);
            if cnode.bitmap & flag == 0 {
                return; // somebody already removed the dead INode
            }
            match &cnode.branches[position] {
                Branch::Indirect(sub) if std::ptr::eq(Arc::as_ptr(sub), child) => {}
                _ => return, // somebody already replaced it
            }
            let updated = cnode
                .updated_at(position, Branch::Single(tomb.clone()), parent.generation)
                .contracted(parent_level);
            if self.gcas(parent, parent_main, updated, guard)
                || self.read_root(false, guard).generation != start_generation
            {
                return;
            }
        }
    }

    /// Looks `key` up below `root`; `None` means restart.
    pub(crate) fn lookup<'g, Q>(
        &self,
        root: &'g INode<K, V>,
        key: &Q,
        hash: u64,
        guard: &'g Guard,
    ) -> Option<Option<V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let start_generation = root.generation;
        let mut inode = root;
        let mut parent: Option<&INode<K, V>> = None;
        let mut level = 0;
        loop {
            let main = self.gcas_read(inode, guard);
            match &main.kind {
                Kind::Branches(cnode) => {
                    let (flag, position) = locate(cnode.bitmap, hash, level);
                    if cnode.bitmap & flag == 0 {
                        return Some(None);
                    }
                    match &cnode.branches[position] {
                        Branch::Indirect(child) => {
                            if self.read_only || child.generation == start_generation {
                                parent = Some(inode);
                                inode = child;
                                level += BITS_PER_LEVEL;
                            } else {
                                let renewed = self.renewed(cnode, start_generation, guard);
                                let renewed = MainNode::new(Kind::Branches(renewed));
                                if !self.gcas(inode, main, renewed, guard) {
                                    return None;
                                }
                            }
                        }
                        Branch::Single(leaf) => {
                            let found = leaf.hash == hash && leaf.key.borrow() == key;
                            return Some(found.then(|| leaf.value.clone()));
                        }
                    }
                }
                Kind::Tomb(leaf) => {
                    if self.read_only {
                        let found = leaf.hash == hash && leaf.key.borrow() == key;
                        return Some(found.then(|| leaf.value.clone()));
                    }
                    let parent = parent.expect("the root never holds a TNode");
                    self.clean(parent, level - BITS_PER_LEVEL, guard);
                    return None;
                }
                Kind::List(list) => return Some(list.find(key).map(|leaf| leaf.value.clone())),
                Kind::Failed(_) => unreachable!("gcas_read never returns a FailedNode"),
            }
        }
    }

    /// Inserts `leaf` below `root` if `condition` allows; `None` means restart.
    pub(crate) fn insert<'g>(
        &self,
        root: &'g INode<K, V>,
        leaf: &Arc<Leaf<K, V>>,
        condition: &Condition<'_, V>,
        guard: &'g Guard,
    ) -> Option<Updated<V>> {
        let start_generation = root.generation;
        let hash = leaf.hash;
        let mut inode = root;
        let mut parent: Option<&INode<K, V>> = None;
        let mut level = 0;
        loop {
            let main = self.gcas_read(inode, guard);
            let new_main = match &main.kind {
                Kind::Branches(cnode) => {
                    let (flag, position) = locate(cnode.bitmap, hash, level);
                    if cnode.bitmap & flag == 0 {
                        if !condition.allows(None) {
                            return Some(Updated {
                                applied: false,
                                previous: None,
                            });
                        }
                        let base = self.current_generation(cnode, inode.generation, guard);
                        let base = base.as_ref().unwrap_or(cnode);
                        let inserted = base.inserted_at(
                            position,
                            flag,
                            Branch::Single(leaf.clone()),
                            inode.generation,
                        );
                        let applied =
                            self.gcas(inode, main, MainNode::new(Kind::Branches(inserted)), guard);
                        return applied.then_some(Updated {
                            applied,
                            previous: None,
                        });
                    }
                    match &cnode.branches[position] {
                        Branch::Indirect(child) => {
                            if child.generation == start_generation {
                                parent = Some(inode);
                                inode = child;
                                level += BITS_PER_LEVEL;
                                continue;
                            }
                            MainNode::new(Kind::Branches(self.renewed(
                                cnode,
                                start_generation,
                                guard,
                            )))
                        }
                        Branch::Single(existing)
                            if existing.hash == hash && existing.key == leaf.key =>
                        {
                            if !condition.allows(Some(&existing.value)) {
                                let previous = Some(existing.value.clone());
                                return Some(Updated {
                                    applied: false,
                                    previous,
                                });
                            }
                            let updated = cnode.updated_at(
                                position,
                                Branch::Single(leaf.clone()),
                                inode.generation,
                            );
                            let applied = self.gcas(
                                inode,
                                main,
                                MainNode::new(Kind::Branches(updated)),
                                guard,
                            );
                            return applied.then(|| Updated {
                                applied,
                                previous: Some(existing.value.clone()),
                            });
                        }
                        Branch::Single(existing) => {
                            if !condition.allows(None) {
                                return Some(Updated {
                                    applied: false,
                                    previous: None,
                                });
                            }
                            let base = self.current_generation(cnode, inode.generation, guard);
                            let base = base.as_ref().unwrap_or(cnode);
                            let below = dual(
                                existing.clone(),
                                leaf.clone(),
                                level + BITS_PER_LEVEL,
                                inode.generation,
                            );
                            let sub = Arc::new(INode::new(inode.generation, Arc::new(below)));
                            let updated =
                                base.updated_at(position, Branch::Indirect(sub), inode.generation);
                            let applied = self.gcas(
                                inode,
                                main,
                                MainNode::new(Kind::Branches(updated)),
                                guard,
                            );
                            return applied.then_some(Updated {
                                applied,
                                previous: None,
                            });
                        }
                    }
                }
                Kind::Tomb(_) => {
                    let parent = parent.expect("the root never holds a TNode");
                    self.clean(parent, level - BITS_PER_LEVEL, guard);
                    return None;
                }
                Kind::List(list) => {
                    let existing = list.find(&leaf.key);
                    let previous = existing.map(|entry| entry.value.clone());
                    if !condition.allows(previous.as_ref()) {
                        return Some(Updated {
                            applied: false,
                            previous,
                        });
                    }
                    let inserted = MainNode::new(Kind::List(list.inserted(leaf.clone())));
                    let applied = self.gcas(inode, main, inserted, guard);
                    return applied.then_some(Updated { applied, previous });
                }
                Kind::Failed(_) => unreachable!("gcas_read never returns a FailedNode"),
            };
            // Renewal of `inode`'s CNode: retry at the same level, or restart if it failed.
            if !self.gcas(inode, main, new_main, guard) {
                return None;
            }
        }
    }

    /// `cnode` renewed into `generation` if it is from an older one (`None`: already current).
    fn current_generation(
        &self,
        cnode: &CNode<K, V>,
        generation: u64,
        guard: &Guard,
    ) -> Option<CNode<K, V>> {
        (cnode.generation != generation).then(|| self.renewed(cnode, generation, guard))
    }

    /// Removes `key` below `root` if `condition` allows; `None` means restart.
    pub(crate) fn remove<'g, Q>(
        &self,
        root: &'g INode<K, V>,
        key: &Q,
        hash: u64,
        condition: &Condition<'_, V>,
        guard: &'g Guard,
    ) -> Option<Updated<V>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        let start_generation = root.generation;
        let mut inode = root;
        let mut parent: Option<&INode<K, V>> = None;
        let mut level = 0;
        let not_applied = |previous: Option<&V>| {
            Some(Updated {
                applied: false,
                previous: previous.cloned(),
            })
        };
        loop {
            let main = self.gcas_read(inode, guard);
            let removed_value = match &main.kind {
                Kind::Branches(cnode) => {
                    let (flag, position) = locate(cnode.bitmap, hash, level);
                    if cnode.bitmap & flag == 0 {
                        return not_applied(None);
                    }
                    match &cnode.branches[position] {
                        Branch::Indirect(child) => {
                            if child.generation == start_generation {
                                parent = Some(inode);
                                inode = child;
                                level += BITS_PER_LEVEL;
                            } else {
                                let renewed = self.renewed(cnode, start_generation, guard);
                                if !self.gcas(
                                    inode,
                                    main,
                                    MainNode::new(Kind::Branches(renewed)),
                                    guard,
                                ) {
                                    return None;
                                }
                            }
                            continue;
                        }
                        Branch::Single(leaf) => {
                            if leaf.hash != hash || leaf.key.borrow() != key {
                                return not_applied(None);
                            }
                            if !condition.allows(Some(&leaf.value)) {
                                return not_applied(Some(&leaf.value));
                            }
                            let removed = cnode
                                .removed_at(position, flag, inode.generation)
                                .contracted(level);
                            if !self.gcas(inode, main, removed, guard) {
                                return None;
                            }
                            leaf.value.clone()
                        }
                    }
                }
                Kind::Tomb(_) => {
                    let parent = parent.expect("the root never holds a TNode");
                    self.clean(parent, level - BITS_PER_LEVEL, guard);
                    return None;
                }
                Kind::List(list) => {
                    let Some(existing) = list.find(key) else {
                        return not_applied(None);
                    };
                    if !condition.allows(Some(&existing.value)) {
                        return not_applied(Some(&existing.value));
                    }
                    if !self.gcas(inode, main, list.removed(key), guard) {
                        return None;
                    }
                    existing.value.clone()
                }
                Kind::Failed(_) => unreachable!("gcas_read never returns a FailedNode"),
            };
            // The removal committed. If it left `inode` dead, pull its entry up into the parent.
            if let Some(parent) = parent {
                if let Kind::Tomb(tomb) = &self.gcas_read(inode, guard).kind {
                    let parent_level = level - BITS_PER_LEVEL;
                    self.clean_parent(parent, inode, tomb, parent_level, start_generation, guard);
                }
            }
            return Some(Updated {
                applied: true,
                previous: Some(removed_value),
            });
        }
    }
}

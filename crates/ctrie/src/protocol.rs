//! GCAS (generation compare-and-swap) on INodes and RDCSS on the root slot.
//!
//! **GCAS** `gcas(inode, old, new)` swings `inode.main` from `old` to `new` and *commits* only
//! if, when the decision is taken, the trie's root still has `inode`'s generation. `new.prev`
//! holds `old` while undecided; committing nulls `prev`, aborting replaces it with a FailedNode
//! and the INode is rolled back to `old`. Any thread that meets an undecided node finishes the
//! decision ([`Core::gcas_complete`]), so no thread ever waits for another. Every read of
//! `main` goes through [`Core::gcas_read`] (a pitfall of an earlier Rust port).
//!
//! **RDCSS** `rdcss_root(old, expected, new)` swings the root slot from INode `old` to `new` if
//! `old`'s main node is still `expected` (by identity, never by value). The root slot holds a
//! [`Descriptor`] while undecided; the decision is one CAS on the descriptor's state, so the
//! owner and its helpers always agree on the outcome.
//!
//! Linearization: a committed GCAS takes effect at its CAS on `main` (the commit only confirms
//! that no snapshot intervened between that CAS and the generation check); a committed RDCSS
//! takes effect when its descriptor is decided COMMITTED. Why this is enough: a GCAS that
//! swung `main` *before* the snapshot decided is still undecided or already committed when the
//! snapshot's RDCSS reads `old.main` through `gcas_read`; reading it finishes the GCAS, and a
//! GCAS finished while a descriptor sits in the root aborts the descriptor (`read_root` with
//! `abort`), so the snapshot retries. A GCAS whose generation check runs *after* the snapshot
//! committed sees a newer root generation and aborts. So every write is either in both tries
//! or in neither.
//!
//! Memory: see `sync`'s retirement rule; every successful CAS below retires the count the field
//! held on the value it replaced.

use crate::node::{Descriptor, INode, Kind, MainNode, ABORTED, COMMITTED, UNDECIDED};
use crate::sync::{clone_arc, fence, protected, AtomicUsize, Guard};
use std::marker::PhantomData;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;

/// Low bit of the root slot: set when it holds a [`Descriptor`] rather than an [`INode`].
const DESCRIPTOR_TAG: usize = 1;

/// A trie: its root slot, whether it is a read-only snapshot, and its hasher.
pub(crate) struct Core<K, V, S> {
    /// An `Arc<INode>` or (tagged) `Arc<Descriptor>` pointer; owns one count of it.
    root: AtomicUsize,
    pub(crate) read_only: bool,
    pub(crate) hasher: S,
    /// Auto traits follow what the trie really holds (raw pointers in atomics would say
    /// `Send + Sync` for any `K`, `V`).
    _owns: PhantomData<Arc<MainNode<K, V>>>,
}

impl<K, V, S> Core<K, V, S>
where
    K: Send + Sync + 'static,
    V: Send + Sync + 'static,
{
    pub(crate) fn new(root: Arc<INode<K, V>>, read_only: bool, hasher: S) -> Core<K, V, S> {
        let pointer = Arc::into_raw(root) as usize;
        debug_assert_eq!(pointer & DESCRIPTOR_TAG, 0, "INodes are at least 2-aligned");
        Core {
            root: AtomicUsize::new(pointer),
            read_only,
            hasher,
            _owns: PhantomData,
        }
    }

    /// The main node of `inode`, finishing a pending GCAS on it first.
    #[inline]
    pub(crate) fn gcas_read<'g>(
        &self,
        inode: &INode<K, V>,
        guard: &'g Guard,
    ) -> &'g MainNode<K, V> {
        let main = inode.main.load(SeqCst);
        // SAFETY: loaded from a shared field while pinned.
        let main_ref = unsafe { protected(main, guard) };
        if main_ref.prev.load(SeqCst).is_null() {
            main_ref
        } else {
            self.gcas_complete(inode, main, guard)
        }
    }

    /// Decides the GCAS that installed `main` in `inode` (if still undecided) and returns the
    /// main node `inode` holds once decided.
    fn gcas_complete<'g>(
        &self,
        inode: &INode<K, V>,
        mut main: *mut MainNode<K, V>,
        guard: &'g Guard,
    ) -> &'g MainNode<K, V> {
        loop {
            // SAFETY: `main` was loaded from `inode.main` while pinned.
            let main_ref = unsafe { protected(main, guard) };
            let prev = main_ref.prev.load(SeqCst);
            if prev.is_null() {
                return main_ref;
            }
            // Read the root after `prev` (as the algorithm requires), aborting any snapshot in
            // progress: a GCAS must never be decided against a half-installed root. The fence
            // orders the CAS on `main` that installed this node before the root read; RDCSS has
            // the mirror fence between its CAS on the root and its read of `main`. Without the
            // pair, both could read the other's location stale (store buffering) and a write
            // would commit in a generation a snapshot already froze.
            fence(SeqCst);
            let root = self.read_root(true, guard);
            // SAFETY: `prev` is owned by `main_ref.prev`, and `main_ref` is protected.
            let prev_ref = unsafe { protected(prev, guard) };
            if let Kind::Failed(previous) = &prev_ref.kind {
                // Aborted: roll `inode` back to the node the GCAS replaced.
                let target = Arc::into_raw(previous.clone()).cast_mut();
                match inode.main.compare_exchange(main, target, SeqCst, SeqCst) {
                    Ok(_) => {
                        // SAFETY: the count `inode.main` held on `main` is ours to retire.
                        unsafe { guard.defer_release(main.cast_const()) };
                        // SAFETY: `target` is now owned by `inode.main` and we are pinned.
                        return unsafe { protected(target, guard) };
                    }
                    Err(current) => {
                        // SAFETY: `target` was never published.
                        drop(unsafe { Arc::from_raw(target) });
                        main = current;
                        continue;
                    }
                }
            }
            if root.generation == inode.generation && !self.read_only {
                if main_ref
                    .prev
                    .compare_exchange(prev, std::ptr::null_mut(), SeqCst, SeqCst)
                    .is_ok()
                {
                    // SAFETY: `prev`'s count was owned by the field we just cleared.
                    unsafe { guard.defer_release(prev.cast_const()) };
                    return main_ref;
                }
                // Somebody else decided; look again.
                continue;
            }
            // A snapshot intervened (or this is a read-only trie): abort.
            // SAFETY: `prev` is protected (see above).
            let failed = Arc::new(MainNode::new(Kind::Failed(unsafe { clone_arc(prev) })));
            let failed = Arc::into_raw(failed).cast_mut();
            match main_ref.prev.compare_exchange(prev, failed, SeqCst, SeqCst) {
                // SAFETY: the count `prev` field held is now ours to retire.
                Ok(_) => unsafe { guard.defer_release(prev.cast_const()) },
                // SAFETY: `failed` was never published.
                Err(_) => drop(unsafe { Arc::from_raw(failed) }),
            }
            main = inode.main.load(SeqCst);
        }
    }

    /// Swings `inode.main` from `old` to `new`; true if the change committed.
    pub(crate) fn gcas(
        &self,
        inode: &INode<K, V>,
        old: &MainNode<K, V>,
        new: MainNode<K, V>,
        guard: &Guard,
    ) -> bool {
        let old_pointer = std::ptr::from_ref(old).cast_mut();
        // SAFETY: `old` is protected by `guard` (callers got it from `gcas_read`).
        let old_count = unsafe { clone_arc(old_pointer.cast_const()) };
        new.prev.store(Arc::into_raw(old_count).cast_mut(), SeqCst);
        let new_pointer = Arc::into_raw(Arc::new(new)).cast_mut();
        match inode
            .main
            .compare_exchange(old_pointer, new_pointer, SeqCst, SeqCst)
        {
            Ok(_) => {
                // SAFETY: the count `inode.main` held on `old` is ours to retire.
                unsafe { guard.defer_release(old_pointer.cast_const()) };
                self.gcas_complete(inode, new_pointer, guard);
                // SAFETY: `new_pointer` is published and we are pinned.
                let new_ref = unsafe { protected(new_pointer, guard) };
                new_ref.prev.load(SeqCst).is_null()
            }
            Err(_) => {
                // SAFETY: never published; dropping it also drops its count on `old`.
                drop(unsafe { Arc::from_raw(new_pointer) });
                false
            }
        }
    }

    /// The root INode, finishing (or with `abort`, aborting) an RDCSS in progress.
    #[inline]
    pub(crate) fn read_root<'g>(&self, abort: bool, guard: &'g Guard) -> &'g INode<K, V> {
        let root = self.root.load(SeqCst);
        if root & DESCRIPTOR_TAG == 0 {
            // SAFETY: loaded from the root slot while pinned.
            unsafe { protected(root as *const INode<K, V>, guard) }
        } else {
            self.rdcss_complete(abort, guard).0
        }
    }

    /// The root INode and its `Arc` pointer (for callers that need an owned count of it).
    pub(crate) fn read_root_pointer<'g>(
        &self,
        guard: &'g Guard,
    ) -> (&'g INode<K, V>, *const INode<K, V>) {
        let root = self.root.load(SeqCst);
        if root & DESCRIPTOR_TAG == 0 {
            let pointer = root as *const INode<K, V>;
            // SAFETY: loaded from the root slot while pinned.
            (unsafe { protected(pointer, guard) }, pointer)
        } else {
            self.rdcss_complete(false, guard)
        }
    }

    fn rdcss_complete<'g>(
        &self,
        abort: bool,
        guard: &'g Guard,
    ) -> (&'g INode<K, V>, *const INode<K, V>) {
        loop {
            let root = self.root.load(SeqCst);
            if root & DESCRIPTOR_TAG == 0 {
                let pointer = root as *const INode<K, V>;
                // SAFETY: loaded from the root slot while pinned.
                return (unsafe { protected(pointer, guard) }, pointer);
            }
            let descriptor_pointer = (root & !DESCRIPTOR_TAG) as *const Descriptor<K, V>;
            // SAFETY: loaded from the root slot while pinned.
            let descriptor = unsafe { protected(descriptor_pointer, guard) };
            let decision = if abort {
                descriptor.decide(ABORTED)
            } else if descriptor.state.load(SeqCst) == UNDECIDED {
                // Mirror of the fence in `gcas_complete`: the root CAS that installed the
                // descriptor is ordered before this read of the old root's `main`.
                fence(SeqCst);
                let current = self.gcas_read(&descriptor.old, guard);
                let unchanged = std::ptr::eq(current, Arc::as_ptr(&descriptor.expected));
                descriptor.decide(if unchanged { COMMITTED } else { ABORTED })
            } else {
                descriptor.state.load(SeqCst)
            };
            let target = if decision == COMMITTED {
                &descriptor.new
            } else {
                &descriptor.old
            };
            let target_pointer = Arc::into_raw(target.clone());
            match self
                .root
                .compare_exchange(root, target_pointer as usize, SeqCst, SeqCst)
            {
                Ok(_) => {
                    // SAFETY: the root slot's count on the descriptor is ours to retire.
                    unsafe { guard.defer_release(descriptor_pointer) };
                    // SAFETY: now owned by the root slot; we are pinned.
                    return (unsafe { protected(target_pointer, guard) }, target_pointer);
                }
                Err(_) => {
                    // SAFETY: never published.
                    drop(unsafe { Arc::from_raw(target_pointer) });
                }
            }
        }
    }

    /// Swings the root from `old` to `new` if `old`'s main node is still `expected`.
    pub(crate) fn rdcss_root(
        &self,
        old: *const INode<K, V>,
        expected: &MainNode<K, V>,
        new: Arc<INode<K, V>>,
        guard: &Guard,
    ) -> bool {
        // SAFETY (both counts): `old` is the root INode read while pinned, and `expected`
        // came from `gcas_read` under `guard`.
        let descriptor = Descriptor::new(
            unsafe { clone_arc(old) },
            unsafe { clone_arc(std::ptr::from_ref(expected)) },
            new,
        );
        let descriptor_pointer = Arc::into_raw(Arc::new(descriptor));
        let tagged = descriptor_pointer as usize | DESCRIPTOR_TAG;
        debug_assert_eq!(descriptor_pointer as usize & DESCRIPTOR_TAG, 0);
        match self
            .root
            .compare_exchange(old as usize, tagged, SeqCst, SeqCst)
        {
            Ok(_) => {
                // SAFETY: the root slot's count on `old` is ours to retire.
                unsafe { guard.defer_release(old) };
                self.rdcss_complete(false, guard);
                // SAFETY: the descriptor's retirement is deferred past our guard.
                let descriptor = unsafe { protected(descriptor_pointer, guard) };
                let decision = descriptor.state.load(SeqCst);
                debug_assert_ne!(decision, UNDECIDED, "the root moved on, so it was decided");
                decision == COMMITTED
            }
            Err(_) => {
                // SAFETY: never published.
                drop(unsafe { Arc::from_raw(descriptor_pointer) });
                false
            }
        }
    }
}

impl<K, V, S> Drop for Core<K, V, S> {
    fn drop(&mut self) {
        let root = self.root.load(SeqCst);
        // Every operation finishes the descriptor it installs before returning, so a trie being
        // dropped (no borrows left) holds an INode; release a descriptor correctly anyway.
        if root & DESCRIPTOR_TAG == 0 {
            // SAFETY: the slot's count; `&mut self` means nobody else reads the slot.
            drop(unsafe { Arc::from_raw(root as *const INode<K, V>) });
        } else {
            // SAFETY: as above, for a descriptor.
            drop(unsafe { Arc::from_raw((root & !DESCRIPTOR_TAG) as *const Descriptor<K, V>) });
        }
    }
}

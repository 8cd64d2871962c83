//! DPR finders (§3.3–3.4): turn persisted versions (and their dependencies) into a published DPR
//! cut. All three sit on a [`MetadataStore`], which is the fault-tolerant consensus point: the
//! cut is published there atomically and only ever grows within a world-line.
//!
//! - [`ExactFinder`]: persists every version's dependency set, so the precedence graph survives a
//!   finder restart and workers in other processes can record versions straight into the store;
//!   computes the maximal closed cut. Most precise; the store's write volume grows
//!   with the number of dependencies (quadratic in cluster size at worst).
//! - [`ApproximateFinder`]: persists only version numbers; cut = each worker's newest persisted
//!   version not above `Vmin` (the minimum over workers of their newest persisted version). Cheap
//!   and stateless, but a slow worker holds everyone back; workers read `Vmax` and fast-forward.
//! - [`HybridFinder`]: the graph lives in memory only (versions are persisted as in the
//!   approximate finder); the cut is the union of the exact and approximate cuts. After a finder
//!   restart the lost part of the graph is opaque, the approximate cut carries progress past it,
//!   and the exact cut takes over again. Dependencies reach it only through its own
//!   `report_persisted`, so workers must report to the finder instance (in process, or over a
//!   transport the application provides); versions written straight into the store commit only
//!   through the approximate part.

mod graph;

pub use graph::{approximate_cut, PrecedenceGraph};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::metadata::{MetadataError, MetadataStore, PersistedVersion};
use crate::{ClusterState, Cut, Version, WorkerId, WorkerVersion, WorldLine};

/// The finder contract used by workers, sessions' hosts and the cluster manager.
pub trait DprFinder: Send + Sync {
    /// The metadata store the finder publishes into.
    fn store(&self) -> &Arc<dyn MetadataStore>;
    /// Records that `version` (made in `world_line`) is durable, with its dependency set. Returns
    /// false if the world-line is no longer current (the report is dropped).
    fn report_persisted(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: &[WorkerVersion],
    ) -> Result<bool, MetadataError>;
    /// Recomputes the cut and publishes it if it grew (not during a recovery). Returns the state.
    fn refresh(&self) -> Result<ClusterState, MetadataError>;
    /// The published state, without recomputing.
    fn cluster_state(&self) -> Result<ClusterState, MetadataError> {
        self.store().cluster_state()
    }
    /// See [`MetadataStore::rollback_target`]: what a session on world-line `from` must use in
    /// [`DprSession::handle_rollback`](crate::DprSession::handle_rollback).
    fn rollback_target(&self, from: WorldLine) -> Result<ClusterState, MetadataError> {
        self.store().rollback_target(from)
    }
    /// `Vmax`: the largest persisted version; lagging workers fast-forward to it.
    fn max_version(&self) -> Result<Version, MetadataError> {
        self.store().max_version()
    }
}

fn union(a: &Cut, b: &Cut) -> Cut {
    let mut out = a.clone();
    for (&worker, &version) in b {
        let entry = out.entry(worker).or_insert(0);
        *entry = (*entry).max(version);
    }
    out
}

fn publish_if_grown(
    store: &dyn MetadataStore,
    state: &ClusterState,
    cut: Cut,
) -> Result<ClusterState, MetadataError> {
    debug_assert!(state
        .cut
        .iter()
        .all(|(w, v)| cut.get(w).copied().unwrap_or(0) >= *v));
    if cut == state.cut {
        return Ok(state.clone());
    }
    if store.publish_cut(state.world_line, &cut)? {
        return Ok(ClusterState {
            world_line: state.world_line,
            cut,
            recovering: false,
        });
    }
    store.cluster_state()
}

fn graph_from(
    persisted: &[PersistedVersion],
    workers: impl IntoIterator<Item = WorkerId>,
) -> PrecedenceGraph {
    let mut graph = PrecedenceGraph::new();
    for worker in workers {
        graph.add_worker(worker);
    }
    for version in persisted {
        graph.insert(version.version, version.dependencies.clone());
    }
    graph
}

fn approximate_from_store(
    store: &dyn MetadataStore,
    state: &ClusterState,
) -> Result<Cut, MetadataError> {
    let workers: BTreeSet<WorkerId> = store.workers()?.iter().map(|w| w.worker).collect();
    let mut persisted: BTreeMap<WorkerId, BTreeSet<Version>> = BTreeMap::new();
    for version in store.persisted_versions()? {
        persisted
            .entry(version.version.worker)
            .or_default()
            .insert(version.version.version);
    }
    Ok(approximate_cut(&workers, &persisted, &state.cut).0)
}

/// The exact finder: the whole precedence graph is persisted; see the module docs. Every
/// refresh reads the graph above the cut from the store, so workers in other processes may record
/// their versions straight into the store ([`MetadataStore::add_persisted_version`]) and several
/// finder instances may run; the store serialises their cut updates.
pub struct ExactFinder {
    store: Arc<dyn MetadataStore>,
    /// Serialises this instance's refreshes (the store serialises across instances).
    refreshing: Mutex<()>,
}

impl ExactFinder {
    /// A finder over `store`.
    pub fn new(store: Arc<dyn MetadataStore>) -> Result<Self, MetadataError> {
        Ok(Self {
            store,
            refreshing: Mutex::new(()),
        })
    }
}

impl DprFinder for ExactFinder {
    fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    fn report_persisted(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: &[WorkerVersion],
    ) -> Result<bool, MetadataError> {
        self.store
            .add_persisted_version(world_line, version, Some(dependencies))
    }

    fn refresh(&self) -> Result<ClusterState, MetadataError> {
        let _guard = self.refreshing.lock();
        let state = self.store.cluster_state()?;
        if state.recovering {
            return Ok(state);
        }
        // Versions recorded after `state` was read only make the cut smaller than it could be,
        // never wrong; publish_cut refuses it if the world-line moved meanwhile.
        let graph = graph_from(&self.store.persisted_versions()?, state.cut.keys().copied());
        publish_if_grown(self.store.as_ref(), &state, graph.maximal_cut(&state.cut))
    }
}

/// The approximate finder (`Vmin` cut); see the module docs.
pub struct ApproximateFinder {
    store: Arc<dyn MetadataStore>,
}

impl ApproximateFinder {
    /// A finder over `store` (it keeps no state of its own).
    pub fn new(store: Arc<dyn MetadataStore>) -> Self {
        Self { store }
    }
}

impl DprFinder for ApproximateFinder {
    fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    fn report_persisted(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        _dependencies: &[WorkerVersion],
    ) -> Result<bool, MetadataError> {
        self.store.add_persisted_version(world_line, version, None)
    }

    fn refresh(&self) -> Result<ClusterState, MetadataError> {
        let state = self.store.cluster_state()?;
        if state.recovering {
            return Ok(state);
        }
        let cut = approximate_from_store(self.store.as_ref(), &state)?;
        publish_if_grown(self.store.as_ref(), &state, cut)
    }
}

/// The hybrid finder: exact in memory, approximate as the durable fallback; see the module docs.
pub struct HybridFinder {
    store: Arc<dyn MetadataStore>,
    graph: Mutex<(WorldLine, PrecedenceGraph)>,
}

impl HybridFinder {
    /// A finder over `store`. Versions persisted before this instance started have unknown
    /// dependencies (the previous instance's graph is gone) and commit only through the
    /// approximate cut.
    pub fn new(store: Arc<dyn MetadataStore>) -> Result<Self, MetadataError> {
        let state = store.cluster_state()?;
        let graph = graph_from(&store.persisted_versions()?, state.cut.keys().copied());
        Ok(Self {
            store,
            graph: Mutex::new((state.world_line, graph)),
        })
    }

    /// Vertices currently in the in-memory graph (for tests and monitoring).
    pub fn graph_vertex_count(&self) -> usize {
        self.graph.lock().1.vertex_count()
    }
}

impl DprFinder for HybridFinder {
    fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    fn report_persisted(
        &self,
        world_line: WorldLine,
        version: WorkerVersion,
        dependencies: &[WorkerVersion],
    ) -> Result<bool, MetadataError> {
        let mut graph = self.graph.lock();
        if !self
            .store
            .add_persisted_version(world_line, version, None)?
        {
            return Ok(false);
        }
        if graph.0 == world_line {
            graph.1.insert(version, Some(dependencies.to_vec()));
        }
        Ok(true)
    }

    fn refresh(&self) -> Result<ClusterState, MetadataError> {
        let mut graph = self.graph.lock();
        let state = self.store.cluster_state()?;
        if graph.0 != state.world_line {
            // After a rollback the in-memory dependencies above the cut are gone anyway.
            *graph = (
                state.world_line,
                graph_from(&self.store.persisted_versions()?, state.cut.keys().copied()),
            );
        }
        if state.recovering {
            return Ok(state);
        }
        let exact = graph.1.maximal_cut(&state.cut);
        let approximate = approximate_from_store(self.store.as_ref(), &state)?;
        let published = publish_if_grown(self.store.as_ref(), &state, union(&exact, &approximate))?;
        graph.1.prune(&published.cut);
        Ok(published)
    }
}

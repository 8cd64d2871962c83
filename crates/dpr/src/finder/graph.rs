//! The precedence graph and the two cut computations (§3.3 exact, §3.4 approximate).
//!
//! A vertex is a persisted worker-version. Its dependency list names worker-versions that batches
//! in it followed (directly, in some session). A token `w-v` implicitly contains all of `w`'s
//! earlier versions, so it also depends on whatever those depend on.
//!
//! A set of tokens is a DPR cut iff it is closed under dependency. Closed sets are closed under
//! union, so the maximal cut is the union (pointwise maximum) of the dependency sets of every
//! vertex whose dependency set contains only persisted vertices; that is what
//! [`PrecedenceGraph::maximal_cut`] computes with one breadth-first search per candidate vertex.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::{Cut, Version, WorkerId, WorkerVersion};

/// Persisted vertices per worker. `None` dependencies mean "persisted, dependencies unknown"
/// (a hybrid finder that restarted lost them); such a vertex can only enter a cut through the
/// approximate algorithm.
#[derive(Clone, Debug, Default)]
pub struct PrecedenceGraph {
    vertices: BTreeMap<WorkerId, BTreeMap<Version, Option<Vec<WorkerVersion>>>>,
}

impl PrecedenceGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a vertex.
    pub fn insert(&mut self, vertex: WorkerVersion, dependencies: Option<Vec<WorkerVersion>>) {
        self.vertices
            .entry(vertex.worker)
            .or_default()
            .insert(vertex.version, dependencies);
    }

    /// Makes sure `worker` appears (with no vertices yet).
    pub fn add_worker(&mut self, worker: WorkerId) {
        self.vertices.entry(worker).or_default();
    }

    /// Drops vertices at or below `cut` (they are committed and can no longer matter).
    pub fn prune(&mut self, cut: &Cut) {
        for (worker, versions) in &mut self.vertices {
            let floor = cut.get(worker).copied().unwrap_or(0);
            versions.retain(|&version, _| version > floor);
        }
    }

    /// Number of vertices held.
    pub fn vertex_count(&self) -> usize {
        self.vertices.values().map(BTreeMap::len).sum()
    }

    /// The smallest persisted version of `worker` that is `>= version`: the token that contains
    /// the operations `worker` executed in `version` (versions may skip by fast-forward).
    fn covering_version(&self, worker: WorkerId, version: Version) -> Option<Version> {
        self.vertices
            .get(&worker)?
            .range(version..)
            .next()
            .map(|(&v, _)| v)
    }

    /// The dependency set of `start` (BFS), or `None` if it reaches a vertex that is not persisted
    /// or whose dependencies are unknown and not already inside `base`.
    pub fn dependency_set(&self, start: WorkerVersion, base: &Cut) -> Option<Cut> {
        let floor = |worker: WorkerId| base.get(&worker).copied().unwrap_or(0);
        let mut closure: Cut = Cut::new();
        let mut visited: BTreeSet<WorkerVersion> = BTreeSet::new();
        let mut queue = VecDeque::from([start]);
        while let Some(vertex) = queue.pop_front() {
            if vertex.version <= floor(vertex.worker) || !visited.insert(vertex) {
                continue;
            }
            let versions = self.vertices.get(&vertex.worker)?;
            let dependencies = versions.get(&vertex.version)?.as_ref()?;
            let entry = closure.entry(vertex.worker).or_insert(0);
            *entry = (*entry).max(vertex.version);
            // The token includes the worker's earlier versions above the base. With no persisted
            // predecessor above the base, the base itself is the predecessor: workers report
            // versions in commit order, so nothing unreported lies in between.
            if let Some((&previous, _)) = versions.range(..vertex.version).next_back() {
                queue.push_back(WorkerVersion::new(vertex.worker, previous));
            }
            for dependency in dependencies {
                if dependency.version <= floor(dependency.worker) {
                    continue;
                }
                let covering = self.covering_version(dependency.worker, dependency.version)?;
                queue.push_back(WorkerVersion::new(dependency.worker, covering));
            }
        }
        Some(closure)
    }

    /// The maximal closed cut containing `base` (which must itself be closed).
    pub fn maximal_cut(&self, base: &Cut) -> Cut {
        let mut cut = base.clone();
        for (&worker, versions) in &self.vertices {
            cut.entry(worker).or_insert(0);
            // Newest first: once a vertex's dependency set is complete, every older vertex of the
            // same worker is inside it.
            for &version in versions.keys().rev() {
                if version <= cut.get(&worker).copied().unwrap_or(0) {
                    break;
                }
                if let Some(closure) =
                    self.dependency_set(WorkerVersion::new(worker, version), &cut)
                {
                    for (w, v) in closure {
                        let entry = cut.entry(w).or_insert(0);
                        *entry = (*entry).max(v);
                    }
                    break;
                }
            }
        }
        cut
    }
}

/// The approximate cut (§3.4): `Vmin` = the minimum over `workers` of each one's largest persisted
/// version; each worker's token is its largest persisted version `<= Vmin`. Correct because no
/// version depends on a larger version. Returns the cut and `Vmax`.
pub fn approximate_cut(
    workers: &BTreeSet<WorkerId>,
    persisted: &BTreeMap<WorkerId, BTreeSet<Version>>,
    base: &Cut,
) -> (Cut, Version) {
    let newest = |worker: &WorkerId| -> Version {
        let from_persisted = persisted
            .get(worker)
            .and_then(|s| s.last().copied())
            .unwrap_or(0);
        from_persisted.max(base.get(worker).copied().unwrap_or(0))
    };
    let minimum = workers.iter().map(newest).min().unwrap_or(0);
    let maximum = workers.iter().map(newest).max().unwrap_or(0);
    let mut cut = base.clone();
    for worker in workers {
        let token = persisted
            .get(worker)
            .and_then(|s| s.range(..=minimum).next_back().copied())
            .unwrap_or(0);
        let entry = cut.entry(*worker).or_insert(0);
        *entry = (*entry).max(token);
    }
    (cut, maximum)
}

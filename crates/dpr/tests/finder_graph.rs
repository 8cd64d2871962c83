//! Finder algorithms against a brute-force closure on random precedence graphs, and the paper's
//! Figure 3 trace (no cut without coordination).

use std::collections::{BTreeMap, BTreeSet};

use prefixkv_dpr::finder::{approximate_cut, PrecedenceGraph};
use prefixkv_dpr::{Cut, Version, WorkerId, WorkerVersion};
use proptest::prelude::*;

/// A random graph: per worker an increasing list of versions (gaps = fast-forward), of which a
/// prefix is persisted; each version depends on versions of other workers not above it.
#[derive(Debug, Clone)]
struct RandomGraph {
    versions: BTreeMap<WorkerId, Vec<Version>>,
    persisted_count: BTreeMap<WorkerId, usize>,
    dependencies: BTreeMap<WorkerVersion, Vec<WorkerVersion>>,
}

fn random_graph() -> impl Strategy<Value = RandomGraph> {
    (2usize..=3, proptest::collection::vec(any::<u64>(), 40)).prop_map(|(workers, seeds)| {
        let mut seed = seeds.into_iter().cycle();
        let mut next = move |bound: u64| seed.next().unwrap() % bound.max(1);
        let mut versions = BTreeMap::new();
        let mut persisted_count = BTreeMap::new();
        for worker in 0..workers as u64 {
            let count = 1 + next(4) as usize;
            let mut list = Vec::new();
            let mut version = 0;
            for _ in 0..count {
                version += 1 + next(2);
                list.push(version);
            }
            persisted_count.insert(worker, next(count as u64 + 1) as usize);
            versions.insert(worker, list);
        }
        let mut dependencies = BTreeMap::new();
        for (&worker, list) in &versions {
            for &version in list {
                let mut deps = Vec::new();
                for (&other, other_list) in &versions {
                    if other == worker || next(3) == 0 {
                        continue;
                    }
                    let eligible: Vec<Version> = other_list
                        .iter()
                        .copied()
                        .filter(|&x| x <= version)
                        .collect();
                    if !eligible.is_empty() {
                        deps.push(WorkerVersion::new(
                            other,
                            eligible[next(eligible.len() as u64) as usize],
                        ));
                    }
                }
                dependencies.insert(WorkerVersion::new(worker, version), deps);
            }
        }
        RandomGraph {
            versions,
            persisted_count,
            dependencies,
        }
    })
}

impl RandomGraph {
    fn persisted(&self, worker: WorkerId) -> &[Version] {
        &self.versions[&worker][..self.persisted_count[&worker]]
    }

    fn is_closed(&self, cut: &Cut) -> bool {
        self.versions.keys().all(|&worker| {
            let top = cut.get(&worker).copied().unwrap_or(0);
            self.persisted(worker)
                .iter()
                .filter(|&&v| v <= top)
                .all(|&v| {
                    self.dependencies[&WorkerVersion::new(worker, v)]
                        .iter()
                        .all(|d| d.version <= cut.get(&d.worker).copied().unwrap_or(0))
                })
        })
    }

    /// Union of every closed cut made of persisted tokens.
    fn brute_force_maximal(&self) -> Cut {
        let workers: Vec<WorkerId> = self.versions.keys().copied().collect();
        let mut best: Cut = workers.iter().map(|&w| (w, 0)).collect();
        let choices: Vec<Vec<Version>> = workers
            .iter()
            .map(|&w| {
                std::iter::once(0)
                    .chain(self.persisted(w).iter().copied())
                    .collect()
            })
            .collect();
        let mut index = vec![0usize; workers.len()];
        loop {
            let candidate: Cut = workers
                .iter()
                .zip(&index)
                .zip(&choices)
                .map(|((&w, &i), c)| (w, c[i]))
                .collect();
            if self.is_closed(&candidate) {
                for (w, v) in candidate {
                    let entry = best.entry(w).or_insert(0);
                    *entry = (*entry).max(v);
                }
            }
            let mut position = 0;
            loop {
                if position == index.len() {
                    return best;
                }
                index[position] += 1;
                if index[position] < choices[position].len() {
                    break;
                }
                index[position] = 0;
                position += 1;
            }
        }
    }

    fn graph(&self) -> PrecedenceGraph {
        let mut graph = PrecedenceGraph::new();
        for &worker in self.versions.keys() {
            graph.add_worker(worker);
            for &version in self.persisted(worker) {
                let vertex = WorkerVersion::new(worker, version);
                graph.insert(vertex, Some(self.dependencies[&vertex].clone()));
            }
        }
        graph
    }

    fn empty_cut(&self) -> Cut {
        self.versions.keys().map(|&w| (w, 0)).collect()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn exact_cut_equals_brute_force(graph in random_graph()) {
        let exact = graph.graph().maximal_cut(&graph.empty_cut());
        prop_assert!(graph.is_closed(&exact));
        prop_assert_eq!(exact, graph.brute_force_maximal());
    }

    #[test]
    fn approximate_cut_is_closed_and_below_exact(graph in random_graph()) {
        let workers: BTreeSet<WorkerId> = graph.versions.keys().copied().collect();
        let persisted: BTreeMap<WorkerId, BTreeSet<Version>> = workers
            .iter()
            .map(|&w| (w, graph.persisted(w).iter().copied().collect()))
            .collect();
        let (approximate, maximum) = approximate_cut(&workers, &persisted, &graph.empty_cut());
        prop_assert!(graph.is_closed(&approximate));
        let exact = graph.brute_force_maximal();
        for (worker, version) in &approximate {
            prop_assert!(*version <= exact[worker]);
        }
        let expected_max = workers.iter().map(|w| graph.persisted(*w).last().copied().unwrap_or(0)).max().unwrap();
        prop_assert_eq!(maximum, expected_max);
    }

    /// A vertex with unknown dependencies (a hybrid finder's lost subgraph) never enters the exact
    /// cut, and the result stays closed.
    #[test]
    fn opaque_vertices_block_only_what_depends_on_them(graph in random_graph(), hide in any::<prop::sample::Index>()) {
        let mut precedence = graph.graph();
        let persisted: Vec<WorkerVersion> = graph
            .versions
            .keys()
            .flat_map(|&w| graph.persisted(w).iter().map(move |&v| WorkerVersion::new(w, v)))
            .collect();
        if persisted.is_empty() {
            return Ok(());
        }
        let hidden = persisted[hide.index(persisted.len())];
        precedence.insert(hidden, None);
        let cut = precedence.maximal_cut(&graph.empty_cut());
        prop_assert!(graph.is_closed(&cut));
        prop_assert!(cut[&hidden.worker] < hidden.version);
    }
}

/// Figure 3: two single-threaded objects A (0) and B (1); a client alternates A, B, A, B...; every
/// operation depends on the one before. A commits after operations 1, 7, 13, ...; B after 4, 10,
/// 16, ... (staggered, then every 3 of its own operations). Without version coordination every
/// token depends on a later token of the other object, so beyond A-1 there is never a cut.
#[test]
fn figure_3_no_cut_without_coordination() {
    const A: WorkerId = 0;
    const B: WorkerId = 1;
    let operations = 600u64;
    let mut version = BTreeMap::from([(A, 1u64), (B, 1u64)]);
    let mut token_of = Vec::new(); // per operation: (worker, version)
    let mut graph = PrecedenceGraph::new();
    let mut dependencies: BTreeMap<WorkerVersion, BTreeSet<WorkerVersion>> = BTreeMap::new();
    for operation in 1..=operations {
        let worker = if operation % 2 == 1 { A } else { B };
        let token = WorkerVersion::new(worker, version[&worker]);
        let entry = dependencies.entry(token).or_default();
        if let Some(&previous) = token_of.last() {
            if previous != token {
                entry.insert(previous);
            }
        }
        token_of.push(token);
        let commits = (worker == A && operation % 6 == 1) || (worker == B && operation % 6 == 4);
        if commits {
            graph.insert(token, Some(dependencies[&token].iter().copied().collect()));
            *version.get_mut(&worker).unwrap() += 1;
        }
    }
    let cut = graph.maximal_cut(&Cut::from([(A, 0), (B, 0)]));
    assert_eq!(
        cut,
        Cut::from([(A, 1), (B, 0)]),
        "uncoordinated commits must not yield a cut past A-1"
    );
    assert!(
        graph.vertex_count() > 150,
        "many tokens were persisted, none usable"
    );
}

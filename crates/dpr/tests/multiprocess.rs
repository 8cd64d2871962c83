//! The SQLite metadata store shared by several real processes: concurrent writers from child
//! processes (re-executions of this test binary) while the parent runs the exact finder, and a
//! child SIGKILLed in the middle of its writes leaves the database consistent.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use prefixkv_dpr::finder::{DprFinder, ExactFinder};
use prefixkv_dpr::metadata::{MetadataStore, SqliteMetadataStore};
use prefixkv_dpr::WorkerVersion;

const CHILD_DATABASE: &str = "DPR_MULTIPROCESS_DATABASE";
const CHILD_WORKER: &str = "DPR_MULTIPROCESS_WORKER";
const CHILD_VERSIONS: &str = "DPR_MULTIPROCESS_VERSIONS";
const WORKERS: u64 = 3;

/// Child mode: worker `id` persists versions 1..=n, each depending on the previous version of the
/// next worker (a ring), printing each version once recorded.
#[test]
fn multiprocess_child() {
    let (Ok(database), Ok(worker)) = (std::env::var(CHILD_DATABASE), std::env::var(CHILD_WORKER))
    else {
        return;
    };
    let worker: u64 = worker.parse().unwrap();
    let versions: u64 = std::env::var(CHILD_VERSIONS).unwrap().parse().unwrap();
    let store = SqliteMetadataStore::open(&database).unwrap();
    for version in 1..=versions {
        let dependency = WorkerVersion::new((worker + 1) % WORKERS, version - 1);
        let dependencies: Vec<WorkerVersion> = if version > 1 {
            vec![dependency]
        } else {
            vec![]
        };
        assert!(store
            .add_persisted_version(0, WorkerVersion::new(worker, version), Some(&dependencies))
            .unwrap());
        store.heartbeat(worker, version).unwrap();
        println!("recorded {version}");
    }
}

fn spawn_child(database: &std::path::Path, worker: u64, versions: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "multiprocess_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DATABASE, database)
        .env(CHILD_WORKER, worker.to_string())
        .env(CHILD_VERSIONS, versions.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

#[test]
fn concurrent_processes_share_one_database() {
    let directory = tempfile::tempdir().unwrap();
    let database = directory.path().join("metadata.sqlite");
    let store: Arc<dyn MetadataStore> = Arc::new(SqliteMetadataStore::open(&database).unwrap());
    for worker in 0..WORKERS {
        store.register_worker(worker, 0).unwrap();
    }
    let finder = ExactFinder::new(Arc::clone(&store)).unwrap();
    let versions = 40;
    let mut children: Vec<Child> = (0..WORKERS)
        .map(|w| spawn_child(&database, w, versions))
        .collect();
    // Refresh while the children write; every published cut must be closed and monotonic.
    let mut previous = finder.refresh().unwrap().cut;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "child processes did not finish in time"
        );
        let cut = finder.refresh().unwrap().cut;
        for worker in 0..WORKERS {
            assert!(cut[&worker] >= previous[&worker]);
            // Ring dependencies: version v of w needs v-1 of the next worker.
            let next = (worker + 1) % WORKERS;
            assert!(
                cut[&worker] == 0 || cut[&next] + 1 >= cut[&worker],
                "cut not closed: {cut:?}"
            );
        }
        previous = cut;
        if children.iter_mut().all(|c| c.try_wait().unwrap().is_some()) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5)); // pacing the observer, not waiting for a result
    }
    for child in &mut children {
        assert!(child.wait().unwrap().success());
    }
    let state = finder.refresh().unwrap();
    assert!(
        state.cut.values().all(|&v| v == versions),
        "{:?}",
        state.cut
    );
}

#[test]
fn killed_writer_leaves_database_consistent() {
    use std::io::{BufRead, BufReader};
    let directory = tempfile::tempdir().unwrap();
    let database = directory.path().join("metadata.sqlite");
    {
        let store = SqliteMetadataStore::open(&database).unwrap();
        for worker in 0..WORKERS {
            store.register_worker(worker, 0).unwrap();
        }
    }
    let mut child = spawn_child(&database, 0, 100_000);
    let reader = BufReader::new(child.stdout.take().unwrap());
    let mut recorded = 0u64;
    for line in reader.lines() {
        if line.unwrap().starts_with("recorded ") {
            recorded += 1;
            if recorded == 25 {
                break;
            }
        }
    }
    child.kill().unwrap(); // SIGKILL mid-stream
    child.wait().unwrap();
    let store = SqliteMetadataStore::open(&database).unwrap();
    let persisted: Vec<u64> = store
        .persisted_versions()
        .unwrap()
        .iter()
        .filter(|p| p.version.worker == 0)
        .map(|p| {
            // Each version and its dependency row were written in one transaction.
            let expected = if p.version.version > 1 { 1 } else { 0 };
            assert_eq!(p.dependencies.as_ref().unwrap().len(), expected, "{p:?}");
            p.version.version
        })
        .collect();
    assert!(persisted.len() as u64 >= recorded);
    assert_eq!(persisted, (1..=persisted.len() as u64).collect::<Vec<_>>());
    assert!(store.workers().unwrap()[0].last_heartbeat_ms + 1 >= persisted.len() as u64);
}

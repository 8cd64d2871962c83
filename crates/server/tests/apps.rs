//! Real applications against the real server, unchanged: Celery (a worker with the Redis broker
//! and result backend), RQ (a worker, its failed-job registry, results kept in streams, its
//! scheduler) and BullMQ on Node (a queue, a worker, a delayed job, results through
//! QueueEvents). Each check program (`tests/apps/`) runs against a real redis-server first, so
//! its expectations are Redis's own, then against prefixkv-server.
//!
//! The versions are pinned (`tests/apps/python/requirements.txt`,
//! `tests/apps/node/package-lock.json`); `./scripts/test` installs them, the Python ones into
//! `target/app-checks/venv`, the Node ones into `tests/apps/node/node_modules`. A missing one
//! fails the test with what to run (never a skip).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::clients::{for_both_servers, run_check};

fn apps_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/apps")
}

/// The interpreter of the pinned Python applications: `$PREFIXKV_APPS_PYTHON`, else the
/// virtual environment `./scripts/test` makes.
fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("PREFIXKV_APPS_PYTHON") {
        return PathBuf::from(path);
    }
    let venv =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/app-checks/venv/bin/python");
    assert!(
        venv.exists(),
        "{} is missing: ./scripts/test makes it (python3 -m venv target/app-checks/venv, then pip \
         install -r crates/server/tests/apps/python/requirements.txt)",
        venv.display()
    );
    venv
}

fn python_check(script: &str) {
    let interpreter = python();
    let script = apps_dir().join("python").join(script);
    for_both_servers(|server, port| {
        let mut command = Command::new(&interpreter);
        command.arg(&script).arg(port.to_string());
        run_check(&format!("{} against {server}", script.display()), command);
    });
}

#[test]
fn celery_worker_runs_tasks_retries_and_countdowns() {
    python_check("celery_check.py");
}

#[test]
fn rq_worker_runs_jobs_keeps_failures_and_results() {
    python_check("rq_check.py");
}

#[test]
fn bullmq_queue_worker_delayed_job_and_queue_events() {
    let node = apps_dir().join("node");
    assert!(
        node.join("node_modules/bullmq").exists(),
        "{} has no node_modules/bullmq: ./scripts/test installs it (npm ci in that directory)",
        node.display()
    );
    for_both_servers(|server, port| {
        let mut command = Command::new("node");
        command
            .current_dir(&node)
            .arg("bullmq_check.mjs")
            .arg(port.to_string());
        run_check(&format!("bullmq against {server}"), command);
    });
}

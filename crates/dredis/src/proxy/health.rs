//! Fast failure detection: the proxy owns its Redis child, so it learns of its death the moment
//! the process exits, not a lease later.
//!
//! - A watcher thread polls the child with `waitpid(WNOHANG)` (`Child::try_wait`) every
//!   [`EXIT_POLL`], and at once when woken by [`Health::suspect`] (a pooled connection was reset,
//!   refused or closed mid-batch). An exit is reported to the installed [`FailureReporter`]
//!   (the cluster manager's `report_failure`) and marks the shard unhealthy, so it stops renewing
//!   its lease and committing.
//! - The restore's own SIGKILL is never reported: `RedisProcess::stop` takes the child out of the
//!   shared handle (under its lock) before killing it, so the watcher only ever reaps a child that
//!   died on its own. A child that exits while a restore starts it is seen by that restore
//!   (`RedisProcess` start checks `try_wait`), which fails and is retried; its lease covers it.
//! - A reset without an exit (the process still runs) is only logged: the lease still covers a
//!   hung Redis, as before.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prefixkv_dpr::WorkerId;

use super::{DprCore, Wakeup};

/// How often the watcher polls the child when not woken.
const EXIT_POLL: Duration = Duration::from_millis(2);

/// Called with the worker id and a description when the proxy sees its Redis die.
pub type FailureReporter = Arc<dyn Fn(WorkerId, &str) + Send + Sync>;

/// Failure detection state of one proxy.
#[derive(Default)]
pub(super) struct Health {
    reporter: Mutex<Option<FailureReporter>>,
    wake: Wakeup,
}

impl Health {
    /// Installs the reporter.
    pub(super) fn set_reporter(&self, reporter: FailureReporter) {
        *self.reporter.lock() = Some(reporter);
    }

    /// A pooled connection broke: look at the child now.
    pub(super) fn suspect(&self) {
        self.wake.wake();
    }
}

/// Whether an I/O error on a Redis connection means the connection (likely the process) is gone.
pub(super) fn is_connection_loss(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

/// The watcher thread's loop (see the module docs).
pub(super) fn watch_exits(core: &DprCore, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        // `try_lock`: a restore holds the handle while it restarts Redis; it watches that start
        // itself, so there is nothing to poll meanwhile.
        let exited = core
            .process
            .try_lock()
            .and_then(|mut process| process.reap_if_exited());
        if let Some(description) = exited {
            core.healthy.store(false, Ordering::SeqCst);
            tracing::warn!(worker = core.id, %description, "redis-server exited; reporting the failure");
            let reporter = core.health.reporter.lock().clone();
            match reporter {
                Some(report) => report(core.id, &description),
                None => tracing::warn!(
                    worker = core.id,
                    "no failure reporter installed: the lease will expire instead"
                ),
            }
        }
        core.health.wake.wait(EXIT_POLL);
    }
}

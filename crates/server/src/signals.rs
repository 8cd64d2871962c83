//! SIGTERM and SIGINT stop the server cleanly, as Redis's default: the oplog is synced and, in
//! `checkpoint` mode, a final checkpoint is taken; then the process exits 0.
//!
//! The signals are blocked in the main thread before any other thread exists (threads inherit
//! the mask), and one dedicated thread receives them with `sigwait`, so no signal handler ever
//! runs on a request thread in the middle of an engine operation.

use std::sync::{Arc, OnceLock};

use crate::config::Durability;
use crate::persistence::Persistence;

static PERSISTENCE: OnceLock<Arc<Persistence>> = OnceLock::new();

fn signal_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a set we own.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT in this thread (call first thing in `main`) and starts the thread
/// that waits for them. Until [`arm`] is called, a signal exits at once (nothing to save yet).
pub fn install() -> std::io::Result<()> {
    let set = signal_set();
    // SAFETY: changes this thread's signal mask with a valid set.
    let result = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if result != 0 {
        return Err(std::io::Error::from_raw_os_error(result));
    }
    std::thread::Builder::new()
        .name("prefixkv-signals".into())
        .spawn(move || {
            let mut received: libc::c_int = 0;
            // SAFETY: waits on a valid set that is blocked in every thread.
            let result = unsafe { libc::sigwait(&set, &mut received) };
            if result != 0 {
                tracing::error!(
                    "sigwait failed ({result}); signals will not stop the server cleanly"
                );
                return;
            }
            tracing::info!("received signal {received}; shutting down");
            if let Some(persistence) = PERSISTENCE.get() {
                let save = persistence.durability == Durability::Checkpoint;
                if let Err(error) = persistence.shutdown(save) {
                    tracing::error!("clean shutdown failed: {error}");
                    std::process::exit(1);
                }
            }
            std::process::exit(0);
        })?;
    Ok(())
}

/// From now on a signal makes everything durable before exiting.
pub fn arm(persistence: Arc<Persistence>) {
    let _ = PERSISTENCE.set(persistence);
}

//! The script that is running, if any: what other clients see of it (BUSY past
//! `busy-reply-threshold`), and SCRIPT KILL / FUNCTION KILL.
//!
//! Invariants:
//! - At most one script runs at a time: it holds the exec gate exclusively (`keyspace.exclusive`)
//!   from before [`Running::start`] to after its [`RunGuard`] drops, so no other client's write
//!   interleaves with it.
//! - A client's command that meets a running script (of another client) does not run: before the
//!   threshold it waits, asynchronously, for the script to end (as Redis, which serves nobody
//!   while a script runs); past it, it is answered BUSY unless it is one of the commands Redis
//!   allows then (SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN NOSAVE, AUTH, HELLO...).
//!   A command that began its write before the script took the gate finishes first (the script
//!   waits for it); one that raced past the check waits on the gate, on its thread, until the
//!   script ends (killed or not) — it never waits longer than the script.
//! - The kill flag is read by the Lua hook of the running VM; a script that has called a write
//!   command is never killed (UNKILLABLE): only SHUTDOWN NOSAVE ends it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// What runs.
#[derive(Clone, Debug)]
pub struct RunInfo {
    /// The client running it.
    pub client_id: u64,
    /// When it started.
    pub started: Instant,
    /// A function (FCALL) rather than an EVAL script.
    pub function: bool,
    /// The function's name, or the script's SHA-1.
    pub name: String,
    /// The command that runs it, name first (FUNCTION STATS shows it).
    pub args: Vec<bytes::Bytes>,
}

/// The running script's shared state.
#[derive(Default)]
pub struct Running {
    /// A script runs (read without the lock by every command: the common case costs one load).
    active: AtomicBool,
    info: Mutex<Option<RunInfo>>,
    /// SCRIPT KILL / FUNCTION KILL asked the running script to stop (read by the Lua hook).
    pub kill: Arc<AtomicBool>,
    /// The running script called a write command.
    pub wrote: AtomicBool,
    ended: tokio::sync::Notify,
}

/// Clears the running state when the script ends, however it ends.
pub struct RunGuard<'a> {
    running: &'a Running,
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        *self.running.info.lock() = None;
        self.running.active.store(false, Ordering::SeqCst);
        self.running.kill.store(false, Ordering::SeqCst);
        self.running.wrote.store(false, Ordering::SeqCst);
        self.running.ended.notify_waiters();
    }
}

/// What a command finds when it checks for a running script.
pub enum Check {
    /// No script of another client runs: go on.
    Free,
    /// One runs and is not yet past the threshold: wait for it.
    Wait,
    /// One runs past the threshold: answer BUSY (unless the command is allowed then). `function`
    /// picks the wording (FUNCTION KILL rather than SCRIPT KILL).
    Busy {
        /// The busy script is a function.
        function: bool,
    },
}

impl Running {
    /// Marks a script as running, before it asks for the exec gate: a command that then finds
    /// the gate held waits for the script without holding its thread (`held_by_other`).
    pub fn start(&self, info: RunInfo) -> RunGuard<'_> {
        self.kill.store(false, Ordering::SeqCst);
        self.wrote.store(false, Ordering::SeqCst);
        *self.info.lock() = Some(info);
        self.active.store(true, Ordering::SeqCst);
        RunGuard { running: self }
    }

    /// Whether a script of a client other than `client_id` is marked running (it holds the exec
    /// gate, or is about to take it: it is marked before it asks for the gate).
    pub fn held_by_other(&self, client_id: u64) -> bool {
        self.active.load(Ordering::SeqCst)
            && self
                .info
                .lock()
                .as_ref()
                .is_some_and(|info| info.client_id != client_id)
    }

    /// What runs now.
    pub fn current(&self) -> Option<RunInfo> {
        self.info.lock().clone()
    }

    /// Whether `client_id`'s command may run now, given `threshold`.
    pub fn check(&self, client_id: u64, threshold: Duration) -> Check {
        if !self.active.load(Ordering::SeqCst) {
            return Check::Free;
        }
        match &*self.info.lock() {
            None => Check::Free,
            Some(info) if info.client_id == client_id => Check::Free,
            Some(info) if info.started.elapsed() >= threshold => Check::Busy {
                function: info.function,
            },
            Some(_) => Check::Wait,
        }
    }

    /// Waits until no script of another client runs, or the running one passes `threshold`.
    pub async fn wait(&self, client_id: u64, threshold: Duration) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before the state is read: an end after the read wakes us.
            ended.as_mut().enable();
            let remaining = match &*self.info.lock() {
                Some(info) if info.client_id != client_id => {
                    threshold.saturating_sub(info.started.elapsed())
                }
                _ => return,
            };
            if remaining.is_zero() {
                return;
            }
            tokio::select! {
                () = &mut ended => {}
                () = tokio::time::sleep(remaining) => return,
            }
        }
    }

    /// SCRIPT KILL (`function` false) or FUNCTION KILL (true): asks the running script to stop.
    pub fn request_kill(&self, function: bool) -> Result<(), crate::error::CommandError> {
        use crate::error::CommandError;
        let info = self.info.lock();
        match &*info {
            Some(running) if running.function == function => {
                if self.wrote.load(Ordering::SeqCst) {
                    return Err(CommandError::Unkillable);
                }
                self.kill.store(true, Ordering::SeqCst);
                Ok(())
            }
            _ => Err(CommandError::NotBusy),
        }
    }
}

//! Crash-test instrumentation: named steps of the commit and checkpoint protocols.
//!
//! The crash tests install a hook (once per process) that SIGKILLs the process at the n-th step
//! reached, so every step of the fsync ordering gets crashed at. Without a hook a step costs one
//! atomic load.

use std::sync::OnceLock;

static STEP_HOOK: OnceLock<fn(&'static str)> = OnceLock::new();

/// Installs the process-wide step hook; returns false if one was already installed.
#[doc(hidden)]
pub fn install_step_hook(hook: fn(&'static str)) -> bool {
    STEP_HOOK.set(hook).is_ok()
}

pub(crate) fn step(name: &'static str) {
    if let Some(hook) = STEP_HOOK.get() {
        hook(name);
    }
}

//! Checkpoint recovery for frequently-consistent applications, after Cao, Vaz Salles, Sowell,
//! Yue, Demers, Gehrke and White, "Fast Checkpoint Recovery Algorithms for Frequently Consistent
//! Applications", SIGMOD 2011.
//!
//! The state is a vector of 64-bit cells owned by one mutator thread (a game loop, a
//! simulation, a deterministic transaction engine) that reaches a *point of consistency* at every
//! tick. At a point of consistency the mutator may start a checkpoint; an asynchronous writer
//! thread then writes a full image of the state as of that point while the mutator keeps
//! running, into one of two image files used alternately (double backup). The inputs of each
//! tick go to a logical log (`prefixkv_storage::log`, group commit). Recovery loads the newest image
//! whose footer and checksum verify and replays the log after it.
//!
//! The algorithms ([`algo`]) differ in what the mutator pays: Naive Snapshot copies the whole
//! state at the point of consistency; Copy-on-Update copies a word on its first write per
//! period; Wait-Free Zigzag and Wait-Free Ping-Pong keep extra copies so that neither side ever
//! waits. See `docs/tickstate.md` for costs and the example game loop:
//!
//! ```no_run
//! use prefixkv_tickstate::{algo::InterleavedPingPong, Config, TickState};
//! # fn main() -> prefixkv_tickstate::Result<()> {
//! // Each action is "cell index (u64), added value (u64)".
//! let apply = |state: &mut [u64], _tick: u64, action: &[u8]| {
//!     let index = u64::from_le_bytes(action[0..8].try_into().unwrap()) as usize;
//!     let delta = u64::from_le_bytes(action[8..16].try_into().unwrap());
//!     state[index] = state[index].wrapping_add(delta);
//! };
//! let (mut state, _report) = TickState::<InterleavedPingPong>::open("/tmp/world", Config::new(1 << 20), apply)?;
//! loop {
//!     let tick = state.tick() + 1;
//!     for (index, delta) in [(7u64, 1u64), (42, 5)] {
//!         let mut action = index.to_le_bytes().to_vec();
//!         action.extend_from_slice(&delta.to_le_bytes());
//!         state.log_action(&action)?;
//!         let value = state.read(index as usize).wrapping_add(delta);
//!         state.write(index as usize, value);
//!     }
//!     state.point_of_consistency(tick)?;
//!     # break;
//! }
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod algo;
pub mod aries;
mod error;
pub mod image;
mod recover;
mod region;
mod state;
mod sync;
pub mod tpcc;
pub mod wal_store;
mod writer;

#[cfg(all(test, loom))]
mod loom_tests;

pub use algo::{Algorithm, AlgorithmKind};
pub use error::{Result, TickError};
pub use recover::{log_dir, recover, recover_on, RecoveryReport};
pub use region::{huge_pages_status, HugePagesStatus};
pub use state::{Config, PointOfConsistency, Stats, TickState};
pub use writer::{ImageBase, ImageStore};

/// Pin the calling thread to CPU `cpu` (`sched_setaffinity`), as the paper runs its mutator and
/// its asynchronous writer on different cores.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::other(format!(
            "CPU {cpu} is past CPU_SETSIZE"
        )));
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET writes inside it (cpu checked above);
    // pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

//! Co-located shards: a session sends the batches of one shard to a worker in its own process
//! instead of over TCP (the DPR paper's co-located clients, D-FASTER §7.3 / Fig. 15).
//!
//! The session numbers, tracks and completes a local batch exactly as a network one: it is
//! issued through libDPR's session (so it carries the same header and dependencies), its
//! response (a [`ResponseFrame`], as a network reply would decode to) is held in the session's
//! in-flight queue and completed in issue order by the same code that completes network replies.
//! Commit points, dependencies across local and remote batches, and rollback reports are
//! therefore identical; only the transport differs (no socket, no request encoding).
//!
//! Invariant: [`LocalShard::run_local`] returns only once the batch ran (or was refused); it
//! never keeps the commands to run them later, so "in flight" for a local batch only means its
//! completion waits behind older batches of the session.

use prefixkv_dpr::DprHeader;
use prefixkv_resp::Command;

use crate::wire::ResponseFrame;

/// A shard served inside the client's process (implemented by `prefixkv-cluster`'s worker; this
/// crate does not depend on it). The worker runs a batch through the same admission, latch and
/// world-line checks as a framed network batch.
pub trait LocalShard: Send + Sync {
    /// Runs one DPR batch (`request`: its DPR request header as libDPR's session issued it) and
    /// returns what a network connection would have answered: a `Response` header with the raw
    /// RESP replies, a `Rollback` header, or an error frame (the batch's effect is unknown).
    fn run_local(&self, request: &DprHeader, commands: &[Command]) -> ResponseFrame;
}

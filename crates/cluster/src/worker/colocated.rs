//! Co-located clients: client sessions in a worker's process that run the batches of the keys
//! this worker owns on its engine directly, and send only the others over the network (the DPR
//! paper's co-located D-FASTER clients, Fig. 15).
//!
//! [`Worker::local_client`] makes a `prefixkv_dprnet::DprRedisClient` whose shard for this
//! worker is a [`LocalHandle`] instead of a socket. A local batch goes through the very path a
//! framed network batch takes once decoded (`Core::run_commands`: latch held shared, admission
//! under the DPR worker's mutex with its world-line check and `Vs` fast-forward, execution on a
//! lent engine session, the per-command slot check), so its response header (version, world-line,
//! rollback) is what a network client would have received, and the client completes it in issue
//! order with the same code (`prefixkv_dprnet::client::LocalShard`). Hence DPR dependencies
//! between local and remote batches, commit points and rollback reports are identical; what
//! differs is only that a local batch costs no socket round trip and no request encoding or
//! parsing (replies are still RESP bytes: the command layer writes them so).
//!
//! Invariant: once the worker stops, a local batch is answered with an error frame and never
//! runs (a stopped worker is a failed worker: the session then waits for the rollback as it
//! would for a broken connection).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use prefixkv_dpr::DprHeader;
use prefixkv_dprnet::client::{ClientConfig, ClientError, LocalShard};
use prefixkv_dprnet::connection::encode_command;
use prefixkv_dprnet::wire::ResponseFrame;
use prefixkv_dprnet::DprRedisClient;
use prefixkv_resp::Command;

use super::{Core, Worker};

/// A worker's batch path as a co-located client's local shard. Keeps the worker's state alive
/// while clients hold it; after the worker stopped it refuses batches (see the module docs).
pub struct LocalHandle {
    core: Arc<Core>,
    stop: Arc<AtomicBool>,
}

impl LocalShard for LocalHandle {
    fn run_local(&self, request: &DprHeader, commands: &[Command]) -> ResponseFrame {
        if self.stop.load(Ordering::SeqCst) {
            return ResponseFrame::Error(format!("worker {} has stopped", self.core.id));
        }
        // The payload only feeds the synchronous level's operation log: encode it only there.
        let mut payload = Vec::new();
        if self.core.oplog.is_some() {
            for command in commands {
                let args: Vec<&[u8]> = command.args.iter().map(|a| &a[..]).collect();
                encode_command(&mut payload, &args);
            }
        }
        self.core.run_commands(request, &payload, commands, None)
    }
}

impl Worker {
    /// This worker's batch path, for a client built with
    /// [`DprRedisClient::with_local_shard`] (shard = this worker's id).
    pub fn local_handle(&self) -> Arc<LocalHandle> {
        Arc::new(LocalHandle {
            core: Arc::clone(&self.core),
            stop: Arc::clone(&self.stop),
        })
    }

    /// A co-located client: `config` lists every worker's address (shard `i` is worker `i`, as
    /// for any client) and the metadata store; the batches of keys this worker owns run on its
    /// engine in this process, the others go over TCP. Sessions of this client are numbered,
    /// committed and rolled back exactly as remote ones (see the module docs). Drop the client's
    /// sessions before (or expect errors after) stopping the worker.
    pub fn local_client(&self, config: ClientConfig) -> Result<DprRedisClient, ClientError> {
        let shard = usize::try_from(self.core.id).map_err(|_| {
            ClientError::Protocol(format!("worker id {} is not a shard index", self.core.id))
        })?;
        DprRedisClient::with_local_shard(config, shard, self.local_handle())
    }
}

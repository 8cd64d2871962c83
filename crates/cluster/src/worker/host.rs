//! The worker as a host of `prefixkv_dprnet::serve`'s connection loops: framed batches and plain
//! RESP connections (each a DPR session the worker keeps).
//!
//! What differs from a D-Redis proxy: commands run on the engine (`commands.rs`; anything else
//! gets its unknown-command error, which lists the set, so nothing needs refusing for the sake of
//! a pooled connection or a latch), and the Redis Cluster layer ([`crate::topology`]) answers
//! `CLUSTER …`, `COMMAND …`, `READONLY`/`READWRITE`/`ASKING` and redirects foreign keys
//! (`-MOVED`, `-CROSSSLOT`) before a command is numbered, so a redirected command is not part of
//! the connection's DPR session. A framed batch's commands are checked again where they run (the
//! batch's command count is fixed), answering the same redirection per command.
//!
//! Invariant: every engine failure reaches a plain RESP connection as `NotRun` (the batch is
//! abandoned: uncertain at the next rollback), never as a success.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::{ClusterState, DprHeader, HeaderKind, WorkerId, WorldLine};
use prefixkv_dprnet::serve::{BatchResult, ConnectionHandler, DprHost};
use prefixkv_dprnet::wire::{frame_commands, FrameLimits, RequestFrame, ResponseFrame};
use prefixkv_resp::Command;

use super::Core;

impl Core {
    /// Remembers the state the maintenance thread read, as a new `Arc` only if it changed (the
    /// connections trim their sessions when it does).
    pub(super) fn remember_published(&self, state: ClusterState) {
        let mut published = self.published.lock();
        if **published != state {
            *published = Arc::new(state);
        }
    }
}

impl ConnectionHandler for Core {
    fn handle(&self, frame: RequestFrame) -> ResponseFrame {
        match frame_commands(&frame) {
            Ok(commands) => self.run_commands(&frame.header, &frame.payload, &commands, None),
            Err(error) => ResponseFrame::Error(error),
        }
    }

    fn serve_resp(&self, stream: std::net::TcpStream, first_byte: u8) {
        prefixkv_dprnet::serve::serve_resp(self, stream, first_byte);
    }
}

impl DprHost for Core {
    fn worker_id(&self) -> WorkerId {
        self.id
    }

    fn limits(&self) -> FrameLimits {
        self.limits
    }

    fn label(&self) -> &'static str {
        "prefixkv worker"
    }

    fn world_line(&self) -> WorldLine {
        self.worker.lock().world_line()
    }

    fn finder(&self) -> &dyn DprFinder {
        self.finder.as_ref()
    }

    fn published(&self) -> Arc<ClusterState> {
        Arc::clone(&self.published.lock())
    }

    fn read_published(&self) -> Option<ClusterState> {
        match self.finder.cluster_state() {
            Ok(state) => {
                self.remember_published(state.clone());
                Some(state)
            }
            Err(error) => {
                tracing::warn!(worker = self.id, %error, "reading the cluster state failed");
                None
            }
        }
    }

    fn next_connection(&self) -> u64 {
        self.resp_connections.fetch_add(1, Ordering::SeqCst)
    }

    fn recovery_wait(&self) -> Duration {
        self.recovery_wait
    }

    fn run_batch(&self, request: &DprHeader, payload: &[u8], commands: &[Command]) -> BatchResult {
        match self.run_commands(request, payload, commands, Some(request.sender)) {
            ResponseFrame::Header { header, .. } if header.kind == HeaderKind::Rollback => {
                BatchResult::Refused { header }
            }
            ResponseFrame::Header { header, replies } => BatchResult::Ran { header, replies },
            ResponseFrame::Error(text) => BatchResult::NotRun(text),
        }
    }

    fn connection_closed(&self, session: u64) {
        self.shards.closed(session);
    }

    fn local_reply(&self, command: &Command) -> Option<Vec<u8>> {
        if let Some(reply) = self.slots_command(&command.args) {
            return Some(reply);
        }
        let view = self.slots.view();
        view.topology
            .answer(&command.args, || self.worker.lock().world_line())
            .or_else(|| view.refusal(&command.args))
    }
}

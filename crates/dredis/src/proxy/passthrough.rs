//! The pass-through proxy: the same framing, no DPR (the benchmark's baseline).

use std::net::SocketAddr;
use std::sync::Arc;

use prefixkv_dpr::{DprHeader, HeaderKind, WorkerId};

use super::pool::Pool;
use super::{serve, ProxyError, Running, Wakeup};
use prefixkv_dprnet::serve::ConnectionHandler;
use prefixkv_dprnet::wire::frame_commands;
use prefixkv_dprnet::wire::{FrameLimits, RequestFrame, ResponseFrame};

/// The pass-through side: forwards without DPR (a baseline for the benchmark).
struct PassThrough {
    id: WorkerId,
    pool: Pool,
}

impl ConnectionHandler for PassThrough {
    fn handle(&self, frame: RequestFrame) -> ResponseFrame {
        if let Err(error) = frame_commands(&frame) {
            return ResponseFrame::Error(error);
        }
        let header = DprHeader {
            kind: HeaderKind::Response,
            world_line: frame.header.world_line,
            version: 0,
            sender: self.id,
            batch_sequence: frame.header.batch_sequence,
            dependencies: Vec::new(),
        };
        match self
            .pool
            .forward(&frame.payload, frame.command_count as usize)
        {
            Ok(replies) => ResponseFrame::Header { header, replies },
            Err(error) => ResponseFrame::Error(format!("redis failed during the batch: {error}")),
        }
    }
}

/// A pass-through proxy (no DPR) in front of an existing Redis: the benchmark's baseline.
pub struct PassThroughProxy {
    running: Running,
}

impl PassThroughProxy {
    /// Serves on `listen`, forwarding to `redis`.
    pub fn start(
        id: WorkerId,
        listen: SocketAddr,
        redis: SocketAddr,
        limits: FrameLimits,
    ) -> Result<Self, ProxyError> {
        let handler = Arc::new(PassThrough {
            id,
            pool: Pool::new(redis),
        });
        Ok(Self {
            running: serve(listen, limits, handler, Arc::new(Wakeup::default()))?,
        })
    }

    /// Where clients connect.
    pub fn local_address(&self) -> SocketAddr {
        self.running.local_address
    }
}

impl Drop for PassThroughProxy {
    fn drop(&mut self) {
        self.running.shutdown();
    }
}

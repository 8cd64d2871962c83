//! Serving client connections, shared by D-Redis's proxy and prefixkv's cluster workers: one
//! port, two protocols, told apart by each connection's first byte (see [`crate::wire`]).
//!
//! - [`accept_connections`] accepts and serves each connection on a thread of its own.
//! - [`serve_connection`] reads the first byte: NUL starts the framed protocol (the rest of
//!   [`FRAMED_PREAMBLE`] must follow, then request frames, each answered by
//!   [`ConnectionHandler::handle`]); anything else is plain RESP, handed to
//!   [`ConnectionHandler::serve_resp`] (refused by default: the pass-through proxy speaks only
//!   the framed protocol).
//! - [`serve_resp`] serves a plain RESP connection as a DPR session kept by the host
//!   (`prefixkv_dpr::connection::ConnectionSession`) for any [`DprHost`]: the D-Redis proxy
//!   (commands forwarded to its Redis) and a cluster worker (commands run on its engine). The
//!   loop, `PREFIXKV.COMMITPOINT`, the `-ROLLBACK …` errors and the bounds are in
//!   `serve/resp.rs`; what differs per host (how a batch runs, which commands the host answers or
//!   refuses itself, the name in error lines) is the trait.
//!
//! Invariants: a framed stream that fails to decode is answered with one error frame and closed
//! (it cannot be resynchronised); a RESP connection's replies are written in command order, one
//! per command; every length read from a peer is checked against [`FrameLimits`] before a
//! buffer is sized from it.

mod resp;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use prefixkv_dpr::finder::DprFinder;
use prefixkv_dpr::{ClusterState, DprHeader, WorkerId, WorldLine};
use prefixkv_resp::Command;

use crate::wire::{
    encode_response, FrameLimits, FrameReader, RequestFrame, ResponseFrame, WireError,
    FRAMED_PREAMBLE,
};

pub use resp::serve as serve_resp;

/// What serves one connection's requests.
pub trait ConnectionHandler: Send + Sync + 'static {
    /// Serves one request frame of a framed connection.
    fn handle(&self, frame: RequestFrame) -> ResponseFrame;

    /// Serves a plain RESP connection whose first byte (already read) was `first_byte`. By
    /// default refused with an error line.
    fn serve_resp(&self, mut stream: TcpStream, _first_byte: u8) {
        let _ = stream.write_all(
            b"-ERR this port speaks only the D-Redis framed protocol (pass-through proxy)\r\n",
        );
    }
}

/// What became of one batch a [`DprHost`] ran.
#[derive(Debug)]
pub enum BatchResult {
    /// It ran in the header's version; the raw RESP replies, one per command.
    Ran {
        /// The response header.
        header: DprHeader,
        /// The replies.
        replies: Vec<u8>,
    },
    /// The worker refused it (old world-line): it did not run.
    Refused {
        /// The `Rollback` header.
        header: DprHeader,
    },
    /// The worker could not admit or run it; it did not run (or, for a host whose store fails
    /// only by failing the whole process, its effect does not matter any more).
    NotRun(String),
    /// The store failed during it: whether it ran is unknown (the connection waits, bounded,
    /// for the rollback that should follow).
    Unknown(String),
}

/// A DPR worker that serves plain RESP connections through [`serve_resp`].
pub trait DprHost: Send + Sync + 'static {
    /// This worker's id (it numbers the connections' session ids).
    fn worker_id(&self) -> WorkerId;
    /// Frame and RESP limits (a RESP batch is bounded like a frame).
    fn limits(&self) -> FrameLimits;
    /// The name used in error lines (`ERR <label>: …`), e.g. `D-Redis`.
    fn label(&self) -> &'static str;
    /// The worker's current world-line.
    fn world_line(&self) -> WorldLine;
    /// The finder: `rollback_target` for a connection's rollback.
    fn finder(&self) -> &dyn DprFinder;
    /// The published cluster state as last read by the host's maintenance (connections trim
    /// their committed batches against it; a new `Arc` means a new state).
    fn published(&self) -> Arc<ClusterState>;
    /// Reads the published state now (and remembers it as [`DprHost::published`]); None if the
    /// read failed (logged by the host).
    fn read_published(&self) -> Option<ClusterState>;
    /// A fresh number for a new RESP connection (unique per worker process).
    fn next_connection(&self) -> u64;
    /// How long a connection whose batch was cut off by a failure waits for the rollback.
    fn recovery_wait(&self) -> Duration;
    /// Runs one DPR batch: `commands` parsed, `payload` their RESP encoding.
    fn run_batch(&self, request: &DprHeader, payload: &[u8], commands: &[Command]) -> BatchResult;
    /// A command the host answers itself instead of running it in a batch (a refusal, a
    /// redirection, a topology query): its raw RESP reply. Such commands get no sequence number.
    fn local_reply(&self, command: &Command) -> Option<Vec<u8>>;
    /// The plain RESP connection whose DPR session is `session` (the `sender` of its batches)
    /// closed: a host that keeps per-connection state drops it. Nothing by default.
    fn connection_closed(&self, _session: u64) {}
}

/// Accepts connections on `listener` until `stop` is set (whoever sets it then connects once, to
/// wake the blocked accept), serving each with [`serve_connection`] on a thread named
/// `thread_name`. Every accepted stream is also registered in `clients` (closed ones are dropped
/// from it as new ones arrive), so that a shutdown can close the open ones.
pub fn accept_connections(
    listener: TcpListener,
    limits: FrameLimits,
    handler: Arc<dyn ConnectionHandler>,
    stop: &AtomicBool,
    clients: &Mutex<Vec<TcpStream>>,
    thread_name: &str,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            let mut registry = clients.lock();
            registry.retain(|s| s.peer_addr().is_ok());
            registry.push(clone);
        }
        let handler = Arc::clone(&handler);
        let _ = std::thread::Builder::new()
            .name(thread_name.into())
            .spawn(move || serve_connection(stream, limits, &*handler));
    }
}

/// Serves one client connection: framed or plain RESP, by its first byte (see [`crate::wire`]).
pub fn serve_connection(
    mut stream: TcpStream,
    limits: FrameLimits,
    handler: &dyn ConnectionHandler,
) {
    let mut first = [0u8; 1];
    match stream.read(&mut first) {
        Ok(1) => {}
        _ => return,
    }
    if first[0] != FRAMED_PREAMBLE[0] {
        handler.serve_resp(stream, first[0]);
        return;
    }
    let mut rest = [0u8; FRAMED_PREAMBLE.len() - 1];
    if stream.read_exact(&mut rest).is_err() {
        return;
    }
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    if rest != FRAMED_PREAMBLE[1..] {
        // A NUL first byte is never RESP, and this is not our preamble either.
        let mut out = Vec::new();
        let _ = encode_response(
            &mut out,
            &ResponseFrame::Error(format!(
                "connection starts with {:02x?}, which is neither the D-Redis framed preamble {:02x?} nor RESP",
                [&first[..], &rest[..]].concat(),
                FRAMED_PREAMBLE
            )),
        );
        let _ = writer.write_all(&out);
        return;
    }
    let mut reader = FrameReader::new(stream, limits);
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        let response = match reader.read_request() {
            Ok(Some(frame)) => handler.handle(frame),
            Ok(None) => return,
            Err(WireError::Io(_)) => return,
            Err(error) => {
                // The stream cannot be resynchronised: say why, then close it.
                out.clear();
                let _ = encode_response(&mut out, &ResponseFrame::Error(error.to_string()));
                let _ = writer.write_all(&out);
                return;
            }
        };
        out.clear();
        if encode_response(&mut out, &response).is_err() || writer.write_all(&out).is_err() {
            return;
        }
    }
}

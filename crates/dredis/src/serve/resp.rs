//! Plain RESP connections (`redis-cli`, any Redis client library): each one is a DPR session
//! kept by the proxy (`prefixkv_dpr::connection::ConnectionSession`).
//!
//! Per read, every whole command already received is parsed (`prefixkv_resp::RequestParser`,
//! with [`FrameLimits::resp`](crate::wire::FrameLimits::resp): bulk and array lengths are checked
//! before anything is sized from them) and the run is executed in order:
//! - consecutive forwardable commands form one DPR batch (at most `max_commands` commands and
//!   about `max_frame_bytes` bytes), numbered by the session, admitted by the worker and forwarded
//!   to Redis on a pooled connection exactly like a framed batch ([`DprCore::run_batch`]);
//! - commands the proxy answers itself end the batch before them: `PREFIXKV.COMMITPOINT`,
//!   `QUIT`, `CLIENT SETNAME`/`SETINFO` (accepted, not forwarded), and the refused ones
//!   ([`refusal`]): commands that would change the state of a *pooled* Redis connection
//!   (`SELECT`, `MULTI`, `SUBSCRIBE`, `AUTH`, `HELLO 3`, ...), block it (`BLPOP`, `WAIT`, `XREAD
//!   BLOCK`, ... would hold the shared latch and stall every commit), or interfere with the
//!   proxy's persistence (`CONFIG`, `BGSAVE`, `SHUTDOWN`, ...).
//!
//! Rollbacks: before each batch, if the local worker is on a newer world-line than the session,
//! the session handles the rollback (against the finder's `rollback_target`) and every command of
//! the batch is answered with the `-ROLLBACK …` error instead of running. The same happens if the
//! worker refuses the batch, and when Redis fails during the batch (the proxy then waits, bounded
//! by `recovery_wait_ms`, for the rollback; the batch is reported uncertain). The session then
//! continues on the new world-line.
//!
//! Bounded: argument and array lengths by the parser's limits, one request's total size by
//! `max_frame_bytes` (checked before each read), a batch by `max_commands` and about
//! `max_frame_bytes`.
//!
//! Invariants: replies are written in command order, one per command; a protocol error is
//! answered with its error line and closes the connection (the stream cannot be resynchronised,
//! as in Redis); the session's memory is bounded by trimming committed batches whenever the
//! maintenance thread publishes a new cut.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use prefixkv_dpr::connection::{
    connection_session_id, encode_resp_error, is_commit_point_command, ConnectionSession,
    RollbackNotice,
};
use prefixkv_dpr::session::{Completion, SequenceRange};
use prefixkv_dpr::ClusterState;
use prefixkv_resp::{Command, RequestParser};

use super::{BatchResult, DprCore};
use crate::redis::encode_command;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// Why a command may not be sent on a plain RESP connection (None: it may).
fn refusal(command: &Command) -> Option<&'static str> {
    let name = command.name().to_ascii_uppercase();
    let argument = |i: usize| command.args.get(i).map(|a| a.to_ascii_uppercase());
    let pooled = "it would change the state of a pooled Redis connection shared with other clients";
    let blocking = "blocking commands would hold the shard's latch and stall its commits";
    let persistence = "the proxy manages Redis's persistence and process itself";
    Some(match &name[..] {
        b"SELECT" | b"MULTI" | b"EXEC" | b"DISCARD" | b"WATCH" | b"UNWATCH" | b"SUBSCRIBE"
        | b"PSUBSCRIBE" | b"SSUBSCRIBE" | b"UNSUBSCRIBE" | b"PUNSUBSCRIBE" | b"SUNSUBSCRIBE"
        | b"MONITOR" | b"RESET" | b"AUTH" | b"READONLY" | b"READWRITE" | b"ASKING" | b"SYNC"
        | b"PSYNC" | b"REPLCONF" | b"CLIENT" => pooled,
        b"HELLO" if command.args.len() > 2 => pooled,
        b"BLPOP" | b"BRPOP" | b"BRPOPLPUSH" | b"BLMOVE" | b"BLMPOP" | b"BZPOPMIN" | b"BZPOPMAX"
        | b"BZMPOP" | b"WAIT" | b"WAITAOF" => blocking,
        b"XREAD" | b"XREADGROUP"
            if (1..command.args.len()).any(|i| argument(i).as_deref() == Some(b"BLOCK")) =>
        {
            blocking
        }
        b"SAVE" | b"BGSAVE" | b"BGREWRITEAOF" | b"SHUTDOWN" | b"CONFIG" | b"DEBUG" | b"SLAVEOF"
        | b"REPLICAOF" | b"FAILOVER" | b"MODULE" => persistence,
        _ => return None,
    })
}

/// How the proxy treats one command.
enum Kind {
    Forward,
    CommitPoint,
    Quit,
    /// Answered at once with this raw reply.
    Reply(Vec<u8>),
}

fn classify(command: &Command) -> Kind {
    let name = command.name();
    let upper = name.to_ascii_uppercase();
    if is_commit_point_command(name) {
        return if command.args.len() == 1 {
            Kind::CommitPoint
        } else {
            Kind::Reply(error_reply(
                "ERR wrong number of arguments for 'prefixkv.commitpoint' command",
            ))
        };
    }
    match &upper[..] {
        b"QUIT" => return Kind::Quit,
        b"HELLO" => match command.args.get(1).map(|v| v.to_vec()) {
            None => {}
            Some(version) if version == b"2" => {}
            Some(_) if command.args.len() == 2 => {
                return Kind::Reply(error_reply(
                    "NOPROTO this D-Redis proxy speaks RESP2 only (plain RESP connections)",
                ))
            }
            Some(_) => {}
        },
        b"CLIENT"
            if command.args.get(1).is_some_and(|sub| {
                sub.eq_ignore_ascii_case(b"SETNAME") || sub.eq_ignore_ascii_case(b"SETINFO")
            }) =>
        {
            // Client libraries send these on connect; they label the connection, which here is
            // the proxy's, so they are accepted and not forwarded.
            return Kind::Reply(b"+OK\r\n".to_vec());
        }
        _ => {}
    }
    match refusal(command) {
        Some(reason) => Kind::Reply(error_reply(&format!(
            "ERR D-Redis: {} is not supported on a plain RESP connection: {reason}",
            String::from_utf8_lossy(&upper)
        ))),
        None => Kind::Forward,
    }
}

fn error_reply(line: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_resp_error(&mut out, line);
    out
}

/// One plain RESP connection's state.
struct RespConnection<'a> {
    core: &'a DprCore,
    session: ConnectionSession,
    /// Replies waiting to be written.
    out: Vec<u8>,
    /// The published state the session last trimmed against.
    trimmed_against: Arc<ClusterState>,
}

/// Serves a plain RESP connection whose first byte (already read) was `first_byte`.
pub(super) fn serve(core: &DprCore, mut stream: TcpStream, first_byte: u8) {
    let number = core.resp_connections.fetch_add(1, Ordering::SeqCst);
    // Join the newest world-line known here: during a recovery the published one is ahead of the
    // worker's, and a session that starts on it makes the worker restore before its first batch
    // (instead of running it on the abandoned world-line and reporting it lost right after).
    let world_line = core.world_line().max(core.published.lock().world_line);
    let mut connection = RespConnection {
        core,
        session: ConnectionSession::new(
            connection_session_id(core.id, number),
            core.id,
            world_line,
        ),
        out: Vec::with_capacity(64 * 1024),
        trimmed_against: Arc::clone(&core.published.lock()),
    };
    let limits = core.limits;
    let mut parser = RequestParser::new(limits.resp);
    let mut buffer = BytesMut::with_capacity(READ_CHUNK);
    buffer.extend_from_slice(&[first_byte]);
    let mut chunk = vec![0u8; READ_CHUNK];
    loop {
        let mut commands = Vec::new();
        let mut bytes = 0usize;
        let mut failure = None;
        while commands.len() < limits.max_commands as usize && bytes < limits.max_frame_bytes {
            match parser.parse(&mut buffer) {
                Ok(Some(command)) => {
                    bytes += command.args.iter().map(|a| a.len() + 16).sum::<usize>();
                    commands.push(command);
                }
                Ok(None) => break,
                Err(error) => {
                    failure = Some(error);
                    break;
                }
            }
        }
        let quit = connection.execute(&commands);
        if let Some(error) = &failure {
            encode_resp_error(&mut connection.out, &error.to_string());
        }
        if !connection.out.is_empty() {
            if stream.write_all(&connection.out).is_err() {
                return;
            }
            connection.out.clear();
        }
        if quit || failure.is_some() {
            return;
        }
        if commands.is_empty() {
            // Only a partial request is buffered now: one request may not outgrow a batch (the
            // parser bounds each argument; this bounds their sum, as Redis's query buffer limit).
            if buffer.len() > limits.max_frame_bytes {
                encode_resp_error(
                    &mut connection.out,
                    &format!(
                        "ERR D-Redis: request larger than the proxy's max_frame_bytes ({} bytes)",
                        limits.max_frame_bytes
                    ),
                );
                let _ = stream.write_all(&connection.out);
                return;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            }
        }
    }
}

impl RespConnection<'_> {
    /// Executes a run of commands in order, appending one reply per command. Returns whether the
    /// client asked to close (QUIT).
    fn execute(&mut self, commands: &[Command]) -> bool {
        let mut batch_start = 0;
        for (index, command) in commands.iter().enumerate() {
            let kind = classify(command);
            if matches!(kind, Kind::Forward) {
                continue;
            }
            self.run(&commands[batch_start..index]);
            batch_start = index + 1;
            match kind {
                Kind::Forward => unreachable!("handled above"),
                Kind::CommitPoint => self.commit_point(),
                Kind::Quit => {
                    self.out.extend_from_slice(b"+OK\r\n");
                    return true;
                }
                Kind::Reply(reply) => self.out.extend_from_slice(&reply),
            }
        }
        self.run(&commands[batch_start..]);
        false
    }

    /// Answers `PREFIXKV.COMMITPOINT` from a fresh read of the published cut.
    fn commit_point(&mut self) {
        let Some(state) = self.core.read_cluster_state() else {
            encode_resp_error(
                &mut self.out,
                "ERR D-Redis: reading the published DPR cut failed (see the proxy's log)",
            );
            return;
        };
        if self.session.rollback_due(state.world_line) {
            let line = self.rollback_line(None);
            encode_resp_error(&mut self.out, &line);
            return;
        }
        match self.session.commit_point(&state) {
            Ok(point) => point.encode_resp(&mut self.out),
            Err(error) => encode_resp_error(&mut self.out, &format!("ERR D-Redis: {error}")),
        }
    }

    /// Handles the rollback the session is due for; returns the error line to answer with.
    /// `uncertain`: the batch the failure cut off (its commands may or may not have run).
    fn rollback_line(&mut self, uncertain: Option<SequenceRange>) -> String {
        let target = match self.core.finder.rollback_target(self.session.world_line()) {
            Ok(target) => target,
            Err(error) => {
                return format!(
                "ERR D-Redis: the cluster rolled back, but reading what survived failed: {error}"
            )
            }
        };
        match self.session.handle_rollback(&target) {
            Ok(notice) => {
                tracing::info!(
                    worker = self.core.id,
                    session = self.session.id(),
                    world_line = notice.prefix.world_line,
                    until = notice.prefix.until_sequence,
                    "plain RESP session rolled back"
                );
                line_for(&notice, uncertain)
            }
            Err(error) => format!("ERR D-Redis: {error}"),
        }
    }

    /// Runs `commands` (all forwardable) as one DPR batch.
    fn run(&mut self, commands: &[Command]) {
        if commands.is_empty() {
            return;
        }
        let count = commands.len();
        let answer_all = |out: &mut Vec<u8>, line: &str| {
            for _ in 0..count {
                encode_resp_error(out, line);
            }
        };
        if self.session.rollback_due(self.core.world_line()) {
            let line = self.rollback_line(None);
            answer_all(&mut self.out, &line);
            return;
        }
        let mut payload = Vec::new();
        for command in commands {
            let args: Vec<&[u8]> = command.args.iter().map(|a| &a[..]).collect();
            encode_command(&mut payload, &args);
        }
        let (header, ticket) = match self.session.begin(count as u64) {
            Ok(issued) => issued,
            Err(error) => {
                answer_all(&mut self.out, &format!("ERR D-Redis: {error}"));
                return;
            }
        };
        match self.core.run_batch(&header, &payload, count) {
            BatchResult::Ran { header, replies } => match self.session.finish(ticket, &header) {
                Ok(Completion::Executed { .. }) => self.out.extend_from_slice(&replies),
                Ok(other) => answer_all(
                    &mut self.out,
                    &format!("ERR D-Redis: unexpected completion {other:?}"),
                ),
                Err(error) => answer_all(&mut self.out, &format!("ERR D-Redis: {error}")),
            },
            BatchResult::Refused { header } => {
                // Records the batch as refused (it never ran); the rollback is due now.
                let _ = self.session.finish(ticket, &header);
                let line = self.rollback_line(None);
                answer_all(&mut self.out, &line);
            }
            BatchResult::NotRun(text) => {
                // It did not run, but the session cannot un-number it: it stays unknown
                // (reported uncertain at a rollback), which is conservative.
                self.session.abandon(ticket);
                answer_all(&mut self.out, &format!("ERR D-Redis: {text}"));
            }
            BatchResult::Unknown(text) => {
                self.session.abandon(ticket);
                let deadline = Instant::now() + self.core.recovery_wait;
                while !self.session.rollback_due(self.core.world_line())
                    && Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                if self.session.rollback_due(self.core.world_line()) {
                    let line = self.rollback_line(Some(ticket.sequences));
                    answer_all(&mut self.out, &line);
                } else {
                    answer_all(
                        &mut self.out,
                        &format!(
                            "ERR D-Redis: {text}; no rollback followed within {} ms",
                            self.core.recovery_wait.as_millis()
                        ),
                    );
                }
            }
        }
        self.trim();
    }

    /// Forgets committed batches when the maintenance thread has read a new cut.
    fn trim(&mut self) {
        let latest = Arc::clone(&self.core.published.lock());
        if !Arc::ptr_eq(&latest, &self.trimmed_against) {
            self.session.trim(&latest);
            self.trimmed_against = latest;
        }
    }
}

/// The `-ROLLBACK …` line for the commands of one batch.
fn line_for(notice: &RollbackNotice, uncertain: Option<SequenceRange>) -> String {
    let mut line = notice.error_line();
    match uncertain {
        None => line.push_str("; this command was not run, resend it"),
        Some(range) if range.end == range.start + 1 => line.push_str(&format!(
            "; this command (sequence {}) was cut off by the failure and may or may not have run",
            range.start
        )),
        Some(range) => line.push_str(&format!(
            "; this command (in sequences {}..{}) was cut off by the failure and may or may not have run",
            range.start,
            range.end - 1
        )),
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn command(args: &[&str]) -> Command {
        Command {
            args: args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
        }
    }

    #[test]
    fn commands_are_classified() {
        assert!(matches!(
            classify(&command(&["SET", "k", "v"])),
            Kind::Forward
        ));
        assert!(matches!(classify(&command(&["ping"])), Kind::Forward));
        assert!(matches!(classify(&command(&["HELLO", "2"])), Kind::Forward));
        assert!(matches!(
            classify(&command(&["prefixkv.commitpoint"])),
            Kind::CommitPoint
        ));
        assert!(matches!(classify(&command(&["quit"])), Kind::Quit));
        let reply = |args: &[&str]| match classify(&command(args)) {
            Kind::Reply(bytes) => String::from_utf8(bytes).unwrap(),
            _ => panic!("{args:?} should be answered by the proxy"),
        };
        assert!(reply(&["select", "1"]).starts_with("-ERR D-Redis: SELECT is not supported"));
        assert!(reply(&["BLPOP", "k", "0"]).contains("blocking"));
        assert!(reply(&["XREAD", "block", "0", "STREAMS", "s", "$"]).contains("blocking"));
        assert!(matches!(
            classify(&command(&["XREAD", "STREAMS", "s", "0"])),
            Kind::Forward
        ));
        assert!(reply(&["CONFIG", "SET", "dbfilename", "x"]).contains("persistence"));
        assert!(reply(&["HELLO", "3"]).starts_with("-NOPROTO"));
        assert_eq!(reply(&["CLIENT", "SETINFO", "LIB-NAME", "x"]), "+OK\r\n");
        assert!(reply(&["CLIENT", "KILL", "x"]).contains("pooled"));
        assert!(reply(&["PREFIXKV.COMMITPOINT", "x"]).contains("wrong number"));
    }
}

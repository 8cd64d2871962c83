//! Plain RESP connections (`redis-cli`, any Redis client library) on a [`DprHost`]: each one is
//! a DPR session kept by the host (`prefixkv_dpr::connection::ConnectionSession`).
//!
//! Per read, every whole command already received is parsed (`prefixkv_resp::RequestParser`,
//! with [`FrameLimits::resp`](crate::wire::FrameLimits::resp): bulk and array lengths are checked
//! before anything is sized from them) and the run is executed in order:
//! - consecutive commands to run form one DPR batch (at most `max_commands` commands and about
//!   `max_frame_bytes` bytes), numbered by the session and run by the host exactly like a framed
//!   batch ([`DprHost::run_batch`]);
//! - commands answered without running end the batch before them: `PREFIXKV.COMMITPOINT`,
//!   `QUIT`, `CLIENT SETNAME`/`SETINFO` (accepted: client libraries send them on connect),
//!   `HELLO 3` (`-NOPROTO`: RESP2 only), and whatever the host answers itself
//!   ([`DprHost::local_reply`]: the proxy's refusals, a worker's `CLUSTER …` and `-MOVED`).
//!
//! Rollbacks: before each batch, if the host's worker is on a newer world-line than the session,
//! the session handles the rollback (against the finder's `rollback_target`) and every command of
//! the batch is answered with the `-ROLLBACK …` error instead of running. The same happens if the
//! worker refuses the batch, and when the store fails during the batch (the connection then
//! waits, bounded by [`DprHost::recovery_wait`], for the rollback; the batch is reported
//! uncertain). The session then continues on the new world-line.
//!
//! Bounded: argument and array lengths by the parser's limits, one request's total size by
//! `max_frame_bytes` (checked before each read), a batch by `max_commands` and about
//! `max_frame_bytes`.
//!
//! Invariants: replies are written in command order, one per command; a protocol error is
//! answered with its error line and closes the connection (the stream cannot be resynchronised,
//! as in Redis); the session's memory is bounded by trimming committed batches whenever the
//! host's maintenance publishes a new cut.

use std::io::{Read, Write};
use std::net::TcpStream;
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

use super::{BatchResult, DprHost};
use crate::connection::encode_command;

/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 * 1024;

/// How a connection treats one command.
enum Kind {
    Forward,
    CommitPoint,
    Quit,
    /// Answered at once with this raw reply.
    Reply(Vec<u8>),
}

fn classify(host: &impl DprHost, command: &Command) -> Kind {
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
                return Kind::Reply(error_reply(&format!(
                    "NOPROTO {} speaks RESP2 only (plain RESP connections)",
                    host.label()
                )))
            }
            Some(_) => {}
        },
        b"CLIENT"
            if command.args.get(1).is_some_and(|sub| {
                sub.eq_ignore_ascii_case(b"SETNAME") || sub.eq_ignore_ascii_case(b"SETINFO")
            }) =>
        {
            // Client libraries send these on connect; they label a connection, which here is
            // the host's (a proxy's pooled Redis connection, or none), so they are accepted and
            // not run.
            return Kind::Reply(b"+OK\r\n".to_vec());
        }
        _ => {}
    }
    match host.local_reply(command) {
        Some(reply) => Kind::Reply(reply),
        None => Kind::Forward,
    }
}

fn error_reply(line: &str) -> Vec<u8> {
    let mut out = Vec::new();
    encode_resp_error(&mut out, line);
    out
}

/// One plain RESP connection's state.
struct RespConnection<'a, H: DprHost> {
    host: &'a H,
    session: ConnectionSession,
    /// Replies waiting to be written.
    out: Vec<u8>,
    /// The published state the session last trimmed against.
    trimmed_against: Arc<ClusterState>,
}

/// Tells the host that a connection's session ended, however its loop returns.
struct Closed<'a, H: DprHost>(&'a H, u64);

impl<H: DprHost> Drop for Closed<'_, H> {
    fn drop(&mut self) {
        self.0.connection_closed(self.1);
    }
}

/// Serves a plain RESP connection whose first byte (already read) was `first_byte`.
pub fn serve<H: DprHost>(host: &H, mut stream: TcpStream, first_byte: u8) {
    let number = host.next_connection();
    let _closed = Closed(host, connection_session_id(host.worker_id(), number));
    // Join the newest world-line known here: during a recovery the published one is ahead of the
    // worker's, and a session that starts on it makes the worker restore before its first batch
    // (instead of running it on the abandoned world-line and reporting it lost right after).
    let published = host.published();
    let world_line = host.world_line().max(published.world_line);
    let mut connection = RespConnection {
        host,
        session: ConnectionSession::new(
            connection_session_id(host.worker_id(), number),
            host.worker_id(),
            world_line,
        ),
        out: Vec::with_capacity(64 * 1024),
        trimmed_against: published,
    };
    let limits = host.limits();
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
                        "ERR {}: request larger than max_frame_bytes ({} bytes)",
                        host.label(),
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

impl<H: DprHost> RespConnection<'_, H> {
    /// Executes a run of commands in order, appending one reply per command. Returns whether the
    /// client asked to close (QUIT).
    fn execute(&mut self, commands: &[Command]) -> bool {
        let mut batch_start = 0;
        for (index, command) in commands.iter().enumerate() {
            let kind = classify(self.host, command);
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
        let Some(state) = self.host.read_published() else {
            let line = format!(
                "ERR {}: reading the published DPR cut failed (see the server's log)",
                self.host.label()
            );
            encode_resp_error(&mut self.out, &line);
            return;
        };
        if self.session.rollback_due(state.world_line) {
            let line = self.rollback_line(None);
            encode_resp_error(&mut self.out, &line);
            return;
        }
        match self.session.commit_point(&state) {
            Ok(point) => point.encode_resp(&mut self.out),
            Err(error) => {
                let line = format!("ERR {}: {error}", self.host.label());
                encode_resp_error(&mut self.out, &line)
            }
        }
    }

    /// Handles the rollback the session is due for; returns the error line to answer with.
    /// `uncertain`: the batch the failure cut off (its commands may or may not have run).
    fn rollback_line(&mut self, uncertain: Option<SequenceRange>) -> String {
        let label = self.host.label();
        let target = match self
            .host
            .finder()
            .rollback_target(self.session.world_line())
        {
            Ok(target) => target,
            Err(error) => {
                return format!(
                "ERR {label}: the cluster rolled back, but reading what survived failed: {error}"
            )
            }
        };
        match self.session.handle_rollback(&target) {
            Ok(notice) => {
                tracing::info!(
                    worker = self.host.worker_id(),
                    session = self.session.id(),
                    world_line = notice.prefix.world_line,
                    until = notice.prefix.until_sequence,
                    "plain RESP session rolled back"
                );
                line_for(&notice, uncertain)
            }
            Err(error) => format!("ERR {label}: {error}"),
        }
    }

    /// Runs `commands` (none answered locally) as one DPR batch.
    fn run(&mut self, commands: &[Command]) {
        if commands.is_empty() {
            return;
        }
        let count = commands.len();
        let label = self.host.label();
        let answer_all = |out: &mut Vec<u8>, line: &str| {
            for _ in 0..count {
                encode_resp_error(out, line);
            }
        };
        if self.session.rollback_due(self.host.world_line()) {
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
                answer_all(&mut self.out, &format!("ERR {label}: {error}"));
                return;
            }
        };
        match self.host.run_batch(&header, &payload, commands) {
            BatchResult::Ran { header, replies } => match self.session.finish(ticket, &header) {
                Ok(Completion::Executed { .. }) => self.out.extend_from_slice(&replies),
                Ok(other) => answer_all(
                    &mut self.out,
                    &format!("ERR {label}: unexpected completion {other:?}"),
                ),
                Err(error) => answer_all(&mut self.out, &format!("ERR {label}: {error}")),
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
                answer_all(&mut self.out, &format!("ERR {label}: {text}"));
            }
            BatchResult::Unknown(text) => {
                self.session.abandon(ticket);
                let wait = self.host.recovery_wait();
                let deadline = Instant::now() + wait;
                while !self.session.rollback_due(self.host.world_line())
                    && Instant::now() < deadline
                {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                if self.session.rollback_due(self.host.world_line()) {
                    let line = self.rollback_line(Some(ticket.sequences));
                    answer_all(&mut self.out, &line);
                } else {
                    answer_all(
                        &mut self.out,
                        &format!(
                            "ERR {label}: {text}; no rollback followed within {} ms",
                            wait.as_millis()
                        ),
                    );
                }
            }
        }
        self.trim();
    }

    /// Forgets committed batches when the maintenance thread has read a new cut.
    fn trim(&mut self) {
        let latest = self.host.published();
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
    use prefixkv_dpr::finder::DprFinder;
    use prefixkv_dpr::{DprHeader, WorkerId, WorldLine};

    use crate::wire::FrameLimits;

    fn command(args: &[&str]) -> Command {
        Command {
            args: args
                .iter()
                .map(|a| Bytes::copy_from_slice(a.as_bytes()))
                .collect(),
        }
    }

    /// A host that answers `SELECT` itself and is never asked anything else by `classify`.
    struct Host;

    impl DprHost for Host {
        fn worker_id(&self) -> WorkerId {
            unreachable!()
        }
        fn limits(&self) -> FrameLimits {
            unreachable!()
        }
        fn label(&self) -> &'static str {
            "test host"
        }
        fn world_line(&self) -> WorldLine {
            unreachable!()
        }
        fn finder(&self) -> &dyn DprFinder {
            unreachable!()
        }
        fn published(&self) -> Arc<ClusterState> {
            unreachable!()
        }
        fn read_published(&self) -> Option<ClusterState> {
            unreachable!()
        }
        fn next_connection(&self) -> u64 {
            unreachable!()
        }
        fn recovery_wait(&self) -> std::time::Duration {
            unreachable!()
        }
        fn run_batch(&self, _: &DprHeader, _: &[u8], _: &[Command]) -> BatchResult {
            unreachable!()
        }
        fn local_reply(&self, command: &Command) -> Option<Vec<u8>> {
            command
                .name()
                .eq_ignore_ascii_case(b"SELECT")
                .then(|| b"-ERR refused\r\n".to_vec())
        }
    }

    #[test]
    fn commands_are_classified() {
        let classify = |args: &[&str]| classify(&Host, &command(args));
        assert!(matches!(classify(&["SET", "k", "v"]), Kind::Forward));
        assert!(matches!(classify(&["ping"]), Kind::Forward));
        assert!(matches!(classify(&["HELLO", "2"]), Kind::Forward));
        assert!(matches!(
            classify(&["prefixkv.commitpoint"]),
            Kind::CommitPoint
        ));
        assert!(matches!(classify(&["quit"]), Kind::Quit));
        let reply = |args: &[&str]| match classify(args) {
            Kind::Reply(bytes) => String::from_utf8(bytes).unwrap(),
            _ => panic!("{args:?} should be answered without running"),
        };
        assert_eq!(reply(&["select", "1"]), "-ERR refused\r\n");
        assert!(reply(&["HELLO", "3"]).starts_with("-NOPROTO test host speaks RESP2 only"));
        assert_eq!(reply(&["CLIENT", "SETINFO", "LIB-NAME", "x"]), "+OK\r\n");
        assert!(reply(&["PREFIXKV.COMMITPOINT", "x"]).contains("wrong number"));
    }
}

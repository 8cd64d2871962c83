//! [`RedisConnection`]: a minimal blocking RESP client connection, and [`encode_command`].
//!
//! What D-Redis's proxy uses to talk to its `redis-server`, and what tests and tools use to talk
//! plain RESP to a proxy or a cluster worker: one command at a time ([`RedisConnection::command`])
//! or raw pipelined bytes forwarded as they are ([`RedisConnection::send_raw`],
//! [`RedisConnection::read_raw_replies`]).
//!
//! Invariants: every read and write is bounded by the timeout given at connect; replies are
//! decoded with `prefixkv_resp`'s default limits, so a peer cannot make it allocate beyond them;
//! bytes received after the replies asked for stay buffered for the next read.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use prefixkv_resp::{Limits, Reply, ReplyParser};

/// Encodes one command as a RESP array of bulk strings.
pub fn encode_command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// A blocking RESP connection (to a redis-server, a D-Redis proxy or a cluster worker).
pub struct RedisConnection {
    stream: TcpStream,
    buffer: BytesMut,
    parser: ReplyParser,
}

impl RedisConnection {
    /// Connects with `timeout` for the connect and for each read/write.
    pub fn connect(address: SocketAddr, timeout: Duration) -> io::Result<Self> {
        let stream = TcpStream::connect_timeout(&address, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        Ok(Self {
            stream,
            buffer: BytesMut::with_capacity(16 * 1024),
            parser: ReplyParser::new(Limits::default()),
        })
    }

    /// Writes raw RESP commands.
    pub fn send_raw(&mut self, commands: &[u8]) -> io::Result<()> {
        self.stream.write_all(commands)
    }

    fn fill(&mut self) -> io::Result<Bytes> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "redis closed the connection",
            ));
        }
        self.buffer.extend_from_slice(&chunk[..n]);
        Ok(Bytes::copy_from_slice(&chunk[..n]))
    }

    /// Reads one decoded reply.
    pub fn read_reply(&mut self) -> io::Result<Reply> {
        loop {
            if let Some(reply) = self.parser.parse(&mut self.buffer).map_err(invalid)? {
                return Ok(reply);
            }
            self.fill()?;
        }
    }

    /// Reads exactly `count` replies and appends their raw bytes to `out` (for forwarding).
    /// Bytes after them (replies to commands pipelined later) stay buffered.
    pub fn read_raw_replies(&mut self, count: usize, out: &mut Vec<u8>) -> io::Result<()> {
        let start = out.len();
        let mut seen = 0;
        // `out` mirrors every byte the parser sees; whatever is left unparsed at the end is
        // trimmed off again.
        out.extend_from_slice(&self.buffer);
        loop {
            while seen < count {
                match self.parser.parse(&mut self.buffer).map_err(invalid)? {
                    Some(_) => seen += 1,
                    None => break,
                }
            }
            if seen == count {
                let replies_end = out.len() - self.buffer.len();
                debug_assert!(replies_end >= start);
                out.truncate(replies_end);
                return Ok(());
            }
            let chunk = self.fill()?;
            out.extend_from_slice(&chunk);
        }
    }

    /// Bytes received but not yet consumed as replies.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Sends one command and reads its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> io::Result<Reply> {
        let mut out = Vec::new();
        encode_command(&mut out, args);
        self.send_raw(&out)?;
        self.read_reply()
    }
}

fn invalid(error: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, error.to_string())
}

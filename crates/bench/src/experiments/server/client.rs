//! A small blocking RESP client over `TcpStream`: pipelined requests written with one write, the
//! replies decoded with `prefixkv-resp` (bounded: a reply larger than its limits is an error, so
//! a misbehaving server cannot make us allocate what it claims).
//!
//! Both servers get exactly the same bytes from it, so neither side is favoured by a client
//! library's choices.

use anyhow::{anyhow, bail, Context, Result};
use bytes::BytesMut;
use prefixkv_resp::{parse_reply, Limits, Reply};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// One connection.
pub struct Client {
    stream: TcpStream,
    input: BytesMut,
    output: Vec<u8>,
    port: u16,
}

impl Client {
    /// Connects to `127.0.0.1:port`.
    pub fn connect(port: u16) -> Result<Client> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
        stream.set_nodelay(true)?;
        // A server that stops answering fails the run instead of hanging it.
        stream.set_read_timeout(Some(Duration::from_secs(120)))?;
        Ok(Client {
            stream,
            input: BytesMut::with_capacity(64 * 1024),
            output: Vec::with_capacity(64 * 1024),
            port,
        })
    }

    /// Queues one command (multibulk encoding) without sending it.
    pub fn queue(&mut self, args: &[&[u8]]) {
        self.output
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for arg in args {
            self.output
                .extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
            self.output.extend_from_slice(arg);
            self.output.extend_from_slice(b"\r\n");
        }
    }

    /// Sends everything queued with one write.
    pub fn flush(&mut self) -> Result<()> {
        self.stream
            .write_all(&self.output)
            .with_context(|| format!("writing to 127.0.0.1:{}", self.port))?;
        self.output.clear();
        Ok(())
    }

    /// Reads one reply.
    pub fn read(&mut self) -> Result<Reply> {
        loop {
            if let Some(reply) = parse_reply(&mut self.input, Limits::default())
                .map_err(|e| anyhow!("bad reply from 127.0.0.1:{}: {e}", self.port))?
            {
                return Ok(reply);
            }
            let mut chunk = [0u8; 64 * 1024];
            let read = self
                .stream
                .read(&mut chunk)
                .with_context(|| format!("reading from 127.0.0.1:{}", self.port))?;
            if read == 0 {
                bail!("127.0.0.1:{} closed the connection", self.port);
            }
            self.input.extend_from_slice(&chunk[..read]);
        }
    }

    /// Reads `count` replies and fails on the first that is not `+OK`: a write counts as
    /// acknowledged only when its reply is exactly that.
    pub fn read_ok(&mut self, count: usize) -> Result<()> {
        for _ in 0..count {
            match self.read()? {
                Reply::SimpleString(text) if &text[..] == b"OK" => {}
                other => bail!(
                    "127.0.0.1:{} answered {} where OK was expected",
                    self.port,
                    reply_text(&other)
                ),
            }
        }
        Ok(())
    }

    /// Sends one command and reads its reply.
    pub fn call(&mut self, args: &[&str]) -> Result<Reply> {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.queue(&args);
        self.flush()?;
        self.read()
    }

    /// `INFO <section>` as `(field, value)` lines.
    pub fn info(&mut self, section: &str) -> Result<Vec<(String, String)>> {
        match self.call(&["INFO", section])? {
            Reply::BulkString(text) => Ok(String::from_utf8_lossy(&text)
                .lines()
                .filter_map(|line| {
                    let (name, value) = line.split_once(':')?;
                    Some((name.to_string(), value.trim().to_string()))
                })
                .collect()),
            other => bail!("INFO {section}: unexpected reply {other:?}"),
        }
    }

    /// One field of `INFO <section>`.
    pub fn info_field(&mut self, section: &str, field: &str) -> Result<String> {
        self.info(section)?
            .into_iter()
            .find(|(name, _)| name == field)
            .map(|(_, value)| value)
            .ok_or_else(|| anyhow!("INFO {section} has no field {field}"))
    }
}

/// The text of a simple or bulk string reply, for error messages and checks.
pub fn reply_text(reply: &Reply) -> String {
    match reply {
        Reply::SimpleString(text) | Reply::BulkString(text) | Reply::Error(text) => {
            String::from_utf8_lossy(text).into_owned()
        }
        Reply::Integer(n) => n.to_string(),
        other => format!("{other:?}"),
    }
}

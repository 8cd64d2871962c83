//! Load and check client for `scripts/fuse-crash-check`.
//!
//! `crashfs-load load`: N clients, each sending `SET <run>:c<client>:<seq> v<run>:<client>:<seq>:<pad>` one
//! at a time and appending `<seq> <ack time µs>` to `<acks>/client-<n>` only after the `+OK`
//! came back: the file lists exactly the acknowledged writes. Ends at the first connection
//! error (the server was killed) or after `--max-seconds`.
//!
//! `crashfs-load check`: reads every acknowledged key back (pipelined GETs), plus the one write
//! that may have been in flight at the cut and the one after it (never sent), and judges each
//! client with the project's acknowledged-writes oracle (`prefixkv_testkit::acknowledged`). It
//! prints one line of `key=value` figures: acknowledged, lost, wrong (a value no client wrote
//! there), the time from the first lost acknowledgement to the cut, and prefix violations
//! (clients whose recovered writes are not a prefix of what they sent). Every key is written
//! once, so each check is exact.
//!
//! Requests go through `prefixkv_resp::Encoder` and replies through its bounded `ReplyParser`.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use bytes::BytesMut;
use clap::{Parser, Subcommand};
use prefixkv_resp::{Encoder, Limits, Protocol, Reply, ReplyParser};
use prefixkv_testkit::acknowledged::check_connection;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Load {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 4)]
        clients: u32,
        #[arg(long)]
        acks: PathBuf,
        /// Key prefix, unique per cut so that cuts on one data directory never share keys.
        #[arg(long)]
        run: String,
        #[arg(long, default_value_t = 100)]
        value_size: usize,
        #[arg(long, default_value_t = 60)]
        max_seconds: u64,
    },
    Check {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        acks: PathBuf,
        /// Key prefix, unique per cut so that cuts on one data directory never share keys.
        #[arg(long)]
        run: String,
        #[arg(long, default_value_t = 100)]
        value_size: usize,
        /// Time of the cut, µs since the epoch, to report how far back losses reach.
        #[arg(long)]
        cut_us: Option<u64>,
    },
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_micros() as u64
}

fn key(run: &str, client: u32, seq: u64) -> String {
    format!("{run}:c{client}:{seq}")
}

fn value(run: &str, client: u32, seq: u64, size: usize) -> Vec<u8> {
    let mut v = format!("v{run}:{client}:{seq}:").into_bytes();
    v.resize(size.max(v.len()), b'x');
    v
}

/// A blocking RESP2 connection to the server under test.
struct Conn {
    stream: TcpStream,
    encoder: Encoder,
    /// Requests queued by [`Conn::queue`], written by [`Conn::send`].
    out: BytesMut,
    /// Bytes received and not yet decoded.
    received: BytesMut,
    parser: ReplyParser,
}

impl Conn {
    fn connect(port: u16) -> anyhow::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
        stream.set_nodelay(true)?;
        // Bounded: a wedged server must not hang the check forever.
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        Ok(Conn {
            stream,
            encoder: Encoder::new(Protocol::Resp2),
            out: BytesMut::new(),
            received: BytesMut::with_capacity(64 * 1024),
            parser: ReplyParser::new(Limits::default()),
        })
    }

    /// Queues one request of `args` (sent by the next [`Conn::send`]).
    fn queue(&mut self, args: &[&[u8]]) {
        self.encoder.array_header(&mut self.out, args.len());
        for arg in args {
            self.encoder.bulk_string(&mut self.out, arg);
        }
    }

    fn send(&mut self) -> std::io::Result<()> {
        self.stream.write_all(&self.out)?;
        self.out.clear();
        Ok(())
    }

    /// The next reply (an error if the connection closed or sent something malformed).
    fn reply(&mut self) -> anyhow::Result<Reply> {
        loop {
            if let Some(reply) = self.parser.parse(&mut self.received)? {
                return Ok(reply);
            }
            let mut chunk = [0u8; 16 * 1024];
            let read = self.stream.read(&mut chunk)?;
            if read == 0 {
                bail!("connection closed");
            }
            self.received.extend_from_slice(&chunk[..read]);
        }
    }
}

fn load_client(
    port: u16,
    run: &str,
    client: u32,
    acks: &Path,
    size: usize,
    deadline: Instant,
) -> anyhow::Result<u64> {
    let mut out = BufWriter::new(File::create(acks.join(format!("client-{client}")))?);
    let mut conn = Conn::connect(port)?;
    let mut seq = 0;
    while Instant::now() < deadline {
        conn.queue(&[
            b"SET",
            key(run, client, seq).as_bytes(),
            &value(run, client, seq, size),
        ]);
        // Any error here is the cut: what was acknowledged is already in `out`.
        if conn.send().is_err() {
            break;
        }
        match conn.reply() {
            Ok(Reply::SimpleString(ok)) if ok == "OK" => writeln!(out, "{seq} {}", now_us())?,
            Ok(other) => bail!("client {client}: SET {seq} answered {other:?}"),
            Err(_) => break,
        }
        seq += 1;
    }
    out.flush()?;
    Ok(seq)
}

fn check(
    port: u16,
    run: &str,
    acks: &Path,
    size: usize,
    cut_us: Option<u64>,
) -> anyhow::Result<()> {
    let mut conn = Conn::connect(port)?;
    let (mut acked, mut lost, mut wrong, mut violations) = (0u64, 0u64, 0u64, 0u64);
    let mut first_lost_us = u64::MAX;
    let mut last_ack_us = 0;
    let mut clients = 0;
    for entry in fs::read_dir(acks)? {
        let path = entry?.path();
        let Some(client) = path
            .file_name()
            .and_then(|n| n.to_str()?.strip_prefix("client-")?.parse::<u32>().ok())
        else {
            continue;
        };
        clients += 1;
        // The acknowledged writes, in order: write `i` and the time its `+OK` came back.
        let mut ack_times_us = Vec::new();
        for line in BufReader::new(File::open(&path)?).lines() {
            let line = line?;
            let mut it = line.split(' ');
            let seq: u64 = it.next().context("seq")?.parse()?;
            let t: u64 = it.next().context("time")?.parse()?;
            if seq != ack_times_us.len() as u64 {
                bail!("{}: write {seq} out of order", path.display());
            }
            ack_times_us.push(t);
        }
        let acknowledged = ack_times_us.len() as u64;
        // One write at a time: at most the next one was sent and unanswered at the cut.
        let issued = acknowledged + 1;
        // Look one write further, for a write that was never sent.
        let mut visible = Vec::new();
        for first in (0..=issued).step_by(1000) {
            let seqs = first..(first + 1000).min(issued + 1);
            for seq in seqs.clone() {
                conn.queue(&[b"GET", key(run, client, seq).as_bytes()]);
            }
            conn.send()?;
            for seq in seqs {
                visible.push(match conn.reply()? {
                    Reply::BulkString(v) if v == value(run, client, seq, size) => true,
                    Reply::NullBulkString | Reply::Null => false,
                    Reply::BulkString(_) => {
                        wrong += 1;
                        false
                    }
                    other => bail!("GET {}: {other:?}", key(run, client, seq)),
                });
            }
        }
        acked += acknowledged;
        last_ack_us = last_ack_us.max(ack_times_us.last().copied().unwrap_or(0));
        match check_connection(issued, acknowledged, &visible) {
            Ok(recovery) => {
                lost += recovery.lost;
                if let Some(first) = recovery.first_lost() {
                    first_lost_us = first_lost_us.min(ack_times_us[first as usize]);
                }
            }
            Err(violation) => {
                eprintln!("crashfs-load: client {client}: {violation}");
                violations += 1;
                let missing = (0..acknowledged as usize).filter(|&i| !visible[i]);
                for i in missing {
                    lost += 1;
                    first_lost_us = first_lost_us.min(ack_times_us[i]);
                }
            }
        }
    }
    let span_ms = |end: u64| {
        if lost == 0 {
            0.0
        } else {
            end.saturating_sub(first_lost_us) as f64 / 1000.0
        }
    };
    println!(
        "clients={clients} acked={acked} lost={lost} wrong={wrong} prefix_violations={violations} \
         lost_span_to_last_ack_ms={:.1} lost_span_to_cut_ms={:.1}",
        span_ms(last_ack_us),
        cut_us.map_or(0.0, span_ms)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Load {
            port,
            clients,
            acks,
            run,
            value_size,
            max_seconds,
        } => {
            fs::create_dir_all(&acks)?;
            let deadline = Instant::now() + Duration::from_secs(max_seconds);
            let threads: Vec<_> = (0..clients)
                .map(|c| {
                    let (acks, run) = (acks.clone(), run.clone());
                    std::thread::spawn(move || {
                        load_client(port, &run, c, &acks, value_size, deadline)
                    })
                })
                .collect();
            let mut total = 0;
            for t in threads {
                total += t.join().expect("client thread panicked")?;
            }
            eprintln!("crashfs-load: {total} SETs acknowledged");
            Ok(())
        }
        Cmd::Check {
            port,
            acks,
            run,
            value_size,
            cut_us,
        } => check(port, &run, &acks, value_size, cut_us),
    }
}

//! Load and check client for `scripts/fuse-crash-check`.
//!
//! `crashfs-load load`: N clients, each sending `SET <run>:c<client>:<seq> v<run>:<client>:<seq>:<pad>` one
//! at a time and appending `<seq> <ack time µs>` to `<acks>/client-<n>` only after the `+OK`
//! came back: the file lists exactly the acknowledged writes. Ends at the first connection
//! error (the server was killed) or after `--max-seconds`.
//!
//! `crashfs-load check`: reads every acknowledged key back (pipelined GETs) and prints one
//! line of `key=value` figures: acknowledged, lost, wrong (a value no client wrote there),
//! the time from the first lost acknowledgement to the cut, and prefix violations (a client's
//! later acknowledged write survived while an earlier one was lost). Every key is written
//! once, so each check is exact.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

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

fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// One RESP2 reply: `Ok(Some(bytes))` for a simple or bulk string, `Ok(None)` for nil.
fn reply(r: &mut impl BufRead) -> anyhow::Result<Option<Vec<u8>>> {
    let mut line = Vec::new();
    if r.read_until(b'\n', &mut line)? == 0 {
        bail!("connection closed");
    }
    let body = line
        .strip_suffix(b"\r\n")
        .context("reply line without CRLF")?;
    match body.first() {
        Some(b'+') => Ok(Some(body[1..].to_vec())),
        Some(b'-') => bail!("server error: {}", String::from_utf8_lossy(&body[1..])),
        Some(b'$') => {
            let n: i64 = std::str::from_utf8(&body[1..])?.parse()?;
            if n < 0 {
                return Ok(None);
            }
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf)?;
            buf.truncate(n as usize);
            Ok(Some(buf))
        }
        _ => bail!("unexpected reply {:?}", String::from_utf8_lossy(body)),
    }
}

fn connect(port: u16) -> anyhow::Result<(TcpStream, BufReader<TcpStream>)> {
    let s = TcpStream::connect(("127.0.0.1", port))
        .with_context(|| format!("connecting to 127.0.0.1:{port}"))?;
    s.set_nodelay(true)?;
    // Bounded: a wedged server must not hang the check forever.
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    let r = BufReader::new(s.try_clone()?);
    Ok((s, r))
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
    let (mut s, mut r) = connect(port)?;
    let mut buf = Vec::new();
    let mut seq = 0;
    while Instant::now() < deadline {
        buf.clear();
        encode(
            &mut buf,
            &[
                b"SET",
                key(run, client, seq).as_bytes(),
                &value(run, client, seq, size),
            ],
        );
        // Any error here is the cut: what was acknowledged is already in `out`.
        if s.write_all(&buf).is_err() {
            break;
        }
        match reply(&mut r) {
            Ok(Some(ok)) if ok == b"OK" => writeln!(out, "{seq} {}", now_us())?,
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
    let (mut s, mut r) = connect(port)?;
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
        let mut list = Vec::new();
        for line in BufReader::new(File::open(&path)?).lines() {
            let line = line?;
            let mut it = line.split(' ');
            let seq: u64 = it.next().context("seq")?.parse()?;
            let t: u64 = it.next().context("time")?.parse()?;
            list.push((seq, t));
        }
        let mut lowest_lost = u64::MAX;
        for chunk in list.chunks(1000) {
            let mut buf = Vec::new();
            for (seq, _) in chunk {
                encode(&mut buf, &[b"GET", key(run, client, *seq).as_bytes()]);
            }
            s.write_all(&buf)?;
            for &(seq, t) in chunk {
                acked += 1;
                last_ack_us = last_ack_us.max(t);
                match reply(&mut r)? {
                    Some(v) if v == value(run, client, seq, size) => {
                        if seq > lowest_lost {
                            violations += 1;
                        }
                    }
                    Some(_) => wrong += 1,
                    None => {
                        lost += 1;
                        lowest_lost = lowest_lost.min(seq);
                        first_lost_us = first_lost_us.min(t);
                    }
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

//! Request-parsing speed: ns per command for our parser and for `redis-protocol` 6's
//! `decode_bytes_mut`, on a pipelined buffer of SET commands (no timing assertion anywhere:
//! this prints numbers to compare).
//!
//! Run: `cargo run --release -p prefixkv-resp --example parse_speed [commands] [rounds]`
//! (defaults: 1,000,000 commands, 3 rounds). Contenders alternate within each round; the
//! median and the range over rounds are printed. Times are this thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), which, unlike wall time, does not count the time the thread
//! waited for a core on a busy machine.

use std::hint::black_box;

/// This thread's CPU time.
#[derive(Clone, Copy)]
struct Instant(libc::timespec);

impl Instant {
    fn now() -> Self {
        let mut time = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `time` is a valid out-pointer; the clock id is supported on Linux.
        let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
        assert_eq!(status, 0, "clock_gettime failed");
        Self(time)
    }

    fn elapsed(&self) -> std::time::Duration {
        let now = Self::now().0;
        let nanos = (now.tv_sec - self.0.tv_sec) as i128 * 1_000_000_000
            + (now.tv_nsec - self.0.tv_nsec) as i128;
        std::time::Duration::from_nanos(nanos as u64)
    }
}

use bytes::BytesMut;
use prefixkv_resp::{Encoder, Limits, Protocol, RequestParser};

/// One pipelined buffer of `count` SET commands with keys and values of the given sizes.
fn workload(count: usize, key_len: usize, value_len: usize) -> Vec<u8> {
    let encoder = Encoder::new(Protocol::Resp2);
    let mut out = BytesMut::new();
    for index in 0..count {
        let key = format!("{index:0>key_len$}");
        let value = format!("{index:0>value_len$}");
        encoder.array_header(&mut out, 3);
        encoder.bulk_string(&mut out, b"SET");
        encoder.bulk_string(&mut out, &key.as_bytes()[key.len() - key_len..]);
        encoder.bulk_string(&mut out, &value.as_bytes()[value.len() - value_len..]);
    }
    out.to_vec()
}

fn ours(input: &[u8], count: usize) -> f64 {
    let mut buffer = BytesMut::from(input);
    let mut parser = RequestParser::new(Limits::default());
    let start = Instant::now();
    let mut parsed = 0;
    while let Some(command) = parser.parse(&mut buffer).expect("valid input") {
        black_box(&command);
        parsed += 1;
    }
    let elapsed = start.elapsed();
    assert_eq!(parsed, count);
    elapsed.as_nanos() as f64 / count as f64
}

fn redis_protocol(input: &[u8], count: usize) -> f64 {
    let mut buffer = BytesMut::from(input);
    let start = Instant::now();
    let mut parsed = 0;
    while let Some((frame, _, _)) =
        redis_protocol::resp2::decode::decode_bytes_mut(&mut buffer).expect("valid input")
    {
        black_box(&frame);
        parsed += 1;
    }
    let elapsed = start.elapsed();
    assert_eq!(parsed, count);
    elapsed.as_nanos() as f64 / count as f64
}

/// Encodes `count` GET replies into a 64 KiB write buffer that is flushed (cleared) when full,
/// as a server's connection buffer would be.
fn encode_get_replies(count: usize, value_len: usize) -> f64 {
    let encoder = Encoder::new(Protocol::Resp3);
    let value = vec![b'v'; value_len];
    let mut out = BytesMut::with_capacity(64 * 1024);
    let start = Instant::now();
    for _ in 0..count {
        if out.len() > 60 * 1024 {
            black_box(&out);
            out.clear();
        }
        encoder.bulk_string(&mut out, black_box(&value));
    }
    let elapsed = start.elapsed();
    black_box(&out);
    elapsed.as_nanos() as f64 / count as f64
}

fn summary(mut samples: Vec<f64>) -> String {
    samples.sort_by(f64::total_cmp);
    format!(
        "median {:7.1} ns/command (min {:.1}, max {:.1})",
        samples[samples.len() / 2],
        samples[0],
        samples[samples.len() - 1]
    )
}

fn main() {
    let mut arguments = std::env::args().skip(1);
    let count: usize = arguments
        .next()
        .map_or(1_000_000, |text| text.parse().expect("commands"));
    let rounds: usize = arguments
        .next()
        .map_or(3, |text| text.parse().expect("rounds"));
    for (name, key_len, value_len) in [
        ("SET <8-byte key> <8-byte value>", 8, 8),
        ("SET <20-byte key> <32-byte value>", 20, 32),
    ] {
        let input = workload(count, key_len, value_len);
        let (mut ours_ns, mut theirs_ns) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            // Alternate which contender runs first, so neither always gets the warm cache.
            if round % 2 == 0 {
                ours_ns.push(ours(&input, count));
                theirs_ns.push(redis_protocol(&input, count));
            } else {
                theirs_ns.push(redis_protocol(&input, count));
                ours_ns.push(ours(&input, count));
            }
        }
        println!("{name}, {count} pipelined commands, {rounds} rounds:");
        println!(
            "  prefixkv-resp RequestParser::parse      {}",
            summary(ours_ns)
        );
        println!(
            "  redis-protocol 6 decode_bytes_mut       {}",
            summary(theirs_ns)
        );
    }
    let encode_ns = (0..rounds).map(|_| encode_get_replies(count, 32)).collect();
    println!("Encoding a 32-byte bulk string reply (Encoder::bulk_string):");
    println!("  {}", summary(encode_ns).replace("command", "reply"));
}

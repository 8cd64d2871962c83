//! Loopback ports for tests that start servers.
//!
//! A port from `bind(127.0.0.1:0)` comes from the kernel's ephemeral range, the same range every
//! other probe, server and outgoing connection of a parallel test run draws from: between the
//! probe's release and the server's bind another test can probe or bind the same port, and a
//! readiness check then talks to the wrong listener (CI once saw a redis-server test's PING reset
//! by another test's probe). [`free_port`] picks at random from below the ephemeral range
//! (`/proc/sys/net/ipv4/ip_local_port_range`), where the kernel never hands out ports on its own,
//! so only another explicit pick of the same port (one in thousands) can collide, and the callers'
//! start loops retry on that.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::rng::Rng;

/// Lowest port picked: above the registered services most machines run (1024..10000).
const FIRST_PORT: u16 = 10_000;

/// A loopback port that was free a moment ago (bound and released), chosen at random below the
/// kernel's ephemeral range; the caller binds it (or passes it to a server) and retries with
/// another port if it was taken meanwhile.
pub fn free_port() -> u16 {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let end = ephemeral_start().max(FIRST_PORT + 1_000);
    let seed = u64::from(std::process::id()) << 32
        ^ CALLS.fetch_add(1, Ordering::Relaxed)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    let mut rng = Rng::new(seed);
    for _ in 0..1_000 {
        let port = FIRST_PORT + (rng.next_u64() % u64::from(end - FIRST_PORT)) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    // Every pick was taken (a machine with thousands of listeners): fall back to the kernel's.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("bind a loopback port")
        .port()
}

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_bindable() {
        let end = ephemeral_start().max(FIRST_PORT + 1_000);
        for _ in 0..50 {
            let port = free_port();
            assert!((FIRST_PORT..end).contains(&port), "port {port}");
            TcpListener::bind(("127.0.0.1", port)).expect("the port is free");
        }
    }
}

//! The pooled connections a proxy forwards batches on, and the check that a payload holds whole
//! RESP commands.
//!
//! Invariant: a connection is reused only if it returned exactly the replies asked for (nothing
//! more buffered) and belongs to the current generation; a Redis restart bumps the generation, so
//! no connection to a previous Redis process is ever reused.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::REDIS_IO_TIMEOUT;
use prefixkv_dprnet::connection::RedisConnection;

/// A pool of connections to one Redis, invalidated wholesale when the Redis restarts.
pub(super) struct Pool {
    pub(super) address: SocketAddr,
    idle: Mutex<Vec<(u64, RedisConnection)>>,
    generation: AtomicU64,
}

impl Pool {
    pub(super) fn new(address: SocketAddr) -> Self {
        Self {
            address,
            idle: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
        }
    }

    fn take(&self) -> std::io::Result<(u64, RedisConnection)> {
        let generation = self.generation.load(Ordering::SeqCst);
        while let Some((g, connection)) = self.idle.lock().pop() {
            if g == generation {
                return Ok((g, connection));
            }
        }
        Ok((
            generation,
            RedisConnection::connect(self.address, REDIS_IO_TIMEOUT)?,
        ))
    }

    fn put(&self, generation: u64, connection: RedisConnection) {
        if generation == self.generation.load(Ordering::SeqCst) {
            self.idle.lock().push((generation, connection));
        }
    }

    pub(super) fn reset(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.idle.lock().clear();
    }

    /// Forwards raw commands and collects `count` raw replies.
    pub(super) fn forward(&self, payload: &[u8], count: usize) -> std::io::Result<Vec<u8>> {
        let (generation, mut connection) = self.take()?;
        connection.send_raw(payload)?;
        let mut replies = Vec::with_capacity(64 * count);
        connection.read_raw_replies(count, &mut replies)?;
        if connection.buffered_bytes() > 0 {
            // One batch at a time per connection and Redis sends nothing unasked: extra bytes
            // mean the connection is out of step, so it is dropped, not reused.
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!(
                    "redis sent {} bytes beyond the {count} replies expected",
                    connection.buffered_bytes()
                ),
            ));
        }
        self.put(generation, connection);
        Ok(replies)
    }
}

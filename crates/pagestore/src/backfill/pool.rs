//! The fallback engine of the fast backfill: two reader threads and synchronous vectored writes.
//!
//! Used when io_uring is unavailable or the files have no descriptor (the simulated disk). Reads
//! go through [`DiskFile::read_at`](prefixkv_storage::DiskFile) on [`READER_THREADS`] threads fed
//! by a channel; a batch is written by the checkpointer thread itself with `write_at` (`pwritev`
//! on a real disk), one call per run continued over short writes, while the reader threads keep
//! reading the next pages: reads and writes overlap here too.
//!
//! Invariants: buffers move by value through the channels, so no buffer is shared with a thread
//! that may still use it; the threads are scoped to the copy and exit when the request channel
//! closes (at the end, or on an error), so nothing outlives the checkpoint.

use super::{Engine, Event, ReadRun, WriteBatch};
use crate::error::{Error, Result};
use crate::store::PageStore;
use crate::wal::read_frame_page;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};

/// Reader threads (the machines we target have 2 cores; more only queue in the kernel).
pub const READER_THREADS: usize = 2;

type Request = (usize, u64, Vec<u8>);
type Completion = (usize, Result<Vec<u8>>);

/// Runs `f` with a pool engine whose reader threads live for the call.
pub(super) fn with_engine<R>(
    store: &PageStore,
    f: impl FnOnce(&mut PoolEngine<'_>) -> Result<R>,
) -> Result<R> {
    let inner = &store.inner;
    std::thread::scope(|scope| {
        let (request_tx, request_rx) = channel::<Request>();
        let (done_tx, done_rx) = channel::<Completion>();
        let request_rx = Arc::new(Mutex::new(request_rx));
        for _ in 0..READER_THREADS {
            let requests = Arc::clone(&request_rx);
            let done = done_tx.clone();
            scope.spawn(move || loop {
                // The lock is held only to take one request; a closed channel ends the thread.
                let next = requests.lock().map(|rx| rx.recv());
                let Ok(Ok((token, frame_id, mut buffer))) = next else {
                    return;
                };
                let result =
                    read_frame_page(&*inner.wal_file, &inner.wal_path, frame_id, &mut buffer)
                        .map(|()| buffer);
                if done.send((token, result)).is_err() {
                    return;
                }
            });
        }
        drop(done_tx);
        let mut engine = PoolEngine {
            store,
            requests: Some(request_tx),
            done: done_rx,
            reads_in_flight: 0,
            written: Vec::new(),
        };
        let result = f(&mut engine);
        // Closing the channel stops the threads; the scope joins them.
        engine.requests = None;
        result
    })
}

/// See the module doc.
pub(super) struct PoolEngine<'a> {
    store: &'a PageStore,
    requests: Option<Sender<Request>>,
    done: Receiver<Completion>,
    reads_in_flight: usize,
    /// Batches written since the last reap, reported by the next one.
    written: Vec<Event>,
}

impl PoolEngine<'_> {
    fn completed(&mut self, (token, result): Completion, events: &mut Vec<Event>) -> Result<()> {
        self.reads_in_flight -= 1;
        events.push(Event::Read {
            token,
            buffer: result?,
        });
        Ok(())
    }
}

impl Engine for PoolEngine<'_> {
    fn read(&mut self, run: ReadRun) -> Result<u64> {
        // One request per frame: the trait has no vectored read, and two threads share the run.
        let requests = self.requests.as_ref().expect("open until the copy ends");
        let calls = run.buffers.len() as u64;
        for (i, buffer) in run.buffers.into_iter().enumerate() {
            requests
                .send((run.first_token + i, run.first_frame + i as u64, buffer))
                .map_err(|_| Error::Invalid("the backfill reader threads exited early".into()))?;
            self.reads_in_flight += 1;
        }
        Ok(calls)
    }

    fn write(&mut self, batch: WriteBatch) -> Result<()> {
        let calls = super::write_batch_now(self.store, &batch)?;
        self.written.push(Event::Written { batch, calls });
        Ok(())
    }

    fn submit(&mut self) -> Result<()> {
        Ok(())
    }

    fn reap(&mut self, block: bool, events: &mut Vec<Event>) -> Result<()> {
        events.append(&mut self.written);
        if block && events.is_empty() && self.reads_in_flight > 0 {
            let completion = self
                .done
                .recv()
                .map_err(|_| Error::Invalid("the backfill reader threads exited early".into()))?;
            self.completed(completion, events)?;
        }
        while let Ok(completion) = self.done.try_recv() {
            self.completed(completion, events)?;
        }
        Ok(())
    }
}

//! The pending path: reads and upserts of keys whose records left memory, with many page-file
//! reads in flight per session, completed in the session's own loop (FASTER's pending
//! operations; issue 33).
//!
//! [`Session::start_read`] and [`Session::start_upsert`] run the operation with chain walks that
//! *pend*: a walk that reaches a record below the head address stops there instead of reading
//! it synchronously. The operation is then parked in the session's table, the record's read is
//! submitted to the session's [`PageReads`] (io_uring where it works), and the call returns
//! [`Started::Pending`]. [`Session::complete_pending`] reaps finished reads and runs each parked
//! operation *again from the start*, with the records read so far installed as read-ahead
//! copies (`log::cold`): its walk passes them without I/O, and either finishes or stops at the
//! next record below the head (a chain of another key's records: another read).
//!
//! Invariants:
//! 1. **A pending operation has not happened.** It takes no serial while parked (the serial the
//!    pending attempt took is handed back) and takes the next serial when it runs to the end
//!    inside `complete_pending`, exactly as an operation issued at that moment. So the CPR
//!    guarantees are the synchronous ones, in the order operations *finished*: the serial each
//!    one got is in its [`Finished`]. A checkpoint never waits for a pending operation (it has
//!    no version until it runs).
//! 2. **Per key, operations finish in the order they were started.** An operation whose key
//!    hash matches a parked one's is parked behind it without a read, and runs only after every
//!    earlier operation on that hash finished (`complete_pending` walks the table in start
//!    order). Operations on different keys may finish in any order.
//! 3. **Read-ahead copies are installed only while their own operation runs** and taken back
//!    after it, so no other operation (or thread) sees them; a copy is a snapshot of an
//!    immutable record. If the record's address falls below the begin address meanwhile
//!    (page-file compaction copied the key forward), the walk from the index no longer reaches
//!    it and the copy is unused.
//! 4. **Bounded:** at most [`PENDING_DEPTH`] operations are parked per session (a start with a
//!    full table runs synchronously instead), each read is at most [`PENDING_READ_BYTES`]
//!    (a longer record is read synchronously when its first read shows its size), and a parked
//!    operation holds its key, its value and its copies.
//! 5. **Failures reach the caller**: a read error or a damaged record ends that operation with
//!    an `EngineError` in its `Finished`, and the others go on.

use std::collections::VecDeque;

use prefixkv_storage::pagefile::{PageReads, ReadsError};

use super::{Ran, Session, Write};
use crate::index::KeyHash;
use crate::log::{install_read_ahead, take_back_read_ahead, words_for, ColdBytes, ReadAheadCopies};
use crate::EngineError;

/// Most operations parked at once per session.
pub const PENDING_DEPTH: usize = 64;
/// Longest page-file read of the pending path: a record larger than this is read synchronously
/// once its first read shows its size.
pub const PENDING_READ_BYTES: u32 = 8192;

/// How a started operation went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started<T> {
    /// It ran to the end (as the synchronous operation would): the outcome.
    Done(T),
    /// It waits for a page-file read; [`Session::complete_pending`] finishes it.
    Pending,
}

/// A pending operation that [`Session::complete_pending`] finished.
#[derive(Debug)]
pub struct Finished<'a> {
    /// The token it was started with.
    pub token: u64,
    /// The serial it ran with (invariant 1 of the module: the order operations finished).
    pub serial: u64,
    /// For a read: whether the key was found; for an upsert: whether it existed before.
    pub found: bool,
    /// For a read that found the key, its value (valid until the callback returns); empty
    /// otherwise.
    pub value: &'a [u8],
}

/// What a parked operation does.
enum Kind {
    Read,
    Upsert,
}

/// Where a parked operation is.
enum State {
    /// Its read of the record at this address is in flight.
    Reading(u64),
    /// The read finished (the copy is in `copies`): run it again.
    Ready,
    /// Parked behind an earlier operation on the same key hash, no read of its own yet.
    Waiting,
    /// Failed: report this.
    Failed(EngineError),
}

struct Parked {
    /// Identifies the operation's read (the page reader's token).
    id: u64,
    token: u64,
    kind: Kind,
    hash: KeyHash,
    key: Vec<u8>,
    /// The upsert's value.
    value: Vec<u8>,
    state: State,
    /// Records read for it so far: (address, words), installed while it runs.
    copies: ReadAheadCopies,
}

/// A session's pending operations and its page reader.
pub(super) struct Pending {
    reads: PageReads,
    /// In start order (invariant 2).
    parked: VecDeque<Parked>,
    next_id: u64,
}

/// Operations finished by one round of [`Session::complete_pending`]: token, serial, found, and
/// for reads the value (or the error).
type Done = (u64, Result<(u64, bool, Vec<u8>), EngineError>);

impl Session {
    /// Reads `key` into `value_out` if its record is in memory (returns `Done(found)`, exactly
    /// as [`Session::read`]); else parks the read, starts reading the record from the page file
    /// and returns `Pending`: [`Session::complete_pending`] finishes it, handing `token` back
    /// with the value. See the module docs for ordering and serials.
    pub fn start_read(
        &mut self,
        key: &[u8],
        value_out: &mut Vec<u8>,
        token: u64,
    ) -> Result<Started<bool>, EngineError> {
        let hash = KeyHash::of(key);
        if self.must_wait(hash) {
            return self.park(Kind::Read, hash, key, &[], token, None);
        }
        self.begin_op()?;
        let ran = self.pending_run(|session| {
            Ok(session.try_read(hash, key, Some(&mut *value_out), |_| {}))
        })?;
        match ran {
            Ran::Done(found) => Ok(Started::Done(found)),
            Ran::Cold(address) => self.park(Kind::Read, hash, key, &[], token, Some(address)),
        }
    }

    /// Upserts `key` if its chain needs no page-file read (returns `Done(existed)`, as
    /// [`Session::upsert_existed`]); else parks the upsert (with a copy of `value`), starts the
    /// read and returns `Pending`; [`Session::complete_pending`] finishes it.
    pub fn start_upsert(
        &mut self,
        key: &[u8],
        value: &[u8],
        token: u64,
    ) -> Result<Started<bool>, EngineError> {
        self.check_sizes(key, value.len())?;
        let hash = KeyHash::of(key);
        if self.must_wait(hash) {
            return self.park(Kind::Upsert, hash, key, value, token, None);
        }
        self.begin_op()?;
        let write = Write::Put(value, words_for(value.len()));
        let ran = self.pending_run(|session| session.try_write(hash, key, write))?;
        match ran {
            Ran::Done(existed) => Ok(Started::Done(existed)),
            Ran::Cold(address) => self.park(Kind::Upsert, hash, key, value, token, Some(address)),
        }
    }

    /// Operations started and not yet finished.
    pub fn pending(&self) -> usize {
        self.pending
            .as_ref()
            .map_or(0, |pending| pending.parked.len())
    }

    /// Finishes the pending operations whose reads completed, calling `each` for every one that
    /// finished (its token, serial, and found/value: [`Finished`]; or its error). With `wait`,
    /// blocks until at least one read completes when none has yet and some are in flight.
    /// Returns how many finished. Call it in the session's loop (`wait = false` between
    /// operations, `wait = true` to drain).
    pub fn complete_pending(
        &mut self,
        wait: bool,
        mut each: impl FnMut(Result<Finished<'_>, (u64, EngineError)>),
    ) -> Result<usize, EngineError> {
        let Some(mut pending) = self.pending.take() else {
            return Ok(0);
        };
        let result = self.complete_round(&mut pending, wait);
        self.pending = Some(pending);
        let done = result?;
        let count = done.len();
        for (token, outcome) in done {
            match outcome {
                Ok((serial, found, value)) => each(Ok(Finished {
                    token,
                    serial,
                    found,
                    value: &value,
                })),
                Err(error) => each(Err((token, error))),
            }
        }
        Ok(count)
    }

    /// Runs `attempt` with walks that pend; a cold stop hands the serial back (invariant 1).
    fn pending_run<T>(
        &mut self,
        attempt: impl FnMut(&mut Session) -> Result<super::Step<T>, EngineError>,
    ) -> Result<Ran<T>, EngineError> {
        self.pend_walks = self.store.log.is_tiered();
        let ran = self.run_or_pend(attempt);
        self.pend_walks = false;
        let ran = ran?;
        if let Ran::Cold(_) = ran {
            // The attempt changed nothing: the operation has not happened yet.
            self.serial -= 1;
        }
        Ok(ran)
    }

    /// Whether an operation on `hash` must park behind an earlier one (invariant 2).
    fn must_wait(&self, hash: KeyHash) -> bool {
        self.pending
            .as_ref()
            .is_some_and(|pending| pending.parked.iter().any(|parked| parked.hash == hash))
    }

    /// Parks an operation: with `address`, its read starts; without, it waits its turn.
    fn park(
        &mut self,
        kind: Kind,
        hash: KeyHash,
        key: &[u8],
        value: &[u8],
        token: u64,
        address: Option<u64>,
    ) -> Result<Started<bool>, EngineError> {
        if self.pending() >= PENDING_DEPTH {
            return self.run_synchronously(kind, key, value).map(Started::Done);
        }
        if self.pending.is_none() {
            let reads = PageReads::new(
                self.store.log.page_file_shared(),
                PENDING_DEPTH as u32,
                PENDING_READ_BYTES,
            )
            .map_err(|error| reads_error("set up the pending reads of", self, error))?;
            self.pending = Some(Box::new(Pending {
                reads,
                parked: VecDeque::with_capacity(PENDING_DEPTH),
                next_id: 0,
            }));
        }
        let mut pending = self.pending.take().expect("created above");
        let id = pending.next_id;
        pending.next_id += 1;
        let mut parked = Parked {
            id,
            token,
            kind,
            hash,
            key: key.to_vec(),
            value: value.to_vec(),
            state: State::Waiting,
            copies: Vec::new(),
        };
        if let Some(address) = address {
            parked.state = self.submit(&mut pending.reads, id, address, 0);
        }
        pending.parked.push_back(parked);
        self.pending = Some(pending);
        Ok(Started::Pending)
    }

    /// The synchronous operation (a full table, or a record too large for the pending reads).
    fn run_synchronously(
        &mut self,
        kind: Kind,
        key: &[u8],
        value: &[u8],
    ) -> Result<bool, EngineError> {
        match kind {
            Kind::Read => {
                let mut out = std::mem::take(&mut self.old_value);
                let found = self.read(key, &mut out);
                self.old_value = out;
                found
            }
            Kind::Upsert => self.upsert_existed(key, value),
        }
    }

    /// Submits the read of the record at `address` (`at_least` bytes; 0 for a first read) for
    /// parked operation `id`; the state it is in afterwards.
    fn submit(&self, reads: &mut PageReads, id: u64, address: u64, at_least: usize) -> State {
        let log = &self.store.log;
        let Some((page, offset, len)) = log.cold_read_range(address, at_least) else {
            if address < log.begin_address() {
                // Compaction moved the key forward and removed the segment: run it again.
                return State::Ready;
            }
            return State::Failed(EngineError::Corrupt {
                path: log.page_file().dir().to_path_buf(),
                offset: address,
                detail: format!(
                    "the index leads to log address {address}, which the page file does not hold"
                ),
            });
        };
        match reads.submit(page, offset, len.min(PENDING_READ_BYTES), id) {
            Ok(()) => State::Reading(address),
            Err(error) => State::Failed(reads_error("read a record from", self, error)),
        }
    }

    /// One round of `complete_pending`: reap reads, then run the operations whose turn it is.
    fn complete_round(
        &mut self,
        pending: &mut Pending,
        wait: bool,
    ) -> Result<Vec<Done>, EngineError> {
        let reading = pending
            .parked
            .iter()
            .any(|parked| matches!(parked.state, State::Reading(_)));
        if reading {
            // Block only when nothing can run now: an operation parked behind another's read is
            // not runnable, and spinning on it would take the core from the reads' completions.
            let runnable = runnable(pending);
            let log = &self.store.log;
            let parked = &mut pending.parked;
            let mut resubmit = Vec::new();
            pending
                .reads
                .complete(wait && !runnable, |id, bytes| {
                    let Some(op) = parked.iter_mut().find(|op| op.id == id) else {
                        return;
                    };
                    let State::Reading(address) = op.state else {
                        return;
                    };
                    op.state = match bytes {
                        Err(error) => {
                            State::Failed(log.page_file_error("read a record from", error))
                        }
                        Ok(bytes) => match log.cold_copy_of(address, bytes) {
                            Ok(ColdBytes::Record(words)) => {
                                op.copies.push((address, words));
                                State::Ready
                            }
                            Ok(ColdBytes::Short { needed }) => {
                                resubmit.push((id, address, needed));
                                State::Waiting
                            }
                            Err(damage) => State::Failed(EngineError::Corrupt {
                                path: log.page_file().dir().to_path_buf(),
                                offset: address,
                                detail: damage,
                            }),
                        },
                    };
                })
                .map_err(|error| reads_error("complete the pending reads of", self, error))?;
            for (id, address, needed) in resubmit {
                let state = if needed > PENDING_READ_BYTES as usize {
                    // Rare: a record larger than the pending reads take.
                    let words = self.store.log.read_cold_words(address);
                    let op = find(pending, id);
                    op.copies.push((address, words));
                    State::Ready
                } else {
                    self.submit(&mut pending.reads, id, address, needed)
                };
                find(pending, id).state = state;
            }
        }
        self.run_parked(pending)
    }

    /// Runs, in start order, every parked operation that is ready or whose turn came
    /// (invariant 2); those that stop at another cold record read again.
    fn run_parked(&mut self, pending: &mut Pending) -> Result<Vec<Done>, EngineError> {
        let mut done = Vec::new();
        let mut blocked: Vec<KeyHash> = Vec::new();
        let mut index = 0;
        while index < pending.parked.len() {
            let op = &mut pending.parked[index];
            let run = match op.state {
                State::Failed(_) => {
                    let op = pending.parked.remove(index).expect("in range");
                    let State::Failed(error) = op.state else {
                        unreachable!()
                    };
                    done.push((op.token, Err(error)));
                    continue;
                }
                _ => runs_now(op, &blocked),
            };
            if !run {
                blocked.push(op.hash);
                index += 1;
                continue;
            }
            let mut op = pending.parked.remove(index).expect("in range");
            match self.run_parked_op(&mut op)? {
                Ran::Done(outcome) => done.push((op.token, Ok(outcome))),
                Ran::Cold(address) => {
                    op.state = self.submit(&mut pending.reads, op.id, address, 0);
                    blocked.push(op.hash);
                    pending.parked.insert(index, op);
                    index += 1;
                }
            }
        }
        Ok(done)
    }

    /// Runs one parked operation with its copies installed (invariant 3).
    fn run_parked_op(&mut self, op: &mut Parked) -> Result<Ran<(u64, bool, Vec<u8>)>, EngineError> {
        install_read_ahead(&mut op.copies);
        let result = (|| {
            self.begin_op()?;
            let hash = op.hash;
            let key = &op.key[..];
            let mut value = Vec::new();
            let ran = match op.kind {
                Kind::Read => self.pending_run(|session| {
                    Ok(session.try_read(hash, key, Some(&mut value), |_| {}))
                })?,
                Kind::Upsert => {
                    let write = Write::Put(&op.value, words_for(op.value.len()));
                    self.pending_run(|session| session.try_write(hash, key, write))?
                }
            };
            Ok(match ran {
                Ran::Done(found) => Ran::Done((self.serial, found, value)),
                Ran::Cold(address) => Ran::Cold(address),
            })
        })();
        take_back_read_ahead(&mut op.copies);
        result
    }
}

/// Whether [`Session::run_parked`], having passed the unfinished operations on `blocked`, runs
/// `op` now: one that failed is reported; one that is ready or waiting runs when no earlier
/// unfinished operation is on its key hash (invariant 2); one that is reading waits.
fn runs_now(op: &Parked, blocked: &[KeyHash]) -> bool {
    match op.state {
        State::Failed(_) => true,
        State::Ready | State::Waiting => !blocked.contains(&op.hash),
        State::Reading(_) => false,
    }
}

/// Whether [`Session::run_parked`] would run an operation now.
fn runnable(pending: &Pending) -> bool {
    let mut blocked: Vec<KeyHash> = Vec::new();
    for op in &pending.parked {
        if runs_now(op, &blocked) {
            return true;
        }
        blocked.push(op.hash);
    }
    false
}

fn find(pending: &mut Pending, id: u64) -> &mut Parked {
    pending
        .parked
        .iter_mut()
        .find(|op| op.id == id)
        .expect("a parked operation of this round")
}

fn reads_error(operation: &str, session: &Session, error: ReadsError) -> EngineError {
    session.store.log.page_file_error(operation, error)
}

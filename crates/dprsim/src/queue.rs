//! The virtual clock and the event queue.
//!
//! Invariants: time never goes backwards (an event is never scheduled before `now`); events at
//! the same virtual time run in the order they were scheduled (a sequence number breaks ties),
//! so the order of execution depends only on the seed, never on a hash order or the wall clock.
//! Every executed event is folded into a running FNV-1a digest together with what it observed,
//! so two runs of one seed can be compared cheaply.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Virtual time in microseconds since the start of the run.
pub type Micros = u64;

struct Scheduled<E> {
    at: Micros,
    sequence: u64,
    event: E,
}

impl<E> PartialEq for Scheduled<E> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.sequence) == (other.at, other.sequence)
    }
}
impl<E> Eq for Scheduled<E> {}
impl<E> PartialOrd for Scheduled<E> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<E> Ord for Scheduled<E> {
    // Reversed: BinaryHeap is a max-heap and we want the earliest event first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.sequence).cmp(&(self.at, self.sequence))
    }
}

/// A deterministic priority queue of events over a virtual clock.
pub struct EventQueue<E> {
    now: Micros,
    next_sequence: u64,
    heap: BinaryHeap<Scheduled<E>>,
    digest: u64,
    executed: u64,
}

impl<E> Default for EventQueue<E> {
    fn default() -> Self {
        Self {
            now: 0,
            next_sequence: 0,
            heap: BinaryHeap::new(),
            digest: 0xcbf2_9ce4_8422_2325,
            executed: 0,
        }
    }
}

impl<E> EventQueue<E> {
    /// The current virtual time.
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Schedules `event` after `delay` microseconds of virtual time.
    pub fn after(&mut self, delay: Micros, event: E) {
        self.at(self.now + delay, event);
    }

    /// Schedules `event` at `at` (clamped to now: the clock never goes back).
    pub fn at(&mut self, at: Micros, event: E) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        self.heap.push(Scheduled {
            at: at.max(self.now),
            sequence,
            event,
        });
    }

    /// Removes the earliest event and moves the clock to it.
    pub fn pop(&mut self) -> Option<E> {
        let next = self.heap.pop()?;
        self.now = next.at;
        self.executed += 1;
        self.record(next.at);
        Some(next.event)
    }

    /// Events executed so far.
    pub fn executed(&self) -> u64 {
        self.executed
    }

    /// Folds `value` into the trace digest.
    pub fn record(&mut self, value: u64) {
        for byte in value.to_le_bytes() {
            self.digest ^= u64::from(byte);
            self.digest = self.digest.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// The digest of everything recorded so far.
    pub fn digest(&self) -> u64 {
        self.digest
    }
}

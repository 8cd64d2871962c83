//! Redis's eviction pool: the best [`POOL_SIZE`] candidates met by the sampling rounds so far,
//! ordered by score (higher = evict sooner: idle time, inverted frequency, nearness of expiry).
//!
//! Invariants: at most [`POOL_SIZE`] entries, sorted by ascending score, no key twice (a key
//! sampled again replaces its entry with the newer score). Entries may be stale (the key was
//! deleted or accessed since it was sampled): the evictor checks a popped key before deleting.

/// Candidates the pool keeps, as Redis's `EVPOOL_SIZE`.
pub const POOL_SIZE: usize = 16;

/// A key that may be evicted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Higher is evicted first.
    pub score: u64,
    /// Its database.
    pub database: u8,
    /// The user key.
    pub key: Vec<u8>,
}

/// The pool (see the module invariants).
#[derive(Default, Debug)]
pub struct Pool {
    entries: Vec<Candidate>,
}

impl Pool {
    /// Offers a sampled key: kept if the pool has room or it beats the worst entry.
    pub fn offer(&mut self, candidate: Candidate) {
        if let Some(at) = self
            .entries
            .iter()
            .position(|e| e.database == candidate.database && e.key == candidate.key)
        {
            self.entries.remove(at);
        }
        let at = self
            .entries
            .partition_point(|entry| entry.score < candidate.score);
        if self.entries.len() == POOL_SIZE {
            if at == 0 {
                // Worse than every kept candidate.
                return;
            }
            // Drop the worst to make room; the insertion point moves down with it.
            self.entries.remove(0);
            self.entries.insert(at - 1, candidate);
        } else {
            self.entries.insert(at, candidate);
        }
    }

    /// Takes the best candidate.
    pub fn pop_best(&mut self) -> Option<Candidate> {
        self.entries.pop()
    }

    /// Number of candidates held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Forgets every candidate (the policy changed: the scores mean something else).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(score: u64, key: &str) -> Candidate {
        Candidate {
            score,
            database: 0,
            key: key.as_bytes().to_vec(),
        }
    }

    #[test]
    fn keeps_the_best_sixteen_in_order() {
        let mut pool = Pool::default();
        // Scores 0..40 in a scrambled order.
        for i in 0..40u64 {
            let score = (i * 17) % 40;
            pool.offer(candidate(score, &format!("k{score}")));
        }
        assert_eq!(pool.len(), POOL_SIZE);
        let mut popped = Vec::new();
        while let Some(best) = pool.pop_best() {
            popped.push(best.score);
        }
        let expected: Vec<u64> = (24..40).rev().collect();
        assert_eq!(popped, expected);
    }

    #[test]
    fn a_key_sampled_again_takes_its_new_score() {
        let mut pool = Pool::default();
        pool.offer(candidate(50, "a"));
        pool.offer(candidate(10, "b"));
        pool.offer(candidate(5, "a"));
        assert_eq!(pool.len(), 2);
        assert_eq!(pool.pop_best(), Some(candidate(10, "b")));
        assert_eq!(pool.pop_best(), Some(candidate(5, "a")));
        assert!(pool.is_empty());
        let mut other_db = candidate(1, "a");
        other_db.database = 3;
        pool.offer(candidate(1, "a"));
        pool.offer(other_db);
        assert_eq!(pool.len(), 2, "the same name in two databases is two keys");
    }

    #[test]
    fn a_full_pool_refuses_worse_candidates() {
        let mut pool = Pool::default();
        for i in 0..POOL_SIZE as u64 {
            pool.offer(candidate(100 + i, &format!("k{i}")));
        }
        pool.offer(candidate(1, "worse"));
        assert!(!pool.entries.iter().any(|e| e.key == b"worse"));
        pool.offer(candidate(1000, "better"));
        assert_eq!(pool.len(), POOL_SIZE);
        assert_eq!(pool.pop_best().unwrap().key, b"better");
        assert!(
            !pool.entries.iter().any(|e| e.score == 100),
            "the worst left"
        );
    }
}

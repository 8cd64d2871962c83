//! Loom model checks of the wait-free bit protocols (tiny states: two words).
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p prefixkv-tickstate --lib --release loom`
//!
//! Each model: load `[10, 20]`, write word 0, take a first checkpoint synchronously, write word
//! 1, `prepare` the second checkpoint, then capture it on a writer thread while the mutator
//! writes both words again. The captured image must be the state at the second point of
//! consistency whatever the interleaving (and for Ping-Pong it exercises the base image and
//! `changed_since_base`, whose unchanged words the writer skips, as the WAL-backed store does).

use crate::algo::*;
use loom::sync::Arc;

fn model<A: Algorithm>() {
    loom::model(|| {
        let mut algorithm = A::new(2, false).unwrap();
        algorithm.load(&[10, 20]);
        let algorithm = Arc::new(algorithm);
        algorithm.write(0, 1);
        // SAFETY: single mutator, no writer yet.
        unsafe { algorithm.prepare() };
        let mut first = vec![0u64; 2];
        algorithm.capture(0, &mut first);
        assert_eq!(first, [1, 20]);
        algorithm.write(1, 5);
        // SAFETY: the first capture finished on this thread.
        unsafe { algorithm.prepare() };
        let writer = {
            let algorithm = Arc::clone(&algorithm);
            loom::thread::spawn(move || {
                let mut image = if algorithm.needs_base() {
                    first
                } else {
                    vec![0; 2]
                };
                // As the WAL-backed store does: skip the words the algorithm reports unchanged
                // since the base (Ping-Pong: word 0 was not written in this period).
                for index in 0..2 {
                    let changed = algorithm.changed_since_base(index, 1);
                    if algorithm.needs_base() {
                        assert_eq!(changed, index == 1, "{:?} word {index}", A::KIND);
                    }
                    if changed {
                        algorithm.capture(index, &mut image[index..index + 1]);
                    }
                }
                image
            })
        };
        algorithm.write(0, 2);
        algorithm.write(1, 3);
        algorithm.write(0, 4);
        let image = writer.join().unwrap();
        assert_eq!(image, [1, 5], "{:?}", A::KIND);
        assert_eq!((algorithm.read(0), algorithm.read(1)), (4, 3));
    });
}

#[test]
fn loom_copy_on_update() {
    model::<CopyOnUpdate>();
}

#[test]
fn loom_bit_array_copy_on_update() {
    model::<BitArrayCopyOnUpdate>();
}

#[test]
fn loom_naive_zigzag() {
    model::<NaiveZigzag>();
}

#[test]
fn loom_interleaved_zigzag() {
    model::<InterleavedZigzag>();
}

#[test]
fn loom_packed_zigzag() {
    model::<PackedZigzag>();
}

#[test]
fn loom_bit_array_zigzag() {
    model::<BitArrayZigzag>();
}

#[test]
fn loom_naive_ping_pong() {
    model::<NaivePingPong>();
}

#[test]
fn loom_interleaved_ping_pong() {
    model::<InterleavedPingPong>();
}

#[test]
fn loom_naive_snapshot() {
    model::<NaiveSnapshot>();
}

//! Unit tests of the record packing: round-trips at the boundaries of every field.

use super::*;

const PAGE: usize = 1 << 16;

fn log() -> HybridLog {
    HybridLog::new(PAGE, (PAGE * 64) as u64, None)
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|index| (index as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

struct Spec<'a> {
    key: &'a [u8],
    value: &'a [u8],
    capacity_words: usize,
    flags: u64,
    version: u64,
    access: u32,
}

fn write(log: &HybridLog, spec: &Spec<'_>, previous: u64) -> u64 {
    log.write_new(
        &NewRecord {
            previous,
            flags: spec.flags,
            version: spec.version,
            key: spec.key,
            value: spec.value,
            capacity_words: spec.capacity_words,
            access: spec.access,
        },
        false,
    )
    .expect("the budget has room")
}

fn check(log: &HybridLog, address: u64, spec: &Spec<'_>, previous: u64) {
    let record = log.record(address);
    let slot = spec.flags & FLAG_STABLE_SLOT != 0;
    assert_eq!(record.key_len(), spec.key.len());
    assert!(record.key_equals(spec.key));
    let mut other = spec.key.to_vec();
    other.push(0);
    assert!(!record.key_equals(&other));
    if let Some(last) = other.len().checked_sub(2) {
        other.pop();
        other[last] ^= 1;
        assert!(!record.key_equals(&other));
    }
    let mut out = Vec::new();
    record.copy_key(&mut out);
    assert_eq!(out, spec.key);
    let mut value = Vec::new();
    assert_eq!(
        record.read_value(&mut value),
        spec.flags & FLAG_TOMBSTONE == 0
    );
    if spec.flags & FLAG_TOMBSTONE == 0 {
        assert_eq!(value, spec.value);
    }
    assert_eq!(record.capacity_words(), spec.capacity_words);
    assert_eq!(record.version(), spec.version & 0xFFFF_FFFF);
    assert_eq!(record.access(), spec.access);
    assert_eq!(record.previous(), previous);
    assert_eq!(record.has_stable_slot(), slot);
    assert_eq!(record.stable_address(), 0);
    assert_eq!(record.is_tombstone(), spec.flags & FLAG_TOMBSTONE != 0);
    assert!(!record.is_sealed());
    assert_eq!(
        record.size_bytes(),
        record_footprint(spec.key.len(), spec.capacity_words, slot)
    );
    assert!(record.same_key(&record));
}

#[test]
fn round_trips_at_the_key_and_value_length_boundaries() {
    let log = log();
    let mut previous = 0;
    let key_lens = [0, 1, 7, 8, 9, 255, 256, 1021, 1022, 1023, 1024, 1025, 5000];
    for (round, &key_len) in key_lens.iter().enumerate() {
        for value_len in [0, 1, 8, 9, 100] {
            for flags in [
                0,
                FLAG_STABLE_SLOT,
                FLAG_TOMBSTONE,
                FLAG_STABLE | FLAG_STABLE_SLOT,
            ] {
                let key = bytes(key_len, round as u8);
                let value = bytes(value_len, 7);
                let spec = Spec {
                    key: &key,
                    value: &value,
                    capacity_words: words_for(value_len),
                    flags,
                    version: u64::from(u32::MAX) - round as u64,
                    access: u32::MAX - value_len as u32,
                };
                let address = write(&log, &spec, previous);
                check(&log, address, &spec, previous);
                previous = address;
            }
        }
    }
}

#[test]
fn header_sizes_match_the_documented_layout() {
    // 3 header words; an 8-byte key and an 8-byte value take 40 bytes.
    assert_eq!(record_footprint(8, 1, false), 40);
    assert_eq!(record_footprint(8, 1, true), 48);
    assert_eq!(record_footprint(0, 0, false), 24);
    assert_eq!(record_footprint(1022, 0, false), 24 + 1024);
    assert_eq!(record_footprint(1023, 0, false), 32 + 1024);
    assert_eq!(record_footprint(1023, 0, true), 40 + 1024);
    let log = log();
    let first = write(
        &log,
        &Spec {
            key: &8u64.to_le_bytes(),
            value: &9u64.to_le_bytes(),
            capacity_words: 1,
            flags: 0,
            version: 1,
            access: 0,
        },
        0,
    );
    let second = write(
        &log,
        &Spec {
            key: b"k",
            value: b"",
            capacity_words: 0,
            flags: 0,
            version: 1,
            access: 0,
        },
        first,
    );
    assert_eq!(second - first, 40, "records are packed back to back");
}

#[test]
fn capacity_above_the_value_is_kept_through_in_place_writes() {
    let log = log();
    let spec = Spec {
        key: b"key",
        value: &bytes(9, 1),
        capacity_words: 5,
        flags: 0,
        version: 3,
        access: 11,
    };
    let address = write(&log, &spec, 0);
    check(&log, address, &spec, 0);
    let record = log.record(address);
    let size = record.size_bytes();
    {
        let mut guard = record.lock();
        assert!(guard.fits(40));
        assert!(!guard.fits(41));
        guard.write_value(&bytes(40, 2));
    }
    let mut value = Vec::new();
    assert!(record.read_value(&mut value));
    assert_eq!(value, bytes(40, 2));
    {
        let mut guard = record.lock();
        guard.write_value(b"");
    }
    assert!(record.read_value(&mut value));
    assert!(value.is_empty());
    assert_eq!(record.capacity_words(), 5);
    assert_eq!(record.size_bytes(), size);
    assert_eq!(record.key_len(), 3);
    assert!(record.key_equals(b"key"));
}

#[test]
fn the_largest_record_round_trips() {
    let log = HybridLog::new(1 << 22, 8 << 22, None);
    let key = bytes(1500, 3);
    for slot in [0, FLAG_STABLE_SLOT] {
        let header = header_words(key.len(), slot != 0) + words_for(key.len());
        let capacity_words = MAX_RECORD_BYTES / 8 - header;
        let value = bytes(capacity_words * 8, 5);
        let spec = Spec {
            key: &key,
            value: &value,
            capacity_words,
            flags: slot,
            version: 9,
            access: 1,
        };
        let address = write(&log, &spec, 0);
        check(&log, address, &spec, 0);
        assert_eq!(log.record(address).size_bytes(), MAX_RECORD_BYTES);
    }
}

#[test]
fn the_stable_copy_word_is_present_only_when_flagged() {
    let log = log();
    for key_len in [0, 8, 1023] {
        let key = bytes(key_len, 4);
        let spec = Spec {
            key: &key,
            value: b"value",
            capacity_words: 1,
            flags: FLAG_STABLE_SLOT,
            version: 2,
            access: 0,
        };
        let address = write(&log, &spec, 0);
        let record = log.record(address);
        let mut guard = record.lock();
        guard.set_stable_address(ADDRESS_MASK - 7);
        drop(guard);
        assert_eq!(record.stable_address(), ADDRESS_MASK - 7);
        assert!(record.key_equals(&key));
        let mut value = Vec::new();
        assert!(record.read_value(&mut value));
        assert_eq!(value, b"value");
    }
    let without = write(
        &log,
        &Spec {
            key: b"k",
            value: b"v",
            capacity_words: 1,
            flags: 0,
            version: 2,
            access: 0,
        },
        0,
    );
    assert_eq!(log.record(without).stable_address(), 0);
    assert_eq!(log.record(without).size_bytes(), 40);
}

#[test]
fn the_access_word_is_independent_of_value_version_and_flag_writes() {
    let log = log();
    let spec = Spec {
        key: b"key",
        value: b"12345678",
        capacity_words: 1,
        flags: 0,
        version: 5,
        access: 0xDEAD_BEEF,
    };
    let address = write(&log, &spec, 0);
    let record = log.record(address);
    let sequence_word = record.words[2].load(Ordering::Relaxed);
    record.set_access(0x1234_5678);
    // Stamping touches neither the seqlock nor the version.
    assert_eq!(record.words[2].load(Ordering::Relaxed), sequence_word);
    assert_eq!(record.version(), 5);
    {
        let mut guard = record.lock();
        guard.write_value(b"abcdefgh");
        guard.set_version(u64::from(u32::MAX));
        guard.set_tombstone(true);
        guard.set_tombstone(false);
    }
    record.set_flags(FLAG_SEALED);
    assert_eq!(record.access(), 0x1234_5678);
    assert_eq!(record.version(), u64::from(u32::MAX));
    record.set_access(0);
    assert_eq!(record.version(), u64::from(u32::MAX));
    let mut value = Vec::new();
    assert!(record.read_value(&mut value));
    assert_eq!(value, b"abcdefgh");
    assert!(record.key_equals(b"key"));
    assert!(record.is_sealed());
}

#[test]
fn the_sequence_wraps_inside_its_field() {
    let log = log();
    let spec = Spec {
        key: b"key",
        value: &bytes(17, 9),
        capacity_words: 4,
        flags: 0,
        version: 1,
        access: 0,
    };
    let address = write(&log, &spec, 0);
    let record = log.record(address);
    // One full wrap of the 22-bit counter plus one write.
    for _ in 0..=(1u64 << 22) {
        drop(record.lock());
    }
    let word = record.words[2].load(Ordering::Relaxed);
    assert_eq!(
        word & record::SEQUENCE_MASK,
        2,
        "wrapped to the first write's sequence"
    );
    check(&log, address, &spec, 0);
}

#[test]
fn scans_find_every_record_and_no_record_straddles_a_page() {
    let log = log();
    let mut written = Vec::new();
    let mut previous = 0;
    for index in 0..3000usize {
        let key = bytes(index % 40, index as u8);
        let value = bytes((index * 7) % 300, 1);
        let flags = if index % 3 == 0 { FLAG_STABLE_SLOT } else { 0 };
        let spec = Spec {
            key: &key,
            value: &value,
            capacity_words: words_for(value.len()) + index % 2,
            flags,
            version: index as u64,
            access: 0,
        };
        let address = write(&log, &spec, previous);
        let size = log.record(address).size_bytes() as u64;
        assert_eq!(
            address / PAGE as u64,
            (address + size - 1) / PAGE as u64,
            "record at {address} of {size} bytes straddles a page"
        );
        written.push((address, key, value));
        previous = address;
    }
    assert!(written.last().expect("records").0 > 4 * PAGE as u64);
    let mut seen = Vec::new();
    log.scan(PAGE as u64, log.tail_address(), |record| {
        let mut key = Vec::new();
        record.copy_key(&mut key);
        let mut value = Vec::new();
        assert!(record.read_value(&mut value));
        seen.push((record.address, key, value));
        true
    });
    assert_eq!(seen, written);
}

/// Values of every length 0..=300 and a few large ones, taken from every byte offset of the
/// source buffer (the word copies read unaligned 8-byte chunks) and appended after every prefix
/// length 0..8 of the destination (`copy_value` appends at any offset), behind keys whose value
/// starts at every layout the header allows (key words 0..=2, the stable slot, the escaped key
/// length): new records, reads, locked copies and in-place writes all give the same bytes back.
#[test]
fn values_of_every_length_round_trip_at_every_offset() {
    let lengths: Vec<usize> = (0..=300).chain([1023, 1024, 4095, 4097, 20_001]).collect();
    let source = bytes(20_001 + 16, 13);
    let layouts = [
        (0, 0),
        (5, 0),
        (8, FLAG_STABLE_SLOT),
        (13, 0),
        (16, FLAG_STABLE_SLOT),
        (1030, 0),
        (1031, FLAG_STABLE_SLOT),
    ];
    for (key_len, slot) in layouts {
        let key = bytes(key_len, key_len as u8);
        for &len in &lengths {
            // A fresh log per length keeps the budget small whatever the key.
            let log = HybridLog::new(1 << 17, 64 << 17, None);
            for offset in 0..8 {
                let value = &source[offset..offset + len];
                let spec = Spec {
                    key: &key,
                    value,
                    capacity_words: words_for(len) + 1,
                    flags: slot,
                    version: 1,
                    access: 2,
                };
                let address = write(&log, &spec, 0);
                check(&log, address, &spec, 0);
                let record = log.record(address);
                let mut out = vec![0xA5; offset];
                record.lock().copy_value(&mut out);
                assert_eq!(&out[..offset], &vec![0xA5; offset][..]);
                assert_eq!(&out[offset..], value, "len {len} offset {offset}");
                // In place: a different value of the same length, then one up to a word longer
                // (the capacity's spare word), each read back whole.
                let other = &source[7 - offset..7 - offset + len];
                for replacement in [other, &source[offset..offset + len + 8]] {
                    record.lock().write_value(replacement);
                    let mut read = vec![0xA5; 3];
                    assert!(record.read_value(&mut read));
                    assert_eq!(read, replacement, "len {len} offset {offset}");
                }
                let mut key_out = vec![1; offset];
                record.copy_key(&mut key_out);
                assert_eq!(&key_out[offset..], &key[..]);
            }
        }
    }
}

/// A writer rewrites one record in place with values of changing lengths whose bytes all equal
/// the length's low byte, while readers copy it: every copy the seqlock accepts is one whole
/// value (no torn words, no length from one write with bytes from another). The writer runs
/// until the readers ended their fixed number of reads, so they overlap whenever two threads run
/// at once.
#[test]
fn concurrent_reads_of_in_place_writes_are_never_torn() {
    let log = log();
    let spec = Spec {
        key: b"hot",
        // Empty: a read before the first write sees a value of length 0 (all bytes "0").
        value: &[],
        capacity_words: 64,
        flags: 0,
        version: 1,
        access: 0,
    };
    let address = write(&log, &spec, 0);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    let record = log.record(address);
                    let mut out = Vec::new();
                    for _ in 0..100_000 {
                        assert!(record.read_value(&mut out));
                        let expected = out.len() as u8;
                        assert!(out.iter().all(|&byte| byte == expected), "torn read");
                    }
                })
            })
            .collect();
        let record = log.record(address);
        let values: Vec<Vec<u8>> = (0..512).map(|len| vec![len as u8; len]).collect();
        let mut round = 0usize;
        // Until every reader is done (or panicked: the scope then reports the panic).
        while !readers.iter().all(|reader| reader.is_finished()) {
            record.lock().write_value(&values[(round * 37) % 512]);
            round += 1;
        }
    });
}

//! Tests of the oracle itself: the workload is deterministic and shaped as specified, and
//! `verify_image` accepts a correct CPR image and rejects each kind of wrong one.

use std::collections::BTreeMap;

use super::*;

const SPEC: WorkloadSpec = WorkloadSpec {
    keys: 200,
    read_percent: 30,
    delete_percent: 0,
    cycle: 0,
    zipfian: false,
    seed: 42,
};

/// With deletes: 30 % reads, 20 % deletes, 50 % upserts.
const DELETES: WorkloadSpec = WorkloadSpec {
    delete_percent: 20,
    cycle: 0,
    ..SPEC
};

/// Runs the loader to `sessions[0]`'s point, then the workers round-robin up to their CPR points,
/// as a store would; returns key -> (session, serial) of the value it holds.
fn execute(spec: &WorkloadSpec, sessions: &[(u32, u64)]) -> BTreeMap<u64, (u32, u64)> {
    let mut state = BTreeMap::new();
    for &(session, cpr_point) in sessions
        .iter()
        .filter(|(session, _)| *session == LOADER_SESSION)
    {
        for serial in 1..=cpr_point {
            if let Op::Upsert(key) = op_at(spec, session, serial) {
                state.insert(key, (session, serial));
            }
        }
    }
    let longest = sessions.iter().map(|&(_, cpr)| cpr).max().unwrap_or(0);
    for serial in 1..=longest {
        for &(session, cpr_point) in sessions {
            if session != LOADER_SESSION && serial <= cpr_point {
                match op_at(spec, session, serial) {
                    Op::Upsert(key) => {
                        state.insert(key, (session, serial));
                    }
                    Op::Delete(key) => {
                        state.remove(&key);
                    }
                    Op::Read(_) => {}
                }
            }
        }
    }
    state
}

fn image(state: &BTreeMap<u64, (u32, u64)>) -> Vec<(Vec<u8>, Vec<u8>)> {
    state
        .iter()
        .map(|(&key, &(session, serial))| {
            (
                encode_key(key).to_vec(),
                encode_value(session, serial).to_vec(),
            )
        })
        .collect()
}

const SESSIONS: [(u32, u64); 4] = [(0, 200), (1, 150), (2, 90), (3, 0)];

fn first_upsert_after(session: u32, after: u64) -> (u64, u64) {
    (after + 1..)
        .find_map(|serial| match op_at(&SPEC, session, serial) {
            Op::Upsert(key) => Some((key, serial)),
            _ => None,
        })
        .expect("some later upsert")
}

#[test]
fn values_and_keys_round_trip() {
    assert_eq!(decode_value(&encode_value(7, 123_456)), Some((7, 123_456)));
    assert_eq!(
        decode_value(&encode_value(65_535, MAX_SERIAL)),
        Some((65_535, MAX_SERIAL))
    );
    assert_eq!(decode_key(&encode_key(99)), Some(99));
    assert_eq!(decode_key(&[1, 2, 3]), None);
    assert_eq!(decode_value(&[1; 9]), None);
}

#[test]
fn op_at_is_deterministic_and_shaped() {
    let spec = WorkloadSpec {
        keys: 1000,
        read_percent: 50,
        delete_percent: 0,
        cycle: 0,
        zipfian: false,
        seed: 1,
    };
    for serial in 1..=1000 {
        assert_eq!(op_at(&spec, 0, serial), Op::Upsert(serial - 1));
    }
    assert!(matches!(op_at(&spec, 0, 1001), Op::Read(_)));
    let mut reads = 0;
    let mut counts = vec![0u32; 1000];
    for serial in 1..=100_000 {
        let op = op_at(&spec, 3, serial);
        assert_eq!(op, op_at(&spec, 3, serial));
        assert!(op.key() < 1000);
        counts[op.key() as usize] += 1;
        reads += u32::from(matches!(op, Op::Read(_)));
    }
    assert!((45_000..55_000).contains(&reads), "reads {reads}");
    assert!(
        counts.iter().all(|&count| count > 40),
        "uniform keys cover the space"
    );
    // Other sessions and seeds see other sequences.
    let other_session: Vec<Op> = (1..=50).map(|serial| op_at(&spec, 4, serial)).collect();
    let this_session: Vec<Op> = (1..=50).map(|serial| op_at(&spec, 3, serial)).collect();
    assert_ne!(other_session, this_session);
}

#[test]
fn zipfian_keys_are_skewed_and_in_range() {
    let spec = WorkloadSpec {
        keys: 10_000,
        read_percent: 0,
        delete_percent: 0,
        cycle: 0,
        zipfian: true,
        seed: 9,
    };
    let mut counts = vec![0u32; 10_000];
    for serial in 1..=200_000 {
        let key = op_at(&spec, 1, serial).key();
        counts[key as usize] += 1;
    }
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let top_ten: u32 = counts[..10].iter().sum();
    // Uniform would give 10 / 10_000 of the draws to any 10 keys; zipf(0.99) gives them ~25 %.
    assert!(top_ten > 20_000, "top ten keys drew {top_ten} of 200000");
    let spec_one = WorkloadSpec { keys: 1, ..spec };
    assert_eq!(op_at(&spec_one, 1, 5).key(), 0);
}

#[test]
fn accepts_a_correct_image() {
    let state = execute(&SPEC, &SESSIONS);
    let summary = verify_image(&SPEC, &SESSIONS, image(&state)).expect("correct image");
    assert_eq!(summary.keys_checked, state.len() as u64);
    assert_eq!(summary.ops_replayed, 200 + 150 + 90);
    // A partial load with no workers is a valid prefix too.
    let partial = [(0, 57)];
    let state = execute(&SPEC, &partial);
    assert_eq!(state.len(), 57);
    verify_image(&SPEC, &partial, image(&state)).expect("partial load");
    // And the order of the image does not matter.
    let mut reversed = image(&execute(&SPEC, &SESSIONS));
    reversed.reverse();
    verify_image(&SPEC, &SESSIONS, reversed).expect("any order");
}

#[test]
fn rejects_a_value_after_the_cpr_point() {
    let mut state = execute(&SPEC, &SESSIONS);
    let (key, serial) = first_upsert_after(1, 150);
    state.insert(key, (1, serial));
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(error.contains("after its CPR point"), "{error}");
    assert!(
        error.contains(&format!("key {key}")) && error.contains("session 1"),
        "{error}"
    );
}

#[test]
fn rejects_a_lost_write_within_a_session() {
    let mut state = execute(&SPEC, &SESSIONS);
    // A key that session 1 upserted at least twice within its prefix; the image keeps the older.
    let mut by_key: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for serial in 1..=150 {
        if let Op::Upsert(key) = op_at(&SPEC, 1, serial) {
            by_key.entry(key).or_default().push(serial);
        }
    }
    let (&key, serials) = by_key
        .iter()
        .find(|(_, serials)| serials.len() >= 2)
        .expect("a repeat");
    state.insert(key, (1, serials[0]));
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(
        error.contains("lost write") && error.contains(&format!("key {key}")),
        "{error}"
    );
}

#[test]
fn rejects_a_loader_value_that_a_worker_overwrote() {
    let mut state = execute(&SPEC, &SESSIONS);
    let (key, _) = first_upsert_after(2, 0);
    state.insert(key, (0, key + 1));
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(
        error.contains("lost write") && error.contains("loader"),
        "{error}"
    );
}

#[test]
fn rejects_a_missing_key() {
    let mut state = execute(&SPEC, &SESSIONS);
    state.remove(&17);
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(error.contains("missing key 17"), "{error}");
}

#[test]
fn rejects_an_extra_key() {
    let sessions = [(0, 100), (1, 0)];
    let mut state = execute(&SPEC, &sessions);
    state.insert(150, (0, 151));
    let error = verify_image(&SPEC, &sessions, image(&state)).unwrap_err();
    assert!(error.contains("extra key 150"), "{error}");
    let mut outside = image(&execute(&SPEC, &sessions));
    outside.push((encode_key(1_000).to_vec(), encode_value(0, 1).to_vec()));
    assert!(verify_image(&SPEC, &sessions, outside)
        .unwrap_err()
        .contains("extra key 1000"));
}

#[test]
fn rejects_a_value_from_a_wrong_session() {
    let mut state = execute(&SPEC, &SESSIONS);
    // Session 1's newest write of some key, relabelled as session 2's.
    let (&key, &(_, serial)) = state
        .iter()
        .find(|(&key, &(session, serial))| {
            session == 1 && op_at(&SPEC, 2, serial) != Op::Upsert(key)
        })
        .expect("a key last written by session 1");
    state.insert(key, (2, serial));
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(
        error.contains("wrong session") && error.contains(&format!("key {key}")),
        "{error}"
    );
    // A session that is not part of the recovery at all.
    let mut state = execute(&SPEC, &SESSIONS);
    state.insert(3, (9, 1));
    let error = verify_image(&SPEC, &SESSIONS, image(&state)).unwrap_err();
    assert!(error.contains("session 9 is not among"), "{error}");
}

#[test]
fn rejects_malformed_images() {
    let mut entries = image(&execute(&SPEC, &SESSIONS));
    let duplicate = entries[0].clone();
    entries.push(duplicate);
    assert!(verify_image(&SPEC, &SESSIONS, entries)
        .unwrap_err()
        .contains("twice"));
    let bad_value = vec![(encode_key(0).to_vec(), vec![1, 2])];
    assert!(verify_image(&SPEC, &[(0, 1)], bad_value)
        .unwrap_err()
        .contains("8-byte workload value"));
    assert!(verify_image(&SPEC, &[(1, 1), (1, 2)], Vec::new())
        .unwrap_err()
        .contains("twice"));
}

#[test]
fn deletes_are_drawn_and_checked() {
    let deletes = (1..=10_000)
        .filter(|&serial| matches!(op_at(&DELETES, 1, serial), Op::Delete(_)))
        .count();
    assert!((1_600..2_400).contains(&deletes), "deletes {deletes}");
    // Any interleaving's state passes: round-robin, and each session's writes one after another.
    let state = execute(&DELETES, &SESSIONS);
    verify_image(&DELETES, &SESSIONS, image(&state)).expect("round-robin state");
    // A key whose only worker write within the prefixes is a delete must be absent.
    let (key, write) = (1..=150)
        .find_map(|serial| match op_at(&DELETES, 1, serial) {
            Op::Delete(key)
                if (serial + 1..=150).all(|later| op_at(&DELETES, 1, later).key() != key)
                    && [2u32, 3].iter().all(|&other| {
                        let point = SESSIONS.iter().find(|s| s.0 == other).unwrap().1;
                        (1..=point).all(|n| op_at(&DELETES, other, n).key() != key)
                    }) =>
            {
                Some((key, serial))
            }
            _ => None,
        })
        .expect("a key deleted last by session 1 only");
    let mut revived = execute(&DELETES, &SESSIONS);
    assert!(
        !revived.contains_key(&key),
        "session 1 deleted {key} at {write}"
    );
    revived.insert(key, (0, key + 1));
    let error = verify_image(&DELETES, &SESSIONS, image(&revived)).unwrap_err();
    assert!(
        error.contains("lost write") && error.contains("deleted"),
        "{error}"
    );
}

#[test]
fn check_points_holds_the_checkpoint_to_what_clients_were_told() {
    let bounds = [
        PointBounds {
            session: 0,
            acknowledged_before_request: 200,
            issued: 200,
        },
        PointBounds {
            session: 1,
            acknowledged_before_request: 100,
            issued: 180,
        },
    ];
    assert_eq!(
        check_points(&[(0, 200), (1, 150)], &bounds).unwrap(),
        vec![(0, 200), (1, 150)]
    );
    // A point below what was acknowledged before the request: acknowledged work is missing.
    let error = check_points(&[(0, 200), (1, 99)], &bounds).unwrap_err();
    assert!(error.contains("acknowledged serial 100"), "{error}");
    // A session left out entirely counts as point 0.
    let error = check_points(&[(0, 200)], &bounds).unwrap_err();
    assert!(error.contains("session 1"), "{error}");
    // A point past anything issued.
    let error = check_points(&[(0, 200), (1, 181)], &bounds).unwrap_err();
    assert!(error.contains("only ever issued"), "{error}");
    // A session nobody ran, unless it never did anything.
    assert!(check_points(&[(0, 200), (1, 150), (7, 0)], &bounds).is_ok());
    let error = check_points(&[(0, 200), (1, 150), (7, 3)], &bounds).unwrap_err();
    assert!(error.contains("never ran"), "{error}");
}

#[test]
fn verify_recovery_rejects_an_image_that_lost_a_write_and_its_points_to_match() {
    // The store lost session 1's writes after serial 90 and reports point 90 to match: the image
    // is a perfect CPR state for the points it reports, but the client was acknowledged 120
    // before the checkpoint was requested.
    let honest = [(0, 200), (1, 90), (2, 90), (3, 0)];
    let state = execute(&SPEC, &honest);
    verify_image(&SPEC, &honest, image(&state)).expect("consistent with its own report");
    let bounds: Vec<PointBounds> = [(0, 200, 200), (1, 120, 150), (2, 90, 90), (3, 0, 0)]
        .iter()
        .map(|&(session, acknowledged, issued)| PointBounds {
            session,
            acknowledged_before_request: acknowledged,
            issued,
        })
        .collect();
    let error = verify_recovery(&SPEC, &honest, &bounds, image(&state)).unwrap_err();
    assert!(error.contains("acknowledged serial 120"), "{error}");
}

#[test]
fn a_cycle_repeats_operations_but_not_values() {
    let spec = WorkloadSpec {
        cycle: 100,
        ..DELETES
    };
    for serial in 1..=100 {
        assert_eq!(op_at(&spec, 1, serial), op_at(&spec, 1, serial + 100));
        assert_eq!(op_at(&spec, 1, serial), op_at(&spec, 1, serial + 700));
    }
    // A state built from a cycled workload verifies; its values name the real serials.
    let sessions = [(0, 200), (1, 350), (2, 260)];
    let state = execute(&spec, &sessions);
    assert!(state.values().any(|&(_, serial)| serial > 100));
    verify_image(&spec, &sessions, image(&state)).expect("cycled state");
}

//! The simulated disk's fault model, call by call: what a power cut keeps and loses, the
//! Linux-like `fsync` error, injected `ENOSPC`, determinism from the seed; and the durable
//! whole-file write and the version catalog under power cuts at every call.
//! `STORAGE_POWER_CUT_SEEDS` (default 1000) seeds per power-cut loop.

use prefixkv_storage::durable::{create_dir_all_durably, write_file_durably};
use prefixkv_storage::{
    Catalog, CrashMode, Disk, Fault, FaultError, FaultOp, OpenMode, Rejection, SimDisk,
};
use prefixkv_testkit::rng::env_count;
use std::path::Path;

fn seeds() -> u64 {
    env_count("STORAGE_POWER_CUT_SEEDS", 1000)
}

fn write(disk: &SimDisk, path: &str, bytes: &[u8], sync: bool) {
    let file = disk.open(Path::new(path), OpenMode::Create).unwrap();
    file.write_all_at(bytes, 0).unwrap();
    if sync {
        file.sync_data().unwrap();
    }
}

#[test]
fn synced_data_and_synced_entries_survive_and_nothing_else_does() {
    let disk = SimDisk::new(1);
    create_dir_all_durably(&disk, Path::new("/d")).unwrap();
    write(&disk, "/d/synced", b"durable", true);
    write(&disk, "/d/unsynced", b"volatile", false);
    disk.sync_dir(Path::new("/d")).unwrap();
    // Created and synced, but its directory was not synced afterwards: the entry is lost.
    write(&disk, "/d/orphan", b"data", true);
    disk.crash(CrashMode::DropAll);
    assert_eq!(disk.read_file(Path::new("/d/synced")).unwrap(), b"durable");
    assert_eq!(disk.read_file(Path::new("/d/unsynced")).unwrap(), b"");
    assert!(disk.read_file(Path::new("/d/orphan")).is_err());

    // KeepAll is what a process crash leaves: everything written is there.
    write(&disk, "/d/unsynced", b"volatile", false);
    disk.crash(CrashMode::KeepAll);
    assert_eq!(
        disk.read_file(Path::new("/d/unsynced")).unwrap(),
        b"volatile"
    );
}

#[test]
fn handles_are_stale_after_a_crash_and_the_armed_cut_kills_every_call() {
    let disk = SimDisk::new(2);
    let file = disk.open(Path::new("/f"), OpenMode::Create).unwrap();
    disk.cut_after(1);
    file.write_all_at(b"x", 0).unwrap();
    let error = file.sync_data().unwrap_err();
    assert!(error.to_string().contains("simulated power cut"), "{error}");
    assert!(disk.is_dead());
    assert!(disk.list(Path::new("/")).is_err(), "reads fail too");
    disk.crash(CrashMode::Random);
    assert!(file.len().unwrap_err().to_string().contains("stale"));
}

#[test]
fn a_failed_fsync_loses_the_data_and_the_next_fsync_lies() {
    let disk = SimDisk::new(3);
    let file = disk.open(Path::new("/f"), OpenMode::Create).unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    file.write_all_at(b"old", 0).unwrap();
    file.sync_data().unwrap();
    file.write_all_at(b"new", 0).unwrap();
    disk.inject(Fault::once(FaultOp::SyncFile, "/f", FaultError::Io));
    let error = file.sync_data().unwrap_err();
    assert!(error.to_string().contains("Input/output error"), "{error}");
    // Reads still see the new bytes, and a retried fsync "succeeds"...
    let mut bytes = [0u8; 3];
    file.read_exact_at(&mut bytes, 0).unwrap();
    assert_eq!(&bytes, b"new");
    file.sync_data().unwrap();
    // ...but the data never reaches the disk: fsyncgate.
    disk.crash(CrashMode::KeepAll);
    assert_eq!(disk.read_file(Path::new("/f")).unwrap(), b"old");
    assert_eq!(disk.faults_hit(), 1);
}

#[test]
fn no_space_fails_writes_until_cleared_and_writes_nothing() {
    let disk = SimDisk::new(4);
    let file = disk.open(Path::new("/f"), OpenMode::Create).unwrap();
    disk.inject(Fault::always(FaultOp::Write, "", FaultError::NoSpace));
    let error = file.write_all_at(b"abc", 0).unwrap_err();
    assert_eq!(error.kind(), std::io::ErrorKind::StorageFull);
    assert_eq!(file.len().unwrap(), 0);
    disk.clear_faults();
    file.write_all_at(b"abc", 0).unwrap();
    assert_eq!(file.len().unwrap(), 3);
}

/// The same calls and the same seed give the same state after a crash.
#[test]
fn crashes_are_deterministic_from_the_seed() {
    let run = |seed: u64| {
        let disk = SimDisk::new(seed);
        let file = disk.open(Path::new("/f"), OpenMode::Create).unwrap();
        for i in 0..20u64 {
            file.write_all_at(&[i as u8; 700], i * 300).unwrap();
        }
        let report = disk.crash(CrashMode::Random);
        (report, disk.read_file(Path::new("/f")).ok())
    };
    for seed in 0..20 {
        assert_eq!(run(seed), run(seed));
    }
    assert!(
        (0..20)
            .map(run)
            .collect::<std::collections::HashSet<_>>()
            .len()
            > 1
    );
}

#[test]
fn a_torn_last_sector_mixes_new_and_old_bytes_inside_one_sector() {
    let disk = SimDisk::new(5);
    let file = disk.open(Path::new("/f"), OpenMode::Create).unwrap();
    file.write_all_at(&[1u8; 1024], 0).unwrap();
    file.sync_data().unwrap();
    disk.sync_dir(Path::new("/")).unwrap();
    file.write_all_at(&[2u8; 1024], 0).unwrap();
    let report = disk.crash(CrashMode::TornLastSector);
    assert_eq!(report.writes_torn, 1);
    let bytes = disk.read_file(Path::new("/f")).unwrap();
    assert!(
        bytes[..512].iter().all(|&b| b == 2),
        "earlier sectors whole"
    );
    let new = bytes[512..].iter().take_while(|&&b| b == 2).count();
    assert!(
        (1..512).contains(&new),
        "{new} new bytes in the last sector"
    );
    assert!(
        bytes[512 + new..].iter().all(|&b| b == 1),
        "the rest is old"
    );
}

/// A durable whole-file write, cut at every call of its sequence with random crash choices: the
/// file is the old content or the new, never a mixture, and the new one once the call returned.
#[test]
fn durable_file_writes_are_atomic_under_power_cuts() {
    for seed in 0..seeds() {
        let disk = SimDisk::new(seed);
        create_dir_all_durably(&disk, Path::new("/d")).unwrap();
        write_file_durably(&disk, Path::new("/d/state"), b"old contents").unwrap();
        let new = vec![b'n'; 1500];
        disk.cut_after(seed % 8);
        let returned = write_file_durably(&disk, Path::new("/d/state"), &new).is_ok();
        disk.crash(CrashMode::Random);
        let now = disk.read_file(Path::new("/d/state")).unwrap();
        if returned {
            assert_eq!(now, new, "seed {seed}: acknowledged write lost");
        } else {
            assert!(
                now == new || now == b"old contents",
                "seed {seed}: a mixture of {} bytes",
                now.len()
            );
        }
    }
}

/// Publishing versions through the catalog with power cuts at random calls: after the crash the
/// newest version that verifies is one that was published (the newest acknowledged at least),
/// and its files are whole.
#[test]
fn catalog_versions_survive_power_cuts_whole() {
    let mut fell_back = 0;
    for seed in 0..seeds() {
        let disk = SimDisk::new(seed);
        let root = Path::new("/cat");
        let mut acknowledged = 0;
        disk.cut_after(seed % 40);
        let result = (|| -> Result<(), Box<dyn std::error::Error>> {
            let catalog = Catalog::open(disk.as_disk(), root)?;
            for version in 1..=4u64 {
                let draft = catalog.begin(version)?;
                draft.write_file("data", &vec![version as u8; 700 * version as usize])?;
                draft.publish()?;
                acknowledged = version;
                catalog.prune(2)?;
            }
            Ok(())
        })();
        let _ = result;
        disk.crash(CrashMode::Random);
        let catalog = Catalog::open(disk.as_disk(), root).unwrap();
        let selected = catalog
            .select(|version, dir| {
                let bytes = disk
                    .read_file(&dir.join("data"))
                    .map_err(|e| Rejection::<()>::Invalid(e.to_string()))?;
                if bytes == vec![version as u8; 700 * version as usize] {
                    Ok(version)
                } else {
                    Err(Rejection::Invalid(format!("{} bytes", bytes.len())))
                }
            })
            .unwrap_or_else(|_| panic!("seed {seed}: nothing verifies"));
        match selected {
            None => assert_eq!(
                acknowledged, 0,
                "seed {seed}: acknowledged v{acknowledged} lost"
            ),
            Some(selected) => {
                assert!(
                    selected.version >= acknowledged,
                    "seed {seed}: v{} recovered, v{acknowledged} was acknowledged",
                    selected.version
                );
                fell_back += selected.rejected.len();
            }
        }
    }
    // Every version is synced before its name exists, so nothing ever needs a fallback.
    assert_eq!(fell_back, 0);
}

/// Rolling a catalog back (removing the newest versions, newest first, as an owner that restores
/// an older version does) with power cuts at random calls: a version whose `remove` returned is
/// gone after the crash, every version left is whole, and a newer version can be published again.
#[test]
fn catalog_removals_are_durable_and_leave_whole_versions() {
    for seed in 0..seeds() {
        let disk = SimDisk::new(seed);
        let root = Path::new("/cat");
        let catalog = Catalog::open(disk.as_disk(), root).unwrap();
        for version in 1..=4u64 {
            let draft = catalog.begin(version).unwrap();
            draft.write_file("a", &[version as u8; 600]).unwrap();
            draft.write_file("b", &[version as u8; 90]).unwrap();
            draft.publish().unwrap();
        }
        let mut removed = Vec::new();
        disk.cut_after(seed % 24);
        for version in [4u64, 3, 1] {
            if catalog.remove(version).is_err() {
                break;
            }
            removed.push(version);
        }
        drop(catalog);
        disk.crash(CrashMode::Random);
        let catalog = Catalog::open(disk.as_disk(), root).unwrap();
        let left = catalog.published_versions().unwrap();
        for version in &removed {
            assert!(
                !left.contains(version),
                "seed {seed}: v{version} was removed durably but is back: {left:?}"
            );
        }
        assert!(left.contains(&2), "seed {seed}: v2 was never removed");
        for &version in &left {
            for (name, length) in [("a", 600), ("b", 90)] {
                let bytes = disk
                    .read_file(&catalog.version_dir(version).join(name))
                    .unwrap_or_else(|e| panic!("seed {seed}: v{version}/{name}: {e}"));
                assert_eq!(
                    bytes,
                    vec![version as u8; length],
                    "seed {seed}: v{version}"
                );
            }
        }
        let newest = left.first().copied().unwrap_or(0);
        let draft = catalog.begin(newest + 1).unwrap();
        draft.write_file("a", b"again").unwrap();
        draft.publish().unwrap();
    }
}

/// `retire` (a rollback unpublishing several versions at once, with one directory sync, leaving
/// the files for later) under power cuts at random calls: once it returned, none of the retired
/// versions is published after the crash, the rest are whole, and the half-deleted directories
/// are cleared by the next open; `remove_retired` after an open already cleared them is fine.
#[test]
fn catalog_retirements_are_durable_at_once() {
    for seed in 0..seeds() {
        let disk = SimDisk::new(seed);
        let root = Path::new("/cat");
        let catalog = Catalog::open(disk.as_disk(), root).unwrap();
        for version in 1..=5u64 {
            let draft = catalog.begin(version).unwrap();
            draft.write_file("a", &[version as u8; 500]).unwrap();
            draft.publish().unwrap();
        }
        disk.cut_after(seed % 8);
        let retired = catalog.retire(&[5, 4, 3]);
        drop(catalog);
        disk.crash(CrashMode::Random);
        let reopened = Catalog::open(disk.as_disk(), root).unwrap();
        let left = reopened.published_versions().unwrap();
        if let Ok(paths) = &retired {
            assert_eq!(left, vec![2, 1], "seed {seed}: retired versions are back");
            reopened.remove_retired(paths).unwrap();
        }
        assert!(
            left.contains(&2) && left.contains(&1),
            "seed {seed}: {left:?}"
        );
        for &version in &left {
            let bytes = disk
                .read_file(&reopened.version_dir(version).join("a"))
                .unwrap_or_else(|e| panic!("seed {seed}: v{version}: {e}"));
            assert_eq!(bytes, vec![version as u8; 500], "seed {seed}: v{version}");
        }
    }
    // Without a crash: unpublished at once, files removed only when asked.
    let disk = SimDisk::new(99);
    let root = Path::new("/cat");
    let catalog = Catalog::open(disk.as_disk(), root).unwrap();
    for version in 1..=3u64 {
        let draft = catalog.begin(version).unwrap();
        draft.write_file("a", b"x").unwrap();
        draft.publish().unwrap();
    }
    let paths = catalog.retire(&[3, 2]).unwrap();
    assert_eq!(catalog.published_versions().unwrap(), vec![1]);
    assert!(
        disk.read_file(&paths[0].join("a")).is_ok(),
        "files stay until removed"
    );
    catalog.remove_retired(&paths).unwrap();
    assert!(disk.read_file(&paths[0].join("a")).is_err());
    catalog.remove_retired(&paths).unwrap();
}

/// The directory lock, on both disks: exclusive while held, released when dropped.
#[test]
fn the_directory_lock_is_exclusive_and_released_on_drop() {
    use prefixkv_storage::{real_disk, DirLock, LockError};
    let temp = tempfile::tempdir().unwrap();
    let sim = SimDisk::new(6);
    let disks: [(std::sync::Arc<dyn Disk>, &Path); 2] =
        [(real_disk(), temp.path()), (sim.as_disk(), Path::new("/"))];
    for (disk, dir) in disks {
        let held = DirLock::acquire(&*disk, dir).unwrap();
        match DirLock::acquire(&*disk, dir) {
            Err(LockError::Held { dir: named }) => assert_eq!(named, dir),
            other => panic!("{}: a second lock must be refused: {other:?}", disk.kind()),
        }
        drop(held);
        DirLock::acquire(&*disk, dir).unwrap();
    }
}

//! `engine-compact-dead-fraction`: when the engine compacts on garbage as well as on its page
//! budget (`StoreConfig::compact_dead_fraction`). Fixed at start (the engine's configuration).
//!
//! Invariant: the resolved value is in `[0, 1)`; 0 means "only the page-budget trigger" (the
//! engine's `None`), which `crate::persistence` maps it to. With `storage-tier yes` it is 0: the
//! engine does not compact a tiered log in memory (it evicts the log's oldest pages to its page
//! file instead) and refuses `compact_dead_fraction` with `storage_tier`, so the default becomes
//! 0 and an explicit non-zero fraction is refused at start, naming both options.

use anyhow::bail;

/// The default: compaction also starts when half of the log's pages in use are dead records, so a
/// store that rewrites records (collections' buckets and tree nodes, overwritten values) holds
/// about twice its live bytes in pages at most, instead of filling half the `engine-memory`
/// budget with garbage first (docs/server.md has the throughput measurement).
pub const COMPACT_DEAD_FRACTION: f64 = 0.5;
/// The default with `maxmemory` set: a cache deletes as much as it writes, and its process should
/// stay near the limit (`prefixkv_commands::evict`).
pub const COMPACT_DEAD_FRACTION_CACHE: f64 = 0.25;

/// The fraction from the flag, else the file's value (a TOML float or integer), else the default
/// for this `maxmemory` (0 with `storage_tier`); refused outside `[0, 1)`, and refused when it
/// was given non-zero together with `storage_tier`.
pub(super) fn dead_fraction(
    flag: Option<f64>,
    file: &Option<toml::Value>,
    maxmemory_bytes: u64,
    storage_tier: bool,
) -> anyhow::Result<f64> {
    let given = match (flag, file) {
        (Some(fraction), _) => Some(fraction),
        (None, Some(toml::Value::Float(fraction))) => Some(*fraction),
        (None, Some(toml::Value::Integer(fraction))) => Some(*fraction as f64),
        (None, Some(_)) => bail!("config key engine-compact-dead-fraction: expected a number"),
        (None, None) => None,
    };
    let fraction = match given {
        Some(fraction) => fraction,
        None if storage_tier => 0.0,
        None if maxmemory_bytes > 0 => COMPACT_DEAD_FRACTION_CACHE,
        None => COMPACT_DEAD_FRACTION,
    };
    if !(0.0..1.0).contains(&fraction) {
        bail!(
            "engine-compact-dead-fraction {fraction} is outside [0, 1) (0 compacts only at half \
             the engine-memory budget)"
        );
    }
    if storage_tier && fraction > 0.0 {
        bail!(
            "engine-compact-dead-fraction {fraction} cannot be combined with storage-tier yes: \
             the engine does not compact a tiered log in memory yet (its oldest pages go to the \
             page file instead); leave engine-compact-dead-fraction unset (or 0), or use \
             storage-tier no"
        );
    }
    Ok(fraction)
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Flags};
    use super::*;

    fn resolve(flags: Flags) -> anyhow::Result<f64> {
        Config::resolve(flags).map(|config| config.engine_compact_dead_fraction)
    }

    #[test]
    fn defaults_flags_and_bounds() {
        assert_eq!(resolve(Flags::default()).unwrap(), COMPACT_DEAD_FRACTION);
        let cache = Flags {
            maxmemory: Some("100mb".into()),
            ..Flags::default()
        };
        assert_eq!(resolve(cache).unwrap(), COMPACT_DEAD_FRACTION_CACHE);
        let off = Flags {
            engine_compact_dead_fraction: Some(0.0),
            maxmemory: Some("100mb".into()),
            ..Flags::default()
        };
        assert_eq!(resolve(off).unwrap(), 0.0, "a flag beats the default");
        for bad in [1.0, -0.1, f64::NAN] {
            let error = resolve(Flags {
                engine_compact_dead_fraction: Some(bad),
                ..Flags::default()
            })
            .unwrap_err();
            assert!(
                format!("{error:#}").contains("engine-compact-dead-fraction"),
                "{error:#}"
            );
        }
    }

    #[test]
    fn storage_tier_turns_the_garbage_trigger_off() {
        let tiered = |fraction: Option<f64>, maxmemory: Option<&str>| Flags {
            storage_tier: Some("yes".into()),
            engine_compact_dead_fraction: fraction,
            maxmemory: maxmemory.map(Into::into),
            ..Flags::default()
        };
        assert_eq!(resolve(tiered(None, None)).unwrap(), 0.0);
        assert_eq!(
            resolve(tiered(None, Some("100mb"))).unwrap(),
            0.0,
            "not the cache default either"
        );
        assert_eq!(resolve(tiered(Some(0.0), None)).unwrap(), 0.0);
        for fraction in [0.5, 0.01] {
            let error = resolve(tiered(Some(fraction), None)).unwrap_err();
            let text = format!("{error:#}");
            assert!(
                text.contains("engine-compact-dead-fraction") && text.contains("storage-tier"),
                "{text}"
            );
        }
        // The same from the file, where both keys may be.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prefixkv.toml");
        std::fs::write(
            &path,
            "storage-tier = \"yes\"\nengine-compact-dead-fraction = 0.25\n",
        )
        .unwrap();
        let error = resolve(Flags {
            config: Some(path.clone()),
            ..Flags::default()
        })
        .unwrap_err();
        let text = format!("{error:#}");
        assert!(
            text.contains("engine-compact-dead-fraction") && text.contains("storage-tier"),
            "{text}"
        );
        // A flag beats the file: `--storage-tier no` keeps the file's fraction.
        let config = Config::resolve(Flags {
            config: Some(path.clone()),
            storage_tier: Some("no".into()),
            ..Flags::default()
        })
        .unwrap();
        assert!(!config.storage_tier);
        assert_eq!(config.engine_compact_dead_fraction, 0.25);
        std::fs::write(&path, "storage-tier = true\n").unwrap();
        let config = Config::resolve(Flags {
            config: Some(path.clone()),
            ..Flags::default()
        })
        .unwrap();
        assert!(config.storage_tier);
        assert_eq!(config.engine_compact_dead_fraction, 0.0);
        let error = Config::resolve(Flags {
            storage_tier: Some("maybe".into()),
            ..Flags::default()
        })
        .unwrap_err();
        assert!(format!("{error:#}").contains("storage-tier"), "{error:#}");
    }

    #[test]
    fn from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("prefixkv.toml");
        for (text, expected) in [("0.75", Some(0.75)), ("0", Some(0.0)), ("\"x\"", None)] {
            std::fs::write(&path, format!("engine-compact-dead-fraction = {text}\n")).unwrap();
            let result = resolve(Flags {
                config: Some(path.clone()),
                ..Flags::default()
            });
            match expected {
                Some(expected) => assert_eq!(result.unwrap(), expected, "{text}"),
                None => assert!(result.is_err(), "{text}"),
            }
        }
    }
}

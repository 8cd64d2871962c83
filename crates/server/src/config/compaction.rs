//! `engine-compact-dead-fraction`: when the engine compacts on garbage as well as on its page
//! budget (`StoreConfig::compact_dead_fraction`). Fixed at start (the engine's configuration).
//!
//! Invariant: the resolved value is in `[0, 1)`; 0 means "only the page-budget trigger" (the
//! engine's `None`), which `crate::persistence` maps it to.

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
/// for this `maxmemory`; refused outside `[0, 1)`.
pub(super) fn dead_fraction(
    flag: Option<f64>,
    file: &Option<toml::Value>,
    maxmemory_bytes: u64,
) -> anyhow::Result<f64> {
    let fraction = match (flag, file) {
        (Some(fraction), _) => fraction,
        (None, Some(toml::Value::Float(fraction))) => *fraction,
        (None, Some(toml::Value::Integer(fraction))) => *fraction as f64,
        (None, Some(_)) => bail!("config key engine-compact-dead-fraction: expected a number"),
        (None, None) if maxmemory_bytes > 0 => COMPACT_DEAD_FRACTION_CACHE,
        (None, None) => COMPACT_DEAD_FRACTION,
    };
    if !(0.0..1.0).contains(&fraction) {
        bail!(
            "engine-compact-dead-fraction {fraction} is outside [0, 1) (0 compacts only at half \
             the engine-memory budget)"
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

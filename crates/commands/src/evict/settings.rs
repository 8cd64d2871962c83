//! The eviction settings: `maxmemory-policy`, `maxmemory-samples`,
//! `maxmemory-eviction-tenacity`, `lfu-log-factor`, `lfu-decay-time`, with Redis's names,
//! defaults, ranges and CONFIG SET error texts.

/// Redis's `maxmemory-policy` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Refuse writes over maxmemory (the default).
    NoEviction,
    /// Least recently used among all keys.
    AllKeysLru,
    /// Least frequently used among all keys.
    AllKeysLfu,
    /// Any key.
    AllKeysRandom,
    /// Least recently used among keys with an expiry.
    VolatileLru,
    /// Least frequently used among keys with an expiry.
    VolatileLfu,
    /// Any key with an expiry.
    VolatileRandom,
    /// The key with the nearest expiry.
    VolatileTtl,
}

/// How a policy ranks its candidates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rank {
    /// Longest idle first.
    Idle,
    /// Lowest decayed LFU counter first.
    Frequency,
    /// Nearest expiry first.
    Ttl,
    /// Any.
    Random,
}

impl Policy {
    /// Every policy, in the order Redis's CONFIG SET error lists them.
    pub const ALL: [Policy; 8] = [
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::NoEviction,
    ];

    /// Redis's name.
    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy named `text` (any case, as Redis).
    pub fn parse(text: &str) -> Option<Policy> {
        let lower = text.to_ascii_lowercase();
        Policy::ALL.into_iter().find(|p| p.name() == lower)
    }

    /// Whether the access words are LFU words under this policy.
    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    /// Whether only keys with an expiry may be evicted.
    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    /// How candidates are ranked; `None` for noeviction.
    pub fn rank(self) -> Option<Rank> {
        Some(match self {
            Policy::NoEviction => return None,
            Policy::AllKeysLru | Policy::VolatileLru => Rank::Idle,
            Policy::AllKeysLfu | Policy::VolatileLfu => Rank::Frequency,
            Policy::AllKeysRandom | Policy::VolatileRandom => Rank::Random,
            Policy::VolatileTtl => Rank::Ttl,
        })
    }
}

/// The eviction settings (part of `crate::settings::Settings`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// `maxmemory-policy`.
    pub policy: Policy,
    /// `maxmemory-samples`: keys sampled per round (Redis's range 1..=i32::MAX; one round reads
    /// at most [`super::MAX_SAMPLE`] of them, so memory stays bounded).
    pub samples: u32,
    /// `maxmemory-eviction-tenacity` (0..=100): how long one command may spend evicting.
    pub tenacity: u32,
    /// `lfu-log-factor`.
    pub lfu_log_factor: u32,
    /// `lfu-decay-time` in minutes (0: never decay).
    pub lfu_decay_time: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            policy: Policy::NoEviction,
            samples: 5,
            tenacity: 10,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
        }
    }
}

/// The names these settings answer to (CONFIG GET, CONFIG SET, flags, the TOML file).
pub const NAMES: [&str; 5] = [
    "maxmemory-policy",
    "maxmemory-samples",
    "maxmemory-eviction-tenacity",
    "lfu-log-factor",
    "lfu-decay-time",
];

impl Settings {
    /// (name, value) for CONFIG GET.
    pub fn parameters(&self) -> Vec<(&'static str, String)> {
        vec![
            ("maxmemory-policy", self.policy.name().into()),
            ("maxmemory-samples", self.samples.to_string()),
            ("maxmemory-eviction-tenacity", self.tenacity.to_string()),
            ("lfu-log-factor", self.lfu_log_factor.to_string()),
            ("lfu-decay-time", self.lfu_decay_time.to_string()),
        ]
    }

    /// Sets `name` (one of [`NAMES`]) from `value`; the error is the part Redis's CONFIG SET
    /// error puts after the dash.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), String> {
        if name == "maxmemory-policy" {
            self.policy = Policy::parse(value).ok_or_else(|| {
                let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "argument(s) must be one of the following: {}",
                    names.join(", ")
                )
            })?;
            return Ok(());
        }
        let (slot, min, max) = match name {
            "maxmemory-samples" => (&mut self.samples, 1, i32::MAX as i64),
            "maxmemory-eviction-tenacity" => (&mut self.tenacity, 0, 100),
            "lfu-log-factor" => (&mut self.lfu_log_factor, 0, i32::MAX as i64),
            "lfu-decay-time" => (&mut self.lfu_decay_time, 0, i32::MAX as i64),
            _ => return Err(format!("unknown eviction setting '{name}'")),
        };
        let number: i64 = value
            .parse()
            .map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
        if !(min..=max).contains(&number) {
            return Err(format!(
                "argument must be between {min} and {max} inclusive"
            ));
        }
        *slot = number as u32;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for policy in Policy::ALL {
            assert_eq!(Policy::parse(policy.name()), Some(policy));
            assert_eq!(Policy::parse(&policy.name().to_uppercase()), Some(policy));
        }
        assert_eq!(Policy::parse("lru"), None);
        assert!(Policy::AllKeysLfu.is_lfu() && Policy::VolatileLfu.is_lfu());
        assert!(!Policy::AllKeysLru.is_lfu());
        assert_eq!(Policy::NoEviction.rank(), None);
        assert!(Policy::VolatileTtl.volatile_only() && !Policy::AllKeysRandom.volatile_only());
    }

    #[test]
    fn set_checks_ranges_as_redis() {
        let mut settings = Settings::default();
        settings.set("maxmemory-policy", "ALLKEYS-LFU").unwrap();
        assert_eq!(settings.policy, Policy::AllKeysLfu);
        let error = settings.set("maxmemory-policy", "bogus").unwrap_err();
        assert!(error.starts_with("argument(s) must be one of the following: volatile-lru,"));
        assert_eq!(
            settings.set("maxmemory-samples", "0").unwrap_err(),
            "argument must be between 1 and 2147483647 inclusive"
        );
        assert_eq!(
            settings
                .set("maxmemory-eviction-tenacity", "101")
                .unwrap_err(),
            "argument must be between 0 and 100 inclusive"
        );
        assert_eq!(
            settings.set("lfu-log-factor", "x").unwrap_err(),
            "argument couldn't be parsed into an integer"
        );
        settings.set("lfu-decay-time", "0").unwrap();
        settings.set("maxmemory-samples", "64").unwrap();
        assert_eq!((settings.samples, settings.lfu_decay_time), (64, 0));
        assert_eq!(
            settings.policy,
            Policy::AllKeysLfu,
            "a failed set changes nothing"
        );
    }
}

//! Numbered file names: `<prefix><number zero-padded to a width><suffix>`, so that lexical order
//! is numeric order up to the width. One formatter and one parser for every kind of numbered
//! file (log segments, checkpoint versions, checkpoint segments).
//!
//! Invariant: [`NumberedName::parse`] accepts exactly the names [`NumberedName::format`] produces
//! (`parse(n) == Some(x)` iff `format(x) == n`), so no two names map to the same number and a
//! stray file such as `1.oplog` or `v7` is never taken for one of ours.

/// A family of numbered names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NumberedName {
    /// Text before the number.
    pub prefix: &'static str,
    /// Minimum digits (zero-padded).
    pub width: usize,
    /// Text after the number.
    pub suffix: &'static str,
}

impl NumberedName {
    /// A family `<prefix><n:0width><suffix>`.
    pub const fn new(prefix: &'static str, width: usize, suffix: &'static str) -> NumberedName {
        NumberedName {
            prefix,
            width,
            suffix,
        }
    }

    /// The name of number `n`.
    pub fn format(&self, n: u64) -> String {
        format!(
            "{}{n:0width$}{}",
            self.prefix,
            self.suffix,
            width = self.width
        )
    }

    /// The number of `name`, if it is exactly a name of this family.
    pub fn parse(&self, name: &str) -> Option<u64> {
        let digits = name.strip_prefix(self.prefix)?.strip_suffix(self.suffix)?;
        if digits.len() < self.width || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let n: u64 = digits.parse().ok()?;
        (self.format(n) == name).then_some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_reject_others() {
        let segments = NumberedName::new("", 20, ".oplog");
        assert_eq!(segments.format(1), "00000000000000000001.oplog");
        assert_eq!(segments.parse(&segments.format(u64::MAX)), Some(u64::MAX));
        assert_eq!(segments.parse("1.oplog"), None);
        assert_eq!(segments.parse("0000000000000000000a.oplog"), None);
        assert!(segments.format(9) < segments.format(10));
        let short = NumberedName::new("segment-", 6, ".seg");
        assert_eq!(short.format(7), "segment-000007.seg");
        assert_eq!(short.parse("segment-1234567.seg"), Some(1_234_567));
        assert_eq!(
            short.parse("segment-0001234567.seg"),
            None,
            "non-canonical padding"
        );
        assert_eq!(short.parse("segment-000007.seg.tmp"), None);
    }
}

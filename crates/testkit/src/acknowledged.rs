//! The acknowledged-writes oracle for a server and its client connections: what each connection
//! was told is the reference, and recovery must show a prefix of each connection's writes.
//!
//! A connection sends writes numbered 0, 1, 2, ... and is answered in order, so everything its
//! client knows fits in two numbers it counts itself: `issued` (writes sent) and `acknowledged`
//! (replies received, `acknowledged <= issued`). Each write leaves its own trace that can be
//! looked up after recovery (for example a key of its own whose value names the connection and
//! the write's number), so the caller turns recovery into one flag per write: visible or not.
//!
//! # What recovery may show, per connection
//!
//! A prefix `0..k` of the writes, with `k <= issued`:
//! - writes `acknowledged..issued` were in flight (sent, no reply yet): any of them may be there,
//!   as long as what is there stays a prefix;
//! - `k < acknowledged` means writes `k..acknowledged` were acknowledged and are lost: always a
//!   suffix of what the connection was told. Whether any loss is allowed is the durability mode's
//!   promise, so [`check_connection`] reports the loss ([`Recovery::lost`]) and the caller decides.
//!
//! Anything else is a violation in every mode: a hole (write `j` visible while an earlier write
//! `i` is not: a lost write the later ones hide) or a write visible beyond `issued` (something
//! the client never sent). A caller that finds a write's trace with the wrong content (a value
//! naming another write) reports that itself: it is neither visible nor lost, it is corrupt.
//!
//! Never use what the server reports about itself (its counters, its commit points) as the
//! reference; a reported commit point is a claim to check with [`Recovery::covers`].

use std::fmt;

/// What recovery kept of one connection's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    /// Writes recovered: `0..recovered` are visible, nothing after.
    pub recovered: u64,
    /// Acknowledged writes lost: `acknowledged - recovered` if positive, else 0.
    pub lost: u64,
}

impl Recovery {
    /// The first acknowledged write that was lost, if any.
    pub fn first_lost(&self) -> Option<u64> {
        (self.lost > 0).then_some(self.recovered)
    }

    /// Whether a claim that the first `durable` writes were durable holds.
    pub fn covers(&self, durable: u64) -> bool {
        self.recovered >= durable
    }
}

/// Why recovery is not a prefix of a connection's writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Write `missing` is not visible but the later write `visible` is.
    Hole {
        /// The first write that is not visible.
        missing: u64,
        /// A later write that is.
        visible: u64,
    },
    /// Write `write` is visible although only `issued` writes were sent.
    NeverIssued {
        /// The visible write.
        write: u64,
        /// Writes the client sent.
        issued: u64,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Hole { missing, visible } => write!(
                formatter,
                "write {missing} is missing but the later write {visible} is there: \
                 recovery is not a prefix of the connection's writes"
            ),
            Violation::NeverIssued { write, issued } => write!(
                formatter,
                "write {write} is there but the client sent only {issued} writes"
            ),
        }
    }
}

impl std::error::Error for Violation {}

/// Checks one connection: `visible[i]` says whether write `i` is visible after recovery (the
/// slice may be longer than `issued`, to look for writes that were never sent).
///
/// # Panics
/// If `acknowledged > issued` or `visible` is shorter than `issued` (a bug of the caller).
pub fn check_connection(
    issued: u64,
    acknowledged: u64,
    visible: &[bool],
) -> Result<Recovery, Violation> {
    assert!(
        acknowledged <= issued,
        "{acknowledged} acknowledged of {issued} issued"
    );
    assert!(
        visible.len() as u64 >= issued,
        "{} flags for {issued} writes",
        visible.len()
    );
    let recovered = visible.iter().position(|&v| !v).unwrap_or(visible.len()) as u64;
    if let Some(later) = visible[recovered as usize..].iter().position(|&v| v) {
        let write = recovered + later as u64;
        if write >= issued {
            return Err(Violation::NeverIssued { write, issued });
        }
        return Err(Violation::Hole {
            missing: recovered,
            visible: write,
        });
    }
    if recovered > issued {
        return Err(Violation::NeverIssued {
            write: recovered - 1,
            issued,
        });
    }
    Ok(Recovery {
        recovered,
        lost: acknowledged.saturating_sub(recovered),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(text: &str) -> Vec<bool> {
        text.chars().map(|c| c == '1').collect()
    }

    #[test]
    fn prefixes_pass_and_report_what_was_lost() {
        // Everything acknowledged is there, plus one of the two in-flight writes.
        let all = check_connection(6, 4, &flags("11111000")).unwrap();
        assert_eq!((all.recovered, all.lost, all.first_lost()), (5, 0, None));
        assert!(all.covers(5) && !all.covers(6));
        // A lost suffix of the acknowledged writes.
        let suffix = check_connection(6, 4, &flags("11000000")).unwrap();
        assert_eq!((suffix.recovered, suffix.lost), (2, 2));
        assert_eq!(suffix.first_lost(), Some(2));
        assert_eq!(check_connection(0, 0, &[]).unwrap().recovered, 0);
    }

    #[test]
    fn a_removed_acknowledged_write_is_a_hole() {
        // Tampered input: write 2 of 6 acknowledged ones removed.
        let error = check_connection(6, 6, &flags("110111")).unwrap_err();
        assert_eq!(
            error,
            Violation::Hole {
                missing: 2,
                visible: 3
            }
        );
        assert!(error.to_string().contains("write 2 is missing"), "{error}");
    }

    #[test]
    fn writes_never_sent_are_caught() {
        assert_eq!(
            check_connection(3, 3, &flags("1111")).unwrap_err(),
            Violation::NeverIssued {
                write: 3,
                issued: 3
            }
        );
        assert_eq!(
            check_connection(3, 2, &flags("11101")).unwrap_err(),
            Violation::NeverIssued {
                write: 4,
                issued: 3
            }
        );
    }
}

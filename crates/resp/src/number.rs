//! Strict decimal integers, as Redis's `string2ll` accepts them.
//!
//! Accepted: `0`, or an optional `-` followed by a digit 1-9 and more digits, within `i64`.
//! Rejected: empty, `+`, leading zeros, `-0`, spaces, anything out of range. Being this strict
//! keeps every length header in exactly one spelling, so the same bytes always mean the same
//! thing to us and to Redis.

/// Parses `digits` as Redis's `string2ll` would, or returns `None`.
pub(crate) fn parse_i64(digits: &[u8]) -> Option<i64> {
    let (negative, magnitude_digits) = match digits.split_first() {
        None => return None,
        Some((b'0', [])) => return Some(0),
        Some((b'-', rest)) => (true, rest),
        Some(_) => (false, digits),
    };
    match magnitude_digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    // 20 digits already exceed i64; refusing early keeps the loop short for hostile input.
    if magnitude_digits.len() > 19 {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &byte in magnitude_digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(byte - b'0'))?;
    }
    if negative {
        if magnitude > (i64::MAX as u64) + 1 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::parse_i64;

    #[test]
    fn accepts_what_string2ll_accepts() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"7"), Some(7));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"1234567890"), Some(1_234_567_890));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
    }

    #[test]
    fn rejects_what_string2ll_rejects() {
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b"01",
            b"-0",
            b"00",
            b" 1",
            b"1 ",
            b"1a",
            b"9223372036854775808",
            b"-9223372036854775809",
            b"99999999999999999999",
            b"123456789012345678901234567890",
        ] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}

//! Number text conversions as glibc performs them for Redis's cjson: `printf("%.<p>g")` and
//! `strtod`.
//!
//! Invariants:
//! - `format_g` gives glibc's `%.<p>g` bytes for every double: correctly rounded (Rust's exact
//!   formatting, round-half-even on the exact binary value, as glibc in the default rounding
//!   mode), exponent with a sign and at least two digits, trailing zeros removed, and
//!   `inf`/`-inf`/`nan`/`-nan` for the special values.
//! - `strtod` consumes exactly the prefix glibc's `strtod` consumes (leading white space, sign,
//!   decimal with optional exponent, `0x` hexadecimal with optional `p` exponent, `inf`,
//!   `infinity`, `nan`, `nan(chars)`) and returns the correctly rounded value; 0 bytes consumed
//!   means no conversion. It reads only the slice it is given.

/// glibc's `%.<precision>g` of `v` (precision clamped to at least 1).
pub(crate) fn format_g(v: f64, precision: usize) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if v.is_infinite() {
        return if v < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let p = precision.max(1);
    let sci = format!("{:.*e}", p - 1, v);
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let x: i32 = exp.parse().unwrap_or(0);
    if x < -4 || x >= p as i32 {
        let mant = strip_zeros(mant);
        let sign = if x < 0 { '-' } else { '+' };
        format!("{mant}e{sign}{:02}", x.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - x) as usize;
        strip_zeros(&format!("{v:.decimals$}")).to_string()
    }
}

fn strip_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn starts_with_ci(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// glibc's `strtod` on `s`: (value, bytes consumed); consumed 0 means no number.
pub(crate) fn strtod(s: &[u8]) -> (f64, usize) {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut i = 0;
    while is_space(at(i)) {
        i += 1;
    }
    let mut neg = false;
    if at(i) == b'+' || at(i) == b'-' {
        neg = at(i) == b'-';
        i += 1;
    }
    let signed = |v: f64| if neg { -v } else { v };
    let rest = &s[i.min(s.len())..];
    if starts_with_ci(rest, b"infinity") {
        return (signed(f64::INFINITY), i + 8);
    }
    if starts_with_ci(rest, b"inf") {
        return (signed(f64::INFINITY), i + 3);
    }
    if starts_with_ci(rest, b"nan") {
        let mut end = i + 3;
        if at(end) == b'(' {
            let mut j = end + 1;
            while at(j).is_ascii_alphanumeric() || at(j) == b'_' {
                j += 1;
            }
            if at(j) == b')' {
                end = j + 1;
            }
        }
        return (signed(f64::NAN), end);
    }
    if at(i) == b'0' && (at(i + 1) | 0x20) == b'x' {
        if let Some((v, end)) = hex_float(s, i + 2) {
            return (signed(v), end);
        }
        // "0x" without hex digits: the "0" alone is the number.
        return (signed(0.0), i + 1);
    }
    let start = i;
    let mut digits = 0;
    while at(i).is_ascii_digit() {
        i += 1;
        digits += 1;
    }
    if at(i) == b'.' {
        i += 1;
        while at(i).is_ascii_digit() {
            i += 1;
            digits += 1;
        }
    }
    if digits == 0 {
        return (0.0, 0);
    }
    if (at(i) | 0x20) == b'e' {
        let mut j = i + 1;
        if at(j) == b'+' || at(j) == b'-' {
            j += 1;
        }
        if at(j).is_ascii_digit() {
            while at(j).is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    let text = std::str::from_utf8(&s[start..i]).unwrap_or("0");
    let v: f64 = text.parse().unwrap_or(0.0);
    (signed(v), i)
}

/// A hexadecimal float's mantissa and exponent starting at `s[i]` (after "0x"), correctly
/// rounded to nearest-even. `None` when there is no hex digit.
fn hex_float(s: &[u8], mut i: usize) -> Option<(f64, usize)> {
    let at = |i: usize| s.get(i).copied().unwrap_or(0);
    let mut mant: u64 = 0;
    let mut sticky = false;
    let mut exp: i64 = 0;
    let mut any = false;
    let mut seen_dot = false;
    loop {
        let c = at(i);
        let d = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b'.' if !seen_dot => {
                seen_dot = true;
                i += 1;
                continue;
            }
            _ => break,
        };
        any = true;
        if mant >> 60 == 0 {
            mant = (mant << 4) | u64::from(d);
            if seen_dot {
                exp -= 4;
            }
        } else {
            sticky |= d != 0;
            if !seen_dot {
                exp += 4;
            }
        }
        i += 1;
    }
    if !any {
        return None;
    }
    if (at(i) | 0x20) == b'p' {
        let mut j = i + 1;
        let mut eneg = false;
        if at(j) == b'+' || at(j) == b'-' {
            eneg = at(j) == b'-';
            j += 1;
        }
        if at(j).is_ascii_digit() {
            let mut e: i64 = 0;
            while at(j).is_ascii_digit() {
                e = (e * 10 + i64::from(at(j) - b'0')).min(1 << 40);
                j += 1;
            }
            exp += if eneg { -e } else { e };
            i = j;
        }
    }
    Some((compose(mant, sticky, exp), i))
}

/// `mant * 2^exp` (with `sticky` standing for nonzero bits below `mant`), rounded to the
/// nearest double, ties to even.
fn compose(mant: u64, sticky: bool, exp: i64) -> f64 {
    if mant == 0 {
        return 0.0;
    }
    let lz = mant.leading_zeros();
    let m = mant << lz;
    // Value = m * 2^(e - 63), leading bit weight 2^e.
    let e = exp - i64::from(lz) + 63;
    if e > 1023 {
        return f64::INFINITY;
    }
    let keep = if e >= -1022 { 53 } else { e + 1075 };
    if keep <= 0 {
        // Below half the smallest subnormal, or exactly half (ties to even: zero).
        if keep == 0 && (m != 1 << 63 || sticky) {
            return f64::from_bits(1);
        }
        return 0.0;
    }
    let shift = (64 - keep) as u32;
    let mut q = m >> shift;
    let rem = m & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    if rem > half || (rem == half && (sticky || q & 1 == 1)) {
        q += 1;
    }
    if e >= -1022 {
        let mut e = e;
        if q == 1 << 53 {
            q >>= 1;
            e += 1;
        }
        if e > 1023 {
            return f64::INFINITY;
        }
        f64::from_bits((((e + 1023) as u64) << 52) | (q & ((1 << 52) - 1)))
    } else {
        // Subnormal; a carry into bit 52 is the smallest normal, which these bits encode.
        f64::from_bits(q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g_format_matches_printf() {
        assert_eq!(format_g(0.1, 14), "0.1");
        assert_eq!(format_g(1e21, 14), "1e+21");
        assert_eq!(format_g(123456789012345.0, 14), "1.2345678901234e+14");
        assert_eq!(format_g(0.0001, 14), "0.0001");
        assert_eq!(format_g(0.00001, 14), "1e-05");
        assert_eq!(format_g(-0.0, 14), "-0");
        assert_eq!(format_g(2.5, 1), "2");
        assert_eq!(format_g(100.0, 2), "1e+02");
        assert_eq!(format_g(f64::NEG_INFINITY, 14), "-inf");
    }

    #[test]
    fn strtod_prefixes() {
        assert_eq!(strtod(b"12abc"), (12.0, 2));
        assert_eq!(strtod(b"1e"), (1.0, 1));
        assert_eq!(strtod(b"0x10"), (16.0, 4));
        assert_eq!(strtod(b"0x"), (0.0, 1));
        assert_eq!(strtod(b"0x1p-1"), (0.5, 6));
        assert_eq!(strtod(b"-Infinity"), (f64::NEG_INFINITY, 9));
        assert_eq!(strtod(b"nan(12)x").1, 7);
        assert_eq!(strtod(b"nan(12x").1, 3);
        assert_eq!(strtod(b"-"), (0.0, 0));
        assert_eq!(strtod(b"."), (0.0, 0));
        assert_eq!(strtod(b"0x1.fffffffffffff8p0").0, 2.0);
        assert_eq!(strtod(b"0x1p-1074").0, f64::from_bits(1));
        assert_eq!(strtod(b"0x1p-1075").0, 0.0);
        assert_eq!(strtod(b"0x1.8p-1075").0, f64::from_bits(1));
        assert_eq!(strtod(b"0x1p1024").0, f64::INFINITY);
    }
}

//! Redis-style glob matching for KEYS, SCAN MATCH and CONFIG GET.
//!
//! `*` any run, `?` one byte, `[abc]`, `[^abc]`, `[a-z]` classes, `\x` a literal `x`. Matching
//! is iterative with one backtrack point per `*` (the classic greedy algorithm), so a hostile
//! pattern costs O(pattern * text), never exponential time.

/// Whether `text` matches `pattern`; `nocase` folds ASCII case.
pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    star = Some((p, t));
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t], nocase) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if equal(pattern[p + 1], text[t], nocase) {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                byte => {
                    if equal(byte, text[t], nocase) {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((star_p, star_t)) => {
                p = star_p + 1;
                t = star_t + 1;
                star = Some((star_p, star_t + 1));
            }
            None => return false,
        }
    }
    while p < pattern.len() && pattern[p] == b'*' {
        p += 1;
    }
    p == pattern.len()
}

fn equal(a: u8, b: u8, nocase: bool) -> bool {
    if nocase {
        a.eq_ignore_ascii_case(&b)
    } else {
        a == b
    }
}

/// Matches one byte against the class starting at `pattern[start] == b'['`; returns whether it
/// matched and the index after the class. An unterminated class runs to the pattern's end.
fn class(pattern: &[u8], start: usize, byte: u8, nocase: bool) -> Option<(bool, usize)> {
    let mut i = start + 1;
    let negate = i < pattern.len() && pattern[i] == b'^';
    if negate {
        i += 1;
    }
    let mut matched = false;
    while i < pattern.len() && pattern[i] != b']' {
        if pattern[i] == b'\\' && i + 1 < pattern.len() {
            matched |= equal(pattern[i + 1], byte, nocase);
            i += 2;
        } else if i + 2 < pattern.len() && pattern[i + 1] == b'-' && pattern[i + 2] != b']' {
            let (mut low, mut high) = (pattern[i], pattern[i + 2]);
            if low > high {
                std::mem::swap(&mut low, &mut high);
            }
            let folded = if nocase {
                byte.to_ascii_lowercase()
            } else {
                byte
            };
            matched |= (low..=high).contains(&byte)
                || (nocase
                    && (low.to_ascii_lowercase()..=high.to_ascii_lowercase()).contains(&folded));
            i += 3;
        } else {
            matched |= equal(pattern[i], byte, nocase);
            i += 1;
        }
    }
    let next = if i < pattern.len() { i + 1 } else { i };
    Some((matched != negate, next))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn patterns() {
        assert!(matches(b"*", b"anything", false));
        assert!(matches(b"h?llo", b"hello", false));
        assert!(matches(b"h*llo", b"heeeello", false));
        assert!(matches(b"h[ae]llo", b"hallo", false));
        assert!(!matches(b"h[^e]llo", b"hello", false));
        assert!(matches(b"h[a-b]llo", b"hbllo", false));
        assert!(matches(b"a\\*b", b"a*b", false));
        assert!(!matches(b"a\\*b", b"axb", false));
        assert!(matches(b"MAXMEM*", b"maxmemory", true));
        assert!(!matches(b"foo", b"foobar", false));
        assert!(matches(
            b"*a*a*a*a*a*a*b",
            &[b'a'; 40][..]
                .iter()
                .copied()
                .chain([b'b'])
                .collect::<Vec<_>>(),
            false
        ));
    }
}

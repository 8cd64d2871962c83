//! LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common subsequence
//! of two strings, by the classic dynamic programme, with Redis's replies: the subsequence, its
//! length, or (IDX) the matching ranges found walking back from the ends of both strings.
//!
//! Bounded: the programme's table takes 4 bytes per (i, j) pair; a table larger than
//! `proto-max-bulk-len` is refused before it is allocated, with Redis's error line.

use bytes::Bytes;

use super::{lower, parse_int, CommandError, CommandResult, Ctx};
use crate::value::Kind;

/// One matching range: `a[a_start..=a_end] == b[b_start..=b_end]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Range {
    a_start: usize,
    a_end: usize,
    b_start: usize,
    b_end: usize,
}

impl Range {
    fn len(self) -> usize {
        self.a_end - self.a_start + 1
    }
}

/// The subsequence and the ranges it is made of, last range first (the walk goes backwards).
/// On equal sub-results the walk steps back in `b` first, which decides which of several longest
/// subsequences is reported: the same choice Redis makes.
fn longest_common(a: &[u8], b: &[u8]) -> (Vec<u8>, Vec<Range>) {
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let mut sequence = Vec::with_capacity(table[a.len() * width + b.len()] as usize);
    let mut ranges = Vec::new();
    let mut open: Option<Range> = None;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            sequence.push(a[i - 1]);
            open = match open {
                // Contiguous with the open range: extend it backwards.
                Some(range) if range.a_start == i && range.b_start == j => Some(Range {
                    a_start: i - 1,
                    b_start: j - 1,
                    ..range
                }),
                Some(range) => {
                    ranges.push(range);
                    Some(Range {
                        a_start: i - 1,
                        a_end: i - 1,
                        b_start: j - 1,
                        b_end: j - 1,
                    })
                }
                None => Some(Range {
                    a_start: i - 1,
                    a_end: i - 1,
                    b_start: j - 1,
                    b_end: j - 1,
                }),
            };
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            ranges.extend(open.take());
        }
    }
    ranges.extend(open);
    sequence.reverse();
    (sequence, ranges)
}

/// LCS.
pub(super) fn lcs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CommandResult {
    let db = ctx.db();
    let mut values = Vec::with_capacity(2);
    for key in &args[1..3] {
        match ctx.server.keyspace.read(ctx.session, db, key)? {
            Some(stored) if stored.kind != Kind::String => {
                return Err(CommandError::err(
                    "The specified keys must contain string values",
                ))
            }
            Some(stored) => values.push(stored.payload),
            None => values.push(Vec::new()),
        }
    }
    let (mut length_only, mut indexes, mut with_lengths, mut min_length) = (false, false, false, 0);
    let mut index = 3;
    while index < args.len() {
        match lower(&args[index]).as_str() {
            "idx" => indexes = true,
            "len" => length_only = true,
            "withmatchlen" => with_lengths = true,
            "minmatchlen" if index + 1 < args.len() => {
                min_length = parse_int(&args[index + 1])?.max(0) as usize;
                index += 1;
            }
            _ => return Err(CommandError::Syntax),
        }
        index += 1;
    }
    if length_only && indexes {
        return Err(CommandError::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    let (a, b) = (&values[0], &values[1]);
    let table_bytes = (a.len() as u64 + 1) * (b.len() as u64 + 1) * 4;
    if table_bytes > ctx.server.settings.read().proto_max_bulk_len_bytes {
        return Err(CommandError::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let (sequence, ranges) = longest_common(a, b);
    if length_only {
        ctx.w.int(sequence.len() as i64);
    } else if indexes {
        let kept: Vec<Range> = ranges
            .into_iter()
            .filter(|range| range.len() >= min_length)
            .collect();
        ctx.w.map(2);
        ctx.w.bulk(b"matches");
        ctx.w.array(kept.len());
        for range in kept {
            ctx.w.array(2 + usize::from(with_lengths));
            ctx.w.array(2);
            ctx.w.int(range.a_start as i64);
            ctx.w.int(range.a_end as i64);
            ctx.w.array(2);
            ctx.w.int(range.b_start as i64);
            ctx.w.int(range.b_end as i64);
            if with_lengths {
                ctx.w.int(range.len() as i64);
            }
        }
        ctx.w.bulk(b"len");
        ctx.w.int(sequence.len() as i64);
    } else {
        ctx.w.bulk(&sequence);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_subsequence_and_its_ranges() {
        let (sequence, ranges) = longest_common(b"ohmytext", b"mynewtext");
        assert_eq!(sequence, b"mytext");
        assert_eq!(
            ranges,
            vec![
                Range {
                    a_start: 4,
                    a_end: 7,
                    b_start: 5,
                    b_end: 8
                },
                Range {
                    a_start: 2,
                    a_end: 3,
                    b_start: 0,
                    b_end: 1
                },
            ]
        );
        assert_eq!(longest_common(b"", b"abc"), (Vec::new(), Vec::new()));
        assert_eq!(longest_common(b"abc", b"xyz").0, b"");
    }
}

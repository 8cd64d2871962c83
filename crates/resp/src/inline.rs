//! Inline commands: one line of space-separated arguments, split with Redis's quoting rules.
//!
//! The rules are those of Redis's `sdssplitargs` (the reference behaviour; written from its
//! documented behaviour and tested against a table of its results in `tests/inline_table.rs`):
//!
//! - Arguments are separated by runs of whitespace (space, `\t`, `\n`, `\v`, `\f`, `\r`); an
//!   unquoted argument ends at a space, `\t`, `\n` or `\r`.
//! - A `"` anywhere in an argument opens a double-quoted part, in which `\xHH` (two hex digits)
//!   is that byte, `\n \r \t \b \a` are the control characters, and a backslash before any other
//!   byte stands for that byte.
//! - A `'` opens a single-quoted part, in which only `\'` is an escape (a literal `'`).
//! - A closing quote ends the argument and must be followed by whitespace or the end of the line;
//!   otherwise, or if the line ends inside quotes, the request is rejected with
//!   [`ProtocolError::UnbalancedQuotes`].
//! - NUL bytes never reach the splitter: Redis looks for the end of an inline line with
//!   `strchr`, so a NUL hides the newline and the request never completes (the connection is
//!   closed once 64 KiB are buffered); the request parser reports that outcome at once.
//!
//! Arguments without quotes are zero-copy slices of the line; quoted ones are copied, since
//! escapes change their bytes.

use bytes::Bytes;

use crate::ProtocolError;

/// Splits one inline line (without its line terminator) into arguments. An empty result means
/// the line was blank.
pub(crate) fn split_inline(line: &Bytes) -> Result<Vec<Bytes>, ProtocolError> {
    debug_assert!(
        memchr::memchr(0, line).is_none(),
        "the request parser rejects NUL"
    );
    let text = &line[..];
    let mut args = Vec::new();
    let mut position = 0;
    loop {
        while position < text.len() && is_c_space(text[position]) {
            position += 1;
        }
        if position == text.len() {
            return Ok(args);
        }
        let start = position;
        while position < text.len() && !ends_unquoted(text[position]) && !is_quote(text[position]) {
            position += 1;
        }
        if position == text.len() || ends_unquoted(text[position]) {
            args.push(line.slice(start..position));
            continue;
        }
        // A quote: from here on the argument's bytes differ from the line's, so copy.
        let mut argument = text[start..position].to_vec();
        position = split_quoted(text, position, &mut argument)?;
        args.push(Bytes::from(argument));
    }
}

/// Continues an argument at `position`, which is at a quote, appending its bytes to `argument`.
/// Returns the position just after the argument (a closing quote always ends it).
fn split_quoted(
    text: &[u8],
    position: usize,
    argument: &mut Vec<u8>,
) -> Result<usize, ProtocolError> {
    debug_assert!(is_quote(text[position]));
    if text[position] == b'"' {
        double_quoted(text, position + 1, argument)
    } else {
        single_quoted(text, position + 1, argument)
    }
}

fn double_quoted(
    text: &[u8],
    mut position: usize,
    argument: &mut Vec<u8>,
) -> Result<usize, ProtocolError> {
    loop {
        let Some(&byte) = text.get(position) else {
            return Err(ProtocolError::UnbalancedQuotes);
        };
        if byte == b'\\' {
            if let (Some(b'x'), Some(&high), Some(&low)) = (
                text.get(position + 1),
                text.get(position + 2),
                text.get(position + 3),
            ) {
                if let (Some(high), Some(low)) = (hex_value(high), hex_value(low)) {
                    argument.push(high * 16 + low);
                    position += 4;
                    continue;
                }
            }
            if let Some(&escaped) = text.get(position + 1) {
                argument.push(match escaped {
                    b'n' => b'\n',
                    b'r' => b'\r',
                    b't' => b'\t',
                    b'b' => 0x08,
                    b'a' => 0x07,
                    other => other,
                });
                position += 2;
                continue;
            }
        }
        if byte == b'"' {
            return close_quote(text, position);
        }
        argument.push(byte);
        position += 1;
    }
}

fn single_quoted(
    text: &[u8],
    mut position: usize,
    argument: &mut Vec<u8>,
) -> Result<usize, ProtocolError> {
    loop {
        let Some(&byte) = text.get(position) else {
            return Err(ProtocolError::UnbalancedQuotes);
        };
        if byte == b'\\' && text.get(position + 1) == Some(&b'\'') {
            argument.push(b'\'');
            position += 2;
            continue;
        }
        if byte == b'\'' {
            return close_quote(text, position);
        }
        argument.push(byte);
        position += 1;
    }
}

/// A closing quote at `position` ends the argument; it must be followed by whitespace or the end.
fn close_quote(text: &[u8], position: usize) -> Result<usize, ProtocolError> {
    match text.get(position + 1) {
        Some(&next) if !is_c_space(next) => Err(ProtocolError::UnbalancedQuotes),
        _ => Ok(position + 1),
    }
}

/// C's `isspace` in the C locale.
fn is_c_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Bytes that end an unquoted argument (a narrower set than `is_c_space`, as in Redis).
fn ends_unquoted(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_quote(byte: u8) -> bool {
    byte == b'"' || byte == b'\''
}

fn hex_value(byte: u8) -> Option<u8> {
    (byte as char).to_digit(16).map(|digit| digit as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[u8]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        split_inline(&Bytes::copy_from_slice(line))
            .map(|args| args.iter().map(|arg| arg.to_vec()).collect())
    }

    fn ok(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, ProtocolError> {
        Ok(args.iter().map(|arg| arg.to_vec()).collect())
    }

    #[test]
    fn plain_words() {
        assert_eq!(split(b"set  a\tb"), ok(&[b"set", b"a", b"b"]));
        assert_eq!(split(b"   "), ok(&[]));
        assert_eq!(split(b""), ok(&[]));
        assert_eq!(split(b"\x0bping"), ok(&[b"ping"]));
    }

    #[test]
    fn unquoted_arguments_are_zero_copy() {
        let line = Bytes::from_static(b"get key");
        let args = split_inline(&line).unwrap();
        assert_eq!(args[1].as_ptr(), line[4..].as_ptr());
    }

    #[test]
    fn double_quote_escapes() {
        assert_eq!(
            split(br#"set "a b" "\x41\x7a\n\r\t\b\a\q\"\\""#),
            ok(&[b"set", b"a b", b"Az\n\r\t\x08\x07q\"\\"])
        );
        // Not two hex digits: the backslash escapes the `x` alone.
        assert_eq!(split(br#""\x4g""#), ok(&[b"x4g"]));
        assert_eq!(split(br#""""#), ok(&[b""]));
    }

    #[test]
    fn single_quotes_only_escape_the_quote() {
        assert_eq!(split(br"'a\'b\n'"), ok(&[br"a'b\n"]));
    }

    #[test]
    fn quotes_mid_argument() {
        assert_eq!(split(br#"ab"c d" e"#), ok(&[b"abc d", b"e"]));
    }

    #[test]
    fn unbalanced() {
        for line in [&br#""abc"#[..], b"'abc", br#""a"b"#, b"'a'b", br#""abc\"#] {
            assert_eq!(split(line), Err(ProtocolError::UnbalancedQuotes));
        }
    }
}

//! SHA-1 (the `sha1` crate), for script names: Redis names a script by the lower-case hex SHA-1 of its
//! body (EVALSHA, SCRIPT LOAD, `redis.sha1hex`). Not used for anything security-related.

/// The lower-case hex SHA-1 of `data` (40 characters).
pub fn hex(data: &[u8]) -> String {
    use ::sha1::Digest;
    use std::fmt::Write;
    let mut out = String::with_capacity(40);
    for byte in ::sha1::Sha1::digest(data) {
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::hex;

    #[test]
    fn known_digests() {
        assert_eq!(hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(
            hex(b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "84983e441c3bd26ebaae4aa1f95129e5e54670f1"
        );
        // Lengths around the one-block/two-block tail boundary.
        assert_eq!(hex(&[b'a'; 55]), "c1c8bbdc22796e28c0e15163d20899b65621d65a");
        assert_eq!(hex(&[b'a'; 56]), "c2db330f6083854c99d4b5bfb6e8f29f201be699");
        assert_eq!(hex(&[b'a'; 64]), "0098ba824b5c16427bd7a1122a5a442a25ec644d");
        // What EVAL "return 1" is named by redis-server.
        assert_eq!(hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }
}

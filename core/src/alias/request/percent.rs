//! Percent-decoding a text with the offset of every byte, and percent-encoding
//! an id.

/// Percent-decodes `bytes` (`%XX` with two hex digits; anything else stays),
/// with the offset in `bytes` of every decoded byte and of the end.
pub(super) fn percent_decode(bytes: &[u8]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::with_capacity(bytes.len());
    let mut origin = Vec::with_capacity(bytes.len() + 1);
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes.get(i).copied().unwrap_or(0);
        let pair = (bytes.get(i + 1).copied(), bytes.get(i + 2).copied());
        origin.push(i);
        match (b, pair) {
            (b'%', (Some(h), Some(l))) => match (hex(h), hex(l)) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                }
                _ => {
                    out.push(b);
                    i += 1;
                }
            },
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    origin.push(bytes.len());
    (out, origin)
}

/// Percent-encodes everything outside RFC 3986 unreserved characters.
pub(super) fn percent_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

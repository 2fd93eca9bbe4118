//! Little-endian field access on fixed byte arrays and bounded slices.

/// Reads a little-endian `u16` at `off` (the caller's layout guarantees the bounds).
pub(crate) fn get_u16(b: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([b[off], b[off + 1]])
}

/// Reads a little-endian `u32` at `off`.
pub(crate) fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// Reads a little-endian `u64` at `off`.
pub(crate) fn get_u64(b: &[u8], off: usize) -> u64 {
    u64::from(get_u32(b, off)) | (u64::from(get_u32(b, off + 4)) << 32)
}

/// Writes a little-endian `u16` at `off`.
pub(crate) fn put_u16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian `u32` at `off`.
pub(crate) fn put_u32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Writes a little-endian `u64` at `off`.
pub(crate) fn put_u64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Copies `s` into the fixed field `b[off..off + len]`, padding with `pad` (NUL for NQNs,
/// space for Identify's ASCII fields); `s` is cut at `len` bytes.
pub(crate) fn put_str(b: &mut [u8], off: usize, len: usize, s: &str, pad: u8) {
    let field = &mut b[off..off + len];
    field.fill(pad);
    let n = s.len().min(len);
    field[..n].copy_from_slice(&s.as_bytes()[..n]);
}

/// A NUL-terminated string in a fixed field: `None` when it has no terminator or is not UTF-8.
pub(crate) fn get_nul_str(b: &[u8]) -> Option<&str> {
    let end = b.iter().position(|&c| c == 0)?;
    core::str::from_utf8(&b[..end]).ok()
}

/// A space- (or NUL-) padded ASCII field with the padding stripped; non-UTF-8 gives `""`.
pub(crate) fn get_padded_str(b: &[u8]) -> &str {
    let end = b
        .iter()
        .rposition(|&c| c != b' ' && c != 0)
        .map_or(0, |i| i + 1);
    core::str::from_utf8(&b[..end]).unwrap_or("")
}

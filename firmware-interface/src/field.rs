//! PRM field descriptors.
//!
//! `mlx5_ifc.h` describes every command message and context as a run of bit fields whose position
//! is a bit offset counted from the most significant bit of byte 0. A [`Field`] is exactly that
//! pair (bit offset, width), so a position written "dw@0x8 \[23:0\]" (`docs/mlx5.md#conventions`)
//! maps to one constant: `Field::dw(0x8, 23, 0)`. Values are big-endian in the buffer.
//!
//! Accessors never panic: a field that does not lie inside the buffer reads as `None` from the
//! `try_` accessors (and as 0 from the plain ones) and is not written.

/// One field of a PRM layout: `bit_off` counts from the MSB of byte 0, `width` in bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Bit offset from the most significant bit of byte 0 (the `mlx5_ifc.h` convention).
    pub bit_off: u32,
    /// Width in bits.
    pub width: u32,
}

impl Field {
    /// The field occupying bits `hi..=lo` of the big-endian dword at byte offset `byte`
    /// (written "dw@byte \[hi:lo\]" in `docs/mlx5.md`).
    pub const fn dw(byte: usize, hi: u32, lo: u32) -> Field {
        assert!(byte.is_multiple_of(4) && hi < 32 && lo <= hi);
        Field {
            bit_off: byte as u32 * 8 + (31 - hi),
            width: hi - lo + 1,
        }
    }

    /// A field of whole bytes `byte..byte+len` (a 32- or 64-bit word, an address, a GID, an
    /// embedded context or a byte array).
    pub const fn bytes(byte: usize, len: usize) -> Field {
        Field {
            bit_off: byte as u32 * 8,
            width: len as u32 * 8,
        }
    }

    /// The same field moved `base` bytes further: a field of a context embedded at `base`.
    pub const fn at(self, base: usize) -> Field {
        Field {
            bit_off: self.bit_off + base as u32 * 8,
            width: self.width,
        }
    }

    /// Byte offset of the first byte holding the field.
    pub const fn byte_off(self) -> usize {
        (self.bit_off / 8) as usize
    }

    /// One past the last byte holding the field.
    pub const fn end(self) -> usize {
        (self.bit_off + self.width).div_ceil(8) as usize
    }

    /// Dword byte offset and `(hi, lo)` bit range, for fields of at most 32 bits that do not
    /// cross a dword; `None` otherwise.
    pub const fn dword_bits(self) -> Option<(usize, u32, u32)> {
        let dw = self.bit_off / 32;
        let first = self.bit_off % 32;
        if self.width == 0 || self.width > 32 || first + self.width > 32 {
            return None;
        }
        let hi = 31 - first;
        let lo = hi + 1 - self.width;
        Some((dw as usize * 4, hi, lo))
    }

    const fn mask(self) -> u32 {
        if self.width >= 32 {
            u32::MAX
        } else {
            (1u32 << self.width) - 1
        }
    }

    /// Reads a field of at most 32 bits.
    pub fn try_get(self, buf: &[u8]) -> Option<u32> {
        let (dw, _hi, lo) = self.dword_bits()?;
        let word = buf.get(dw..dw + 4)?;
        let v = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        Some((v >> lo) & self.mask())
    }

    /// Reads a field of at most 32 bits; 0 when it is not inside `buf`.
    pub fn get(self, buf: &[u8]) -> u32 {
        self.try_get(buf).unwrap_or(0)
    }

    /// Writes a field of at most 32 bits (the value is masked to the width). Returns `false`
    /// and writes nothing when the field is not inside `buf`.
    pub fn set(self, buf: &mut [u8], value: u32) -> bool {
        let Some((dw, _hi, lo)) = self.dword_bits() else {
            return false;
        };
        let Some(word) = buf.get_mut(dw..dw + 4) else {
            return false;
        };
        let old = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        let mask = self.mask() << lo;
        let new = (old & !mask) | ((value << lo) & mask);
        word.copy_from_slice(&new.to_be_bytes());
        true
    }

    /// Reads a 64-bit byte-aligned field (an address, a length, a 64-bit mask).
    pub fn try_get64(self, buf: &[u8]) -> Option<u64> {
        if self.width != 64 || !self.bit_off.is_multiple_of(8) {
            return None;
        }
        let b = buf.get(self.byte_off()..self.byte_off() + 8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_be_bytes(a))
    }

    /// Reads a 64-bit field; 0 when it is not inside `buf`.
    pub fn get64(self, buf: &[u8]) -> u64 {
        self.try_get64(buf).unwrap_or(0)
    }

    /// Writes a 64-bit byte-aligned field. Returns `false` and writes nothing when it does not fit.
    pub fn set64(self, buf: &mut [u8], value: u64) -> bool {
        if self.width != 64 || !self.bit_off.is_multiple_of(8) {
            return false;
        }
        let off = self.byte_off();
        match buf.get_mut(off..off + 8) {
            Some(b) => {
                b.copy_from_slice(&value.to_be_bytes());
                true
            }
            None => false,
        }
    }

    /// The bytes holding a byte-aligned field (an embedded context, a GID, a MAC).
    pub fn slice(self, buf: &[u8]) -> Option<&[u8]> {
        buf.get(byte_range(
            self.bit_off,
            self.width,
            self.byte_off(),
            self.end(),
        )?)
    }

    /// Mutable bytes of a byte-aligned field.
    pub fn slice_mut(self, buf: &mut [u8]) -> Option<&mut [u8]> {
        buf.get_mut(byte_range(
            self.bit_off,
            self.width,
            self.byte_off(),
            self.end(),
        )?)
    }
}

/// The bytes `start..end` of a field that starts and ends on byte boundaries (`None` for a
/// field that does not): what `slice` / `slice_mut` of both field kinds hand out.
fn byte_range(
    bit_off: u32,
    width: u32,
    start: usize,
    end: usize,
) -> Option<core::ops::Range<usize>> {
    (bit_off.is_multiple_of(8) && width.is_multiple_of(8)).then_some(start..end)
}

/// An integer stored as bytes in one byte order (alignment 1), as the device lays it out.
macro_rules! byte_int {
    ($name:ident, $ty:ty, $n:expr, $order:literal, $to:ident, $from:ident) => {
        #[doc = concat!("A ", $order, "-endian `", stringify!($ty), "` stored as bytes (alignment 1), as the device lays it out.")]
        #[repr(transparent)]
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(pub [u8; $n]);

        impl $name {
            #[doc = concat!("Stores a host value in ", $order, "-endian order.")]
            pub const fn new(v: $ty) -> Self {
                $name(v.$to())
            }
            /// The host value.
            pub const fn get(self) -> $ty {
                <$ty>::$from(self.0)
            }
            /// Replaces the value.
            pub fn set(&mut self, v: $ty) {
                self.0 = v.$to();
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                write!(f, "{:#x}", self.get())
            }
        }
    };
}

byte_int!(Be16, u16, 2, "big", to_be_bytes, from_be_bytes);
byte_int!(Be32, u32, 4, "big", to_be_bytes, from_be_bytes);
byte_int!(Be64, u64, 8, "big", to_be_bytes, from_be_bytes);

/// One field of a little-endian layout (the EFA contract, `docs/efa.md#conventions`).
///
/// `bit_off` counts from the least significant bit of byte 0, so a field of bits `hi..=lo` of
/// the little-endian word (of any width) at byte `byte` sits at `byte * 8 + lo`. Fields may
/// span bytes and are at most 64 bits wide when read as numbers; wider ones are byte arrays.
/// Accessors never panic: a field that does not lie inside the buffer reads as `None` from the
/// `try_` accessors (0 from the plain ones) and is not written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LeField {
    /// Bit offset from the least significant bit of byte 0.
    pub bit_off: u32,
    /// Width in bits.
    pub width: u32,
}

impl LeField {
    /// Bits `hi..=lo` of the little-endian word at byte `byte` (written "`byte` \[hi:lo\]" in
    /// `docs/efa.md`).
    pub const fn bits(byte: usize, hi: u32, lo: u32) -> LeField {
        assert!(lo <= hi && hi < 64);
        LeField {
            bit_off: byte as u32 * 8 + lo,
            width: hi - lo + 1,
        }
    }

    /// The 8-bit field at byte `byte`.
    pub const fn u8(byte: usize) -> LeField {
        LeField::bits(byte, 7, 0)
    }

    /// The 16-bit field at byte `byte`.
    pub const fn u16(byte: usize) -> LeField {
        assert!(byte.is_multiple_of(2));
        LeField::bits(byte, 15, 0)
    }

    /// The 32-bit field at byte `byte`.
    pub const fn u32(byte: usize) -> LeField {
        assert!(byte.is_multiple_of(4));
        LeField::bits(byte, 31, 0)
    }

    /// The 64-bit field at byte `byte`.
    pub const fn u64(byte: usize) -> LeField {
        assert!(byte.is_multiple_of(8));
        LeField::bits(byte, 63, 0)
    }

    /// A byte array (or an embedded structure) of `len` bytes at `byte`.
    pub const fn bytes(byte: usize, len: usize) -> LeField {
        LeField {
            bit_off: byte as u32 * 8,
            width: len as u32 * 8,
        }
    }

    /// The same field moved `base` bytes further: a field of a structure embedded at `base`.
    pub const fn at(self, base: usize) -> LeField {
        LeField {
            bit_off: self.bit_off + base as u32 * 8,
            width: self.width,
        }
    }

    /// Byte offset of the first byte holding the field.
    pub const fn byte_off(self) -> usize {
        (self.bit_off / 8) as usize
    }

    /// One past the last byte holding the field.
    pub const fn end(self) -> usize {
        (self.bit_off + self.width).div_ceil(8) as usize
    }

    const fn mask(self) -> u64 {
        if self.width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.width) - 1
        }
    }

    /// The field's value inside a register or word value `word` whose bit 0 is byte 0's
    /// bit 0 (for register fields, whose layouts start at byte 0).
    pub const fn of(self, word: u64) -> u64 {
        if self.bit_off >= 64 {
            return 0;
        }
        (word >> self.bit_off) & self.mask()
    }

    /// `value` placed at the field's position in a register or word value (masked to the
    /// width), to be ORed with the other fields.
    pub const fn val(self, value: u64) -> u64 {
        if self.bit_off >= 64 {
            return 0;
        }
        (value & self.mask()) << self.bit_off
    }

    fn window(self) -> Option<(usize, usize, u32)> {
        if self.width == 0 || self.width > 64 {
            return None;
        }
        let first = self.byte_off();
        let shift = self.bit_off % 8;
        let n = (shift + self.width).div_ceil(8) as usize;
        if n > 8 {
            return None;
        }
        Some((first, n, shift))
    }

    /// Reads a field of at most 64 bits (that spans at most 8 bytes).
    pub fn try_get64(self, buf: &[u8]) -> Option<u64> {
        let (first, n, shift) = self.window()?;
        let b = buf.get(first..first + n)?;
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b);
        Some((u64::from_le_bytes(a) >> shift) & self.mask())
    }

    /// Reads a field of at most 64 bits; 0 when it is not inside `buf`.
    pub fn get64(self, buf: &[u8]) -> u64 {
        self.try_get64(buf).unwrap_or(0)
    }

    /// Reads a field of at most 32 bits; `None` when it is wider or not inside `buf`.
    pub fn try_get(self, buf: &[u8]) -> Option<u32> {
        if self.width > 32 {
            return None;
        }
        self.try_get64(buf).map(|v| v as u32)
    }

    /// Reads a field of at most 32 bits; 0 when it is not inside `buf` (or wider).
    pub fn get(self, buf: &[u8]) -> u32 {
        self.try_get(buf).unwrap_or(0)
    }

    /// Writes a field of at most 64 bits (the value is masked to the width). Returns `false`
    /// and writes nothing when the field is not inside `buf`.
    pub fn set64(self, buf: &mut [u8], value: u64) -> bool {
        let Some((first, n, shift)) = self.window() else {
            return false;
        };
        let Some(b) = buf.get_mut(first..first + n) else {
            return false;
        };
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(b);
        let old = u64::from_le_bytes(a);
        let mask = self.mask() << shift;
        let new = (old & !mask) | ((value << shift) & mask);
        b.copy_from_slice(&new.to_le_bytes()[..n]);
        true
    }

    /// Writes a field of at most 32 bits; see [`LeField::set64`].
    pub fn set(self, buf: &mut [u8], value: u32) -> bool {
        self.set64(buf, u64::from(value))
    }

    /// The bytes holding a byte-aligned field (an embedded structure, a GID, a string).
    pub fn slice(self, buf: &[u8]) -> Option<&[u8]> {
        buf.get(byte_range(
            self.bit_off,
            self.width,
            self.byte_off(),
            self.end(),
        )?)
    }

    /// Mutable bytes of a byte-aligned field.
    pub fn slice_mut(self, buf: &mut [u8]) -> Option<&mut [u8]> {
        buf.get_mut(byte_range(
            self.bit_off,
            self.width,
            self.byte_off(),
            self.end(),
        )?)
    }
}

byte_int!(Le16, u16, 2, "little", to_le_bytes, from_le_bytes);
byte_int!(Le32, u32, 4, "little", to_le_bytes, from_le_bytes);
byte_int!(Le64, u64, 8, "little", to_le_bytes, from_le_bytes);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dw_matches_ifc_bit_offsets() {
        // create_cq_out.cqn: dw@0x8 [23:0] is bit offset 0x48, width 24 in mlx5_ifc.h
        let f = Field::dw(0x8, 23, 0);
        assert_eq!((f.bit_off, f.width), (0x48, 24));
        assert_eq!(f.byte_off(), 0x9);
        assert_eq!(f.dword_bits(), Some((0x8, 23, 0)));
    }

    #[test]
    fn get_set_roundtrip_and_masking() {
        let mut b = [0u8; 16];
        let f = Field::dw(0x4, 15, 0);
        assert!(f.set(&mut b, 0x1_2345));
        assert_eq!(&b[4..8], &[0, 0, 0x23, 0x45]);
        assert_eq!(f.get(&b), 0x2345);
        let g = Field::dw(0x4, 31, 16);
        g.set(&mut b, 0xabcd);
        assert_eq!(f.get(&b), 0x2345);
        assert_eq!(g.get(&b), 0xabcd);
    }

    #[test]
    fn out_of_range_is_not_a_panic() {
        let mut b = [0u8; 8];
        let f = Field::dw(0x8, 31, 0);
        assert_eq!(f.try_get(&b), None);
        assert!(!f.set(&mut b, 1));
        assert!(!Field::bytes(4, 8).set64(&mut b, 1));
        assert_eq!(Field::bytes(8, 16).slice(&b), None);
    }

    #[test]
    fn sixty_four_bit_fields() {
        let mut b = [0u8; 16];
        let f = Field::bytes(8, 8);
        assert!(f.set64(&mut b, 0x0102_0304_0506_0708));
        assert_eq!(b[8], 1);
        assert_eq!(f.get64(&b), 0x0102_0304_0506_0708);
        assert_eq!(Be64::new(5).get(), 5);
    }

    #[test]
    fn little_endian_fields() {
        let mut b = [0u8; 16];
        // A 5-bit field at bits 5:1 of byte 8 and a 16-bit field at byte 2.
        let f = LeField::bits(8, 5, 1);
        assert_eq!((f.bit_off, f.width, f.byte_off(), f.end()), (65, 5, 8, 9));
        assert!(f.set(&mut b, 0x3f));
        assert_eq!(b[8], 0x3e);
        assert_eq!(f.get(&b), 0x1f);
        let g = LeField::u16(2);
        assert!(g.set(&mut b, 0x1234_5678));
        assert_eq!(&b[2..4], &[0x78, 0x56]);
        // A field across a byte boundary: bits 11:4 of the word at 12.
        let h = LeField::bits(12, 11, 4);
        assert!(h.set(&mut b, 0xab));
        assert_eq!(&b[12..14], &[0xb0, 0x0a]);
        assert_eq!(h.get(&b), 0xab);
        let w = LeField::u64(8);
        assert!(w.set64(&mut b, 0x0102_0304_0506_0708));
        assert_eq!(b[8], 8);
        assert_eq!(w.get64(&b), 0x0102_0304_0506_0708);
        assert_eq!(w.try_get(&b), None);
        assert!(!LeField::u32(16).set(&mut b, 1));
        assert_eq!(LeField::u32(16).try_get(&b), None);
        assert_eq!(LeField::bits(0, 15, 8).of(0xabcd), 0xab);
        assert_eq!(LeField::bits(0, 31, 16).val(0x1_0002), 0x2_0000);
        assert_eq!(Le32::new(5).0, [5, 0, 0, 0]);
    }
}

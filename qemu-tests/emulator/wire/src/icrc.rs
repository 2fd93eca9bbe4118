//! The RoCEv2 invariant CRC (`docs/rocev2.md#icrc`).
//!
//! The ICRC is the standard reflected CRC-32 (polynomial 0xEDB88320, register preset to
//! all ones, final inversion: the Ethernet/zlib CRC) computed over
//!
//! ```text
//! 8 × 0xFF                          stand-in for the masked IB LRH
//! IPv4 header (20 B), masked        TOS = 0xFF, TTL = 0xFF, header checksum = 0xFFFF
//! UDP header (8 B), masked          checksum = 0xFFFF
//! BTH (12 B), masked                byte 4 (FECN, BECN, Resv6a) = 0xFF
//! extension headers, payload, pad   unmasked
//! ```
//!
//! It goes on the wire least significant byte first ([`to_wire`]), like an Ethernet FCS.
//! Everything else in RoCEv2 is big-endian.

use core::net::Ipv4Addr;

/// Reflected CRC-32 polynomial (IEEE 802.3), as used by `crc32_le`.
pub const CRC32_POLY_REFLECTED: u32 = 0xEDB8_8320;

/// The CRC register after the 8 × 0xFF prefix, starting from all ones (rxe's
/// `crc32_le(0xDEBB20E3, …)` seed).
pub const ICRC_PREFIX_STATE: u32 = 0xDEBB_20E3;

/// Bytes of 0xFF that stand in for the InfiniBand LRH.
pub const ICRC_PREFIX_LEN: usize = 8;

/// Size of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// Bytes of IPv4 + UDP header covered (masked) by the ICRC.
pub const IPV4_UDP_HEADER_LEN: usize = 28;

/// Size of the BTH (the first 12 bytes of `transport` in [`icrc_ipv4`]).
const BTH_LEN: usize = 12;

/// Bytes consumed per step of the sliced loop in [`Crc32::update`].
const SLICE: usize = 16;

/// The lookup tables of slice-by-16, built at compile time.
///
/// `TABLES[0][b]` is the classic byte-at-a-time table: the register contribution of byte `b`
/// shifted through 8 bit steps. `TABLES[k][b]` is the contribution of a byte that still has
/// `k` more bytes behind it in the same step, i.e. `TABLES[k-1][b]` pushed through one more
/// zero byte: `(t >> 8) ^ TABLES[0][t & 0xFF]`.
const fn make_tables() -> [[u32; 256]; SLICE] {
    let mut tables = [[0u32; 256]; SLICE];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ CRC32_POLY_REFLECTED
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < SLICE {
        let mut i = 0;
        while i < 256 {
            let t = tables[k - 1][i];
            tables[k][i] = (t >> 8) ^ tables[0][(t & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

/// Slice-by-16 lookup tables for the reflected polynomial (16 KiB), built at compile time.
static TABLES: [[u32; 256]; SLICE] = make_tables();

/// An incremental CRC-32 (reflected, preset all ones, final inversion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crc32 {
    state: u32,
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32 {
    /// A CRC with its register preset to all ones.
    pub const fn new() -> Self {
        Self { state: 0xFFFF_FFFF }
    }

    /// A CRC whose register already holds `state` (for example [`ICRC_PREFIX_STATE`]).
    pub const fn with_state(state: u32) -> Self {
        Self { state }
    }

    /// The raw register (not inverted).
    pub const fn state(&self) -> u32 {
        self.state
    }

    /// Feeds `data` into the register.
    ///
    /// From [`CLMUL_MIN_LEN`] bytes on, on x86-64 CPUs with PCLMULQDQ (detected at run time),
    /// carry-less multiplication folds 64 bytes per step ([`clmul`]); otherwise, and for
    /// short inputs, slice-by-16 ([`Crc32::update_table`]). The result is bit-for-bit that
    /// of the byte-at-a-time (and of the bit-at-a-time) algorithm, for any split of the data
    /// into `update` calls.
    pub fn update(&mut self, data: &[u8]) {
        #[cfg(target_arch = "x86_64")]
        if data.len() >= CLMUL_MIN_LEN && clmul::available() {
            let (a, b) = data.split_at(16);
            self.state = clmul::update_parts(self.state, a, b);
            return;
        }
        self.update_table(data);
    }

    /// Feeds `data` into the register with slice-by-16 only (the portable path, and the
    /// reference the folded path is tested against): sixteen bytes per step through sixteen
    /// tables (one load per byte, no dependency between the loads of a step), then byte at a
    /// time for the tail.
    pub fn update_table(&mut self, data: &[u8]) {
        self.state = table_update(self.state, data);
    }
}

/// Slice-by-16 over `data`, from register `crc`; returns the new register.
fn table_update(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(SLICE);
    for c in &mut chunks {
        // The first four bytes fold into the register (little-endian: the reflected CRC
        // consumes the least significant byte first); the other twelve are independent.
        let a = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = t[15][(a & 0xFF) as usize]
            ^ t[14][((a >> 8) & 0xFF) as usize]
            ^ t[13][((a >> 16) & 0xFF) as usize]
            ^ t[12][(a >> 24) as usize]
            ^ t[11][usize::from(c[4])]
            ^ t[10][usize::from(c[5])]
            ^ t[9][usize::from(c[6])]
            ^ t[8][usize::from(c[7])]
            ^ t[7][usize::from(c[8])]
            ^ t[6][usize::from(c[9])]
            ^ t[5][usize::from(c[10])]
            ^ t[4][usize::from(c[11])]
            ^ t[3][usize::from(c[12])]
            ^ t[2][usize::from(c[13])]
            ^ t[1][usize::from(c[14])]
            ^ t[0][usize::from(c[15])];
    }
    // The tail (under 16 bytes): eight, then four bytes per step through the last tables,
    // then byte at a time.
    let mut rest = chunks.remainder();
    if let Some((c, more)) = rest.split_first_chunk::<8>() {
        let a = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = t[7][(a & 0xFF) as usize]
            ^ t[6][((a >> 8) & 0xFF) as usize]
            ^ t[5][((a >> 16) & 0xFF) as usize]
            ^ t[4][(a >> 24) as usize]
            ^ t[3][usize::from(c[4])]
            ^ t[2][usize::from(c[5])]
            ^ t[1][usize::from(c[6])]
            ^ t[0][usize::from(c[7])];
        rest = more;
    }
    if let Some((c, more)) = rest.split_first_chunk::<4>() {
        let a = crc ^ u32::from_le_bytes(*c);
        crc = t[3][(a & 0xFF) as usize]
            ^ t[2][((a >> 8) & 0xFF) as usize]
            ^ t[1][((a >> 16) & 0xFF) as usize]
            ^ t[0][(a >> 24) as usize];
        rest = more;
    }
    for &b in rest {
        crc = t[0][((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

impl Crc32 {
    /// The CRC value: the inverted register.
    pub const fn finish(&self) -> u32 {
        !self.state
    }
}

/// Inputs from this many bytes on take the folded (PCLMULQDQ) path when the CPU has it.
pub const CLMUL_MIN_LEN: usize = 64;

/// `x^n mod P` in the register's (reflected) form: bit `i` is the coefficient of `x^(31-i)`.
const fn xpow_mod(n: u32) -> u32 {
    let mut r = 0x8000_0000u32; // x^0
    let mut i = 0;
    while i < n {
        r = if r & 1 != 0 {
            (r >> 1) ^ CRC32_POLY_REFLECTED
        } else {
            r >> 1
        };
        i += 1;
    }
    r
}

/// `floor(x^64 / P)` for the Barrett reduction, as a plain (not reflected) 33-bit integer:
/// bit `j` is the coefficient of `x^j`.
const fn barrett_mu() -> u64 {
    const P: u128 = 0x1_04C1_1DB7; // P(x), x^32 + … + 1, not reflected
    let mut rem: u128 = 1 << 64;
    let mut q: u64 = 0;
    let mut d = 64;
    while d >= 32 {
        if rem & (1 << d) != 0 {
            rem ^= P << (d - 32);
            q |= 1 << (d - 32);
        }
        d -= 1;
    }
    q
}

/// Folding by carry-less multiplication (x86-64 PCLMULQDQ).
///
/// Notation: an `n`-bit *reflected* value has the coefficient of `x^(n-1-i)` in bit `i` (the
/// reflected CRC consumes the least significant bit first, as the highest power), so a
/// 16-byte little-endian load of message bytes is a 128-bit reflected polynomial. The
/// carry-less product of two 64-bit reflected values has the coefficient of `x^(126-m)` in
/// bit `m`: one power short of a 128-bit reflected value, which the constants absorb.
///
/// * With the register at zero, leading zero bytes do not change a CRC, and a preset register
///   `r` equals XORing `r` into the first four message bytes; so the message is processed as
///   zero bytes (to a multiple of 16) followed by the message with the preset XORed in, in
///   whole 16-byte blocks: no tail.
/// * A block `A` with `F` more bits of message behind it moves forward by `F` bits: its
///   upper-power half `H` (low quadword) and lower-power half `L` (high quadword) are
///   multiplied by `x^(F+63) mod P` and `x^(F-1) mod P` and XORed into the block `F` bits on
///   (`H·x^64·x^F ≡ x·H·(x^(F+63) mod P)`, `L·x^F ≡ x·L·(x^(F-1) mod P)`, the factor `x`
///   being the product's missing power). Four independent blocks fold by 512 bits per step,
///   then combine by 128-bit folds.
/// * The last block `X` is the register's `X·x^32 mod P`: folded to 96 bits
///   (`H·(x^96 mod P) + L·x^32`), then to 64 (`Yh·(x^64 mod P) + Yl`), then reduced to 32
///   bits by Barrett (`q = ⌊⌊Z/x^32⌋·μ/x^32⌋`, `μ = ⌊x^64/P⌋`, remainder `Z + q·P`).
#[cfg(target_arch = "x86_64")]
pub mod clmul {
    use core::arch::x86_64::{
        __m128i, _mm_clmulepi64_si128, _mm_loadu_si128, _mm_set_epi64x, _mm_storeu_si128,
        _mm_xor_si128,
    };

    use super::{barrett_mu, table_update, xpow_mod};

    /// The two multipliers that move a 128-bit block forward by `bits` bits, as the
    /// reflected 64-bit operands `[for the low quadword, for the high quadword]` (a degree-31
    /// remainder sits in bits 32..64).
    const fn fold_keys(bits: u32) -> [u64; 2] {
        [
            (xpow_mod(bits + 63) as u64) << 32,
            (xpow_mod(bits - 1) as u64) << 32,
        ]
    }

    /// Multipliers of the four-way loop (64 bytes ahead).
    pub const KEYS_512: [u64; 2] = fold_keys(512);
    /// Multipliers of single 16-byte steps.
    pub const KEYS_128: [u64; 2] = fold_keys(128);
    /// `x^96 mod P` and `x^64 mod P`, reflected 64-bit (the final folds).
    const K96: u64 = (xpow_mod(96) as u64) << 32;
    const K64: u64 = (xpow_mod(64) as u64) << 32;
    /// `μ` and `P` as reflected 64-bit values (33 coefficients in bits 31..64).
    const MU: u64 = barrett_mu().reverse_bits();
    const POLY: u64 = 0x1_04C1_1DB7u64.reverse_bits();

    /// Whether this CPU has PCLMULQDQ (detected once by `std`; without `std`, whether the
    /// build targets it).
    #[inline]
    pub fn available() -> bool {
        #[cfg(feature = "std")]
        {
            std::is_x86_feature_detected!("pclmulqdq")
        }
        #[cfg(not(feature = "std"))]
        {
            cfg!(target_feature = "pclmulqdq")
        }
    }

    /// The register after `data`, from register `state`, for any length (below 32 bytes,
    /// or without PCLMULQDQ, through the tables).
    pub fn update(state: u32, data: &[u8]) -> u32 {
        if data.len() < 32 {
            return table_update(state, data);
        }
        let (a, b) = data.split_at(16);
        update_parts(state, a, b)
    }

    /// The register after `a` then `b`, from register `state`, without joining them: `a` is
    /// a short head (4 to 48 bytes, such as masked headers), `b` at least 16 bytes. Other
    /// shapes, and CPUs without PCLMULQDQ, go through the tables.
    pub fn update_parts(state: u32, a: &[u8], b: &[u8]) -> u32 {
        if !(4..=48).contains(&a.len()) || b.len() < 16 || !available() {
            return table_update(table_update(state, a), b);
        }
        // Zero bytes in front to a multiple of 16, the preset in the first four bytes of `a`,
        // and enough of `b` to end the joined part on a block boundary.
        let total = a.len() + b.len();
        let pad = total.wrapping_neg() & 15;
        let head = pad + a.len();
        let k = head.wrapping_neg() & 15;
        let mut buf = [0u8; 80];
        buf[pad..head].copy_from_slice(a);
        buf[head..head + k].copy_from_slice(&b[..k]);
        for (i, s) in state.to_le_bytes().into_iter().enumerate() {
            buf[pad + i] ^= s;
        }
        let (first, _) = buf[..head + k].as_chunks::<16>();
        let (rest, tail) = b[k..].as_chunks::<16>();
        debug_assert!(tail.is_empty());
        // SAFETY: the CPU has PCLMULQDQ (checked above); SSE2 is part of x86-64.
        unsafe { fold_stream(first, rest) }
    }

    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn keys(k: [u64; 2]) -> __m128i {
        _mm_set_epi64x(k[1] as i64, k[0] as i64)
    }

    /// `x` moved forward by the distance of `k`, XORed into `next`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold(x: __m128i, k: __m128i, next: __m128i) -> __m128i {
        let lo = _mm_clmulepi64_si128::<0x00>(x, k);
        let hi = _mm_clmulepi64_si128::<0x11>(x, k);
        _mm_xor_si128(_mm_xor_si128(lo, hi), next)
    }

    /// Loads the 16 bytes of `b`.
    #[inline]
    #[target_feature(enable = "sse2")]
    fn load(b: &[u8; 16]) -> __m128i {
        // SAFETY: `b` is 16 readable bytes; the load has no alignment requirement.
        unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
    }

    /// The 128 bits of `x` as an integer (bit `k` of the integer is bit `k` of `x`).
    #[inline]
    #[target_feature(enable = "sse2")]
    fn to_u128(x: __m128i) -> u128 {
        let mut b = [0u8; 16];
        // SAFETY: `b` is 16 writable bytes; the store has no alignment requirement.
        unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), x) };
        u128::from_le_bytes(b)
    }

    /// The carry-less product of `a` and `b`.
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn clmul64(a: u64, b: u64) -> u128 {
        let p =
            _mm_clmulepi64_si128::<0x00>(_mm_set_epi64x(0, a as i64), _mm_set_epi64x(0, b as i64));
        to_u128(p)
    }

    /// Block `i` of `first` followed by `rest`.
    #[inline]
    fn block<'a>(first: &'a [[u8; 16]], rest: &'a [[u8; 16]], i: usize) -> &'a [u8; 16] {
        match first.get(i) {
            Some(b) => b,
            None => &rest[i - first.len()],
        }
    }

    /// The register after the blocks of `first` then `rest` from a zero register (the preset
    /// already XORed in). At least one block.
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn fold_stream(first: &[[u8; 16]], rest: &[[u8; 16]]) -> u32 {
        let n = first.len() + rest.len();
        let k128 = keys(KEYS_128);
        let mut i;
        let mut x;
        if n >= 4 {
            let k512 = keys(KEYS_512);
            let mut x0 = load(block(first, rest, 0));
            let mut x1 = load(block(first, rest, 1));
            let mut x2 = load(block(first, rest, 2));
            let mut x3 = load(block(first, rest, 3));
            i = 4;
            // Past the joined head, straight over `rest`.
            while i < first.len() && i + 4 <= n {
                x0 = fold(x0, k512, load(block(first, rest, i)));
                x1 = fold(x1, k512, load(block(first, rest, i + 1)));
                x2 = fold(x2, k512, load(block(first, rest, i + 2)));
                x3 = fold(x3, k512, load(block(first, rest, i + 3)));
                i += 4;
            }
            if i >= first.len() {
                let mut r = &rest[i - first.len()..];
                while let [c0, c1, c2, c3, more @ ..] = r {
                    x0 = fold(x0, k512, load(c0));
                    x1 = fold(x1, k512, load(c1));
                    x2 = fold(x2, k512, load(c2));
                    x3 = fold(x3, k512, load(c3));
                    r = more;
                    i += 4;
                }
            }
            x = fold(x0, k128, x1);
            x = fold(x, k128, x2);
            x = fold(x, k128, x3);
        } else {
            x = load(block(first, rest, 0));
            i = 1;
        }
        while i < n {
            x = fold(x, k128, load(block(first, rest, i)));
            i += 1;
        }
        reduce(to_u128(x))
    }

    /// The register `X·x^32 mod P` of a last block `X` (128-bit reflected).
    #[inline]
    #[target_feature(enable = "pclmulqdq,sse2")]
    fn reduce(x: u128) -> u32 {
        let (h, l) = (x as u64, (x >> 64) as u64);
        // 96 bits, reflected in 128 (degree 95 at bit 32): H·(x^96 mod P) + L·x^32.
        let y = (clmul64(h, K96) << 1) ^ (u128::from(l) << 32);
        // 64 bits: Yh·(x^64 mod P) + Yl.
        let yh = (y as u64) & 0xFFFF_FFFF_0000_0000;
        let z = ((y >> 64) as u64) ^ ((clmul64(yh, K64) >> 63) as u64);
        // Barrett: q = ⌊⌊Z/x^32⌋·μ/x^32⌋; the register is the low 32 coefficients of Z + q·P.
        let t1 = z << 32;
        let q = ((clmul64(t1, MU) >> 31) as u64) & 0xFFFF_FFFF_0000_0000;
        let r = (z >> 32) ^ ((clmul64(q, POLY) >> 95) as u64);
        r as u32
    }
}

/// CRC-32 of `data` (equal to zlib's `crc32(data)`).
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(data);
    c.finish()
}

/// The ICRC of a RoCEv2 packet carried in IPv4.
///
/// `ip_udp` is the 20-byte IPv4 header (no options) followed by the 8-byte UDP header, exactly as
/// on the wire; `transport` is everything from the BTH up to, but not including, the ICRC (BTH,
/// extension headers, payload, pad). The masked fields of `docs/rocev2.md#masked-fields` are
/// replaced by ones here; the caller's bytes are not modified. A `transport` shorter than a BTH is
/// covered as is (byte 4 is masked only if present).
pub fn icrc_ipv4(ip_udp: &[u8; IPV4_UDP_HEADER_LEN], transport: &[u8]) -> u32 {
    let mut hdr = *ip_udp;
    hdr[1] = 0xFF; // TOS: DSCP + ECN
    hdr[8] = 0xFF; // TTL
    hdr[10] = 0xFF; // header checksum
    hdr[11] = 0xFF;
    hdr[26] = 0xFF; // UDP checksum
    hdr[27] = 0xFF;

    // The masked headers and the BTH in one buffer: one pass over 40 bytes instead of
    // several short updates (each of which ends byte at a time).
    let mut head = [0u8; IPV4_UDP_HEADER_LEN + BTH_LEN];
    let n = transport.len().min(BTH_LEN);
    head[..IPV4_UDP_HEADER_LEN].copy_from_slice(&hdr);
    head[IPV4_UDP_HEADER_LEN..IPV4_UDP_HEADER_LEN + n].copy_from_slice(&transport[..n]);
    if n > 4 {
        head[IPV4_UDP_HEADER_LEN + 4] = 0xFF; // BTH byte 4: FECN, BECN, Resv6a
    }
    let head = &head[..IPV4_UDP_HEADER_LEN + n];
    let body = &transport[n..];
    #[cfg(target_arch = "x86_64")]
    if head.len() + body.len() >= CLMUL_MIN_LEN && body.len() >= 16 && clmul::available() {
        // Headers and body in one folded pass, no table step.
        return !clmul::update_parts(ICRC_PREFIX_STATE, head, body);
    }
    let mut crc = Crc32::with_state(ICRC_PREFIX_STATE);
    crc.update(head);
    crc.update(body);
    crc.finish()
}

/// The ICRC a whole IPv4 frame (IPv4 header … ICRC trailer) should carry, computed over every
/// byte but the last four. `None` if the frame is too short to hold the IPv4 and UDP headers
/// and a trailer. No header is validated here; see [`crate::packet::Packet::decode`].
pub fn frame_icrc(frame: &[u8]) -> Option<u32> {
    if frame.len() < IPV4_UDP_HEADER_LEN + ICRC_LEN {
        return None;
    }
    let (hdr, rest) = frame.split_at(IPV4_UDP_HEADER_LEN);
    let hdr: &[u8; IPV4_UDP_HEADER_LEN] = hdr.try_into().ok()?;
    Some(icrc_ipv4(hdr, &rest[..rest.len() - ICRC_LEN]))
}

/// The ICRC of a packet in UDP-payload form (what a UDP socket sends and receives), computed
/// over the pseudo IPv4 + UDP header the receiver reconstructs from the socket addresses.
///
/// The pseudo header is: version 4, IHL 5, total length = 28 + `transport.len()` + 4,
/// identification 0, DF set, protocol 17, the two addresses; UDP source port `src_port`,
/// destination port 4791 (always, whatever port the socket uses), length = 8 +
/// `transport.len()` + 4. TOS, TTL and both checksums are masked anyway.
/// `transport` is BTH … pad, without the ICRC.
pub fn icrc_udp_payload(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, transport: &[u8]) -> u32 {
    let hdr = crate::packet::pseudo_ip_udp_header(src, dst, src_port, transport.len() + ICRC_LEN);
    icrc_ipv4(&hdr, transport)
}

/// The four wire bytes of an ICRC value (least significant byte first).
pub const fn to_wire(icrc: u32) -> [u8; ICRC_LEN] {
    icrc.to_le_bytes()
}

/// The ICRC value carried by four wire bytes.
pub const fn from_wire(bytes: [u8; ICRC_LEN]) -> u32 {
    u32::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `docs/rocev2.md#test-vector`: a CNP captured from a ConnectX-4 Lx (scapy `roce.uts`),
    /// without its Ethernet header.
    const CAPTURED_CNP: [u8; 60] = [
        // IPv4: 45 c2 003c 718c 4000 40 11 9161 0a001101 0a001201
        0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11,
        0x01, 0x0a, 0x00, 0x12, 0x01, //
        // UDP: sport 0, dport 4791, len 40, csum 0
        0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, //
        // BTH: opcode 0x81, flags 0, P_Key ffff, BECN, DestQP 0x118, A 0, PSN 0
        0x81, 0x00, 0xff, 0xff, 0x40, 0x00, 0x01, 0x18, 0x00, 0x00, 0x00, 0x00, //
        // 16 reserved bytes
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, //
        // ICRC
        0x82, 0xfd, 0x00, 0x2a,
    ];

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b""), 0);
    }

    #[test]
    fn prefix_state_matches_rxe_seed() {
        let mut c = Crc32::new();
        c.update(&[0xFF; ICRC_PREFIX_LEN]);
        assert_eq!(c.state(), ICRC_PREFIX_STATE);
    }

    #[test]
    fn captured_cnp_icrc_matches_hardware() {
        let icrc = frame_icrc(&CAPTURED_CNP).unwrap();
        assert_eq!(to_wire(icrc), [0x82, 0xfd, 0x00, 0x2a]);
        let trailer: [u8; 4] = CAPTURED_CNP[56..].try_into().unwrap();
        assert_eq!(from_wire(trailer), icrc);
    }

    #[test]
    fn captured_cnp_icrc_via_plain_crc32() {
        // The same computation done the long way: zlib.crc32(ff*8 + masked bytes).
        let mut masked = [0xFFu8; 8 + 56];
        masked[8..].copy_from_slice(&CAPTURED_CNP[..56]);
        for off in [1usize, 8, 10, 11, 26, 27, 28 + 4] {
            masked[8 + off] = 0xFF;
        }
        assert_eq!(crc32(&masked).to_le_bytes(), [0x82, 0xfd, 0x00, 0x2a]);
    }

    #[test]
    fn masked_fields_do_not_change_the_icrc() {
        let base = frame_icrc(&CAPTURED_CNP).unwrap();
        for off in [1usize, 8, 10, 11, 26, 27, 28 + 4] {
            let mut f = CAPTURED_CNP;
            f[off] ^= 0x5A;
            assert_eq!(frame_icrc(&f), Some(base), "offset {off} must be masked");
        }
        for off in [
            0usize, 2, 5, 6, 9, 12, 19, 20, 23, 24, 28, 29, 31, 33, 36, 40, 55,
        ] {
            let mut f = CAPTURED_CNP;
            f[off] ^= 0x01;
            assert_ne!(frame_icrc(&f), Some(base), "offset {off} must be covered");
        }
    }

    /// The CRC register pushed through `data` one bit at a time: the definition, with no table.
    fn bitwise_update(mut crc: u32, data: &[u8]) -> u32 {
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ CRC32_POLY_REFLECTED
                } else {
                    crc >> 1
                };
            }
        }
        crc
    }

    fn pattern(len: usize, seed: u32) -> Vec<u8> {
        (0..len as u32)
            .map(|i| (i.wrapping_add(seed).wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect()
    }

    #[test]
    fn tables_extend_the_byte_table() {
        // Row 0 is the classic table (0x77073096 is its well-known entry 1) and each row is
        // the previous one pushed through a zero byte.
        assert_eq!(TABLES[0][1], 0x7707_3096);
        assert_eq!(TABLES[0][255], 0x2D02_EF8D);
        for pair in TABLES.windows(2) {
            for (&next, &prev) in pair[1].iter().zip(&pair[0]) {
                assert_eq!(next, bitwise_update(prev, &[0]));
            }
        }
    }

    #[test]
    fn every_short_length_and_offset_matches_bitwise() {
        // Every tail length, every start alignment, around one and two slice steps.
        let data = pattern(3 * SLICE + 8, 1);
        for start in 0..8 {
            for len in 0..=data.len() - start {
                let d = &data[start..start + len];
                let mut c = Crc32::with_state(0x1234_5678);
                c.update(d);
                assert_eq!(c.state(), bitwise_update(0x1234_5678, d), "{start}+{len}");
                assert_eq!(crc32(d), !bitwise_update(!0, d), "{start}+{len}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// Slice-by-16 equals the bitwise CRC for any length up to a jumbo frame, any start
        /// state, and any split of the data into two or three incremental updates.
        #[test]
        fn sliced_crc_matches_bitwise(
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..=9000),
            state: u32,
            cut1: proptest::sample::Index,
            cut2: proptest::sample::Index,
        ) {
            let len = data.len();
            let want = bitwise_update(state, &data);
            let whole = {
                let mut c = Crc32::with_state(state);
                c.update(&data);
                c.state()
            };
            proptest::prop_assert_eq!(whole, want);
            proptest::prop_assert_eq!(crc32(&data), !bitwise_update(!0, &data));

            let (a, b) = (cut1.index(len + 1), cut2.index(len + 1));
            let (a, b) = (a.min(b), a.max(b));
            let mut c = Crc32::with_state(state);
            c.update(&data[..a]);
            c.update(&data[a..b]);
            c.update(&data[b..]);
            proptest::prop_assert_eq!(c.state(), want);
        }
    }

    /// Deterministic pseudo-random bytes (SplitMix64).
    fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    #[test]
    fn update_picks_the_fast_path_and_agrees_with_the_tables() {
        // Every length through several 64-byte folding steps, at every start alignment
        // within a cache line, from several register states.
        let data = random_bytes(600 + 64, 7);
        for start in 0..64 {
            for len in (0..=600).step_by(if start % 8 == 0 { 1 } else { 7 }) {
                let d = &data[start..start + len];
                for state in [0u32, !0, ICRC_PREFIX_STATE, 0x1234_5678] {
                    let mut fast = Crc32::with_state(state);
                    fast.update(d);
                    let mut table = Crc32::with_state(state);
                    table.update_table(d);
                    assert_eq!(fast.state(), table.state(), "start {start} len {len}");
                }
            }
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn clmul_matches_bitwise_on_random_lengths() {
        if !clmul::available() {
            // Nothing to compare on this CPU: `update` is the table path, tested above.
            return;
        }
        let mut x = 0x0123_4567_89AB_CDEFu64;
        for round in 0..400u64 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let len = (x >> 33) as usize % 9100;
            let off = (x >> 20) as usize % 16;
            let state = (x >> 7) as u32;
            let buf = random_bytes(len + off, round);
            let d = &buf[off..];
            assert_eq!(
                clmul::update(state, d),
                bitwise_update(state, d),
                "round {round}: len {len} offset {off}"
            );
        }
        // Jumbo and 1 MiB inputs (the RDMA WRITE path's sizes) against the tables.
        for len in [4096usize, 9000, 65_536, 1 << 20] {
            let d = random_bytes(len, len as u64);
            assert_eq!(clmul::update(!0, &d), table_update(!0, &d), "len {len}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn clmul_parts_match_the_tables_for_every_head_length() {
        // Every head length update_parts folds (and a few it hands to the tables), bodies
        // around block and 64-byte boundaries, several presets.
        let data = random_bytes(50 + 400, 11);
        for a_len in 0..=50 {
            for b_len in (0..=400).filter(|l| l % 16 < 2 || l % 16 == 15 || l % 37 == 0) {
                let (a, b) = (&data[..a_len], &data[a_len..a_len + b_len]);
                for state in [!0u32, ICRC_PREFIX_STATE, 0] {
                    let want = table_update(table_update(state, a), b);
                    assert_eq!(
                        clmul::update_parts(state, a, b),
                        want,
                        "head {a_len} body {b_len} state {state:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn barrett_mu_is_the_quotient_of_x64_by_p() {
        // μ·P + remainder = x^64 with deg(remainder) < 32, in GF(2)[x].
        let mu = barrett_mu();
        let mut prod: u128 = 0;
        for j in 0..64 {
            if mu >> j & 1 != 0 {
                prod ^= 0x1_04C1_1DB7u128 << j;
            }
        }
        assert_eq!(mu >> 32, 1, "degree 32");
        assert_eq!((prod ^ (1u128 << 64)) >> 32, 0);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn fold_keys_are_powers_of_x() {
        // x^(F+63) and x^(F-1) mod P, checked against the bitwise CRC of a lone 1 bit:
        // feeding a byte 0x80-free message of zeros after register bit 31 (x^0) is
        // multiplication by x per bit.
        let pow = |n: u32| {
            let (bytes, bits) = ((n / 8) as usize, n % 8);
            let mut r = bitwise_update(0x8000_0000, &std::vec![0u8; bytes]);
            for _ in 0..bits {
                r = if r & 1 != 0 {
                    (r >> 1) ^ CRC32_POLY_REFLECTED
                } else {
                    r >> 1
                };
            }
            u64::from(r) << 32
        };
        assert_eq!(clmul::KEYS_128, [pow(191), pow(127)]);
        assert_eq!(clmul::KEYS_512, [pow(575), pow(511)]);
    }

    #[test]
    fn icrc_of_every_transport_length_matches_the_plain_crc32() {
        // icrc_ipv4 merges headers and BTH into one buffer: compare with the masked bytes
        // fed to zlib's CRC-32, for transports shorter than, equal to and longer than a BTH.
        let hdr: [u8; IPV4_UDP_HEADER_LEN] = CAPTURED_CNP[..28].try_into().unwrap();
        let body = random_bytes(300, 3);
        for len in 0..body.len() {
            let t = &body[..len];
            let mut masked = std::vec![0xFFu8; 8];
            masked.extend_from_slice(&hdr);
            masked.extend_from_slice(t);
            for off in [1usize, 8, 10, 11, 26, 27] {
                masked[8 + off] = 0xFF;
            }
            if len > 4 {
                masked[8 + 28 + 4] = 0xFF;
            }
            assert_eq!(icrc_ipv4(&hdr, t), crc32(&masked), "transport length {len}");
        }
    }

    #[test]
    fn short_frames_have_no_icrc() {
        assert_eq!(frame_icrc(&CAPTURED_CNP[..31]), None);
        assert!(frame_icrc(&CAPTURED_CNP[..32]).is_some());
    }
}

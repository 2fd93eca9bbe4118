//! The RoCEv2 invariant CRC (spec §6).
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
    /// Slice-by-16: sixteen bytes per step through sixteen tables (one load per byte, no
    /// dependency between the loads of a step), then byte at a time for the tail. The result
    /// is bit-for-bit that of the byte-at-a-time (and of the bit-at-a-time) algorithm, for
    /// any split of the data into `update` calls.
    pub fn update(&mut self, data: &[u8]) {
        let t = &TABLES;
        let mut crc = self.state;
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
        for &b in chunks.remainder() {
            crc = t[0][((crc ^ u32::from(b)) & 0xFF) as usize] ^ (crc >> 8);
        }
        self.state = crc;
    }

    /// The CRC value: the inverted register.
    pub const fn finish(&self) -> u32 {
        !self.state
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
/// `ip_udp` is the 20-byte IPv4 header (no options) followed by the 8-byte UDP header, exactly
/// as on the wire; `transport` is everything from the BTH up to, but not including, the ICRC
/// (BTH, extension headers, payload, pad). The masked fields of spec §6.2 are replaced by
/// ones here; the caller's bytes are not modified. A `transport` shorter than a BTH is
/// covered as is (byte 4 is masked only if present).
pub fn icrc_ipv4(ip_udp: &[u8; IPV4_UDP_HEADER_LEN], transport: &[u8]) -> u32 {
    let mut hdr = *ip_udp;
    hdr[1] = 0xFF; // TOS: DSCP + ECN
    hdr[8] = 0xFF; // TTL
    hdr[10] = 0xFF; // header checksum
    hdr[11] = 0xFF;
    hdr[26] = 0xFF; // UDP checksum
    hdr[27] = 0xFF;

    let mut crc = Crc32::with_state(ICRC_PREFIX_STATE);
    crc.update(&hdr);
    if transport.len() > 4 {
        crc.update(&transport[..4]);
        crc.update(&[0xFF]); // BTH byte 4: FECN, BECN, Resv6a
        crc.update(&transport[5..]);
    } else {
        crc.update(transport);
    }
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

    /// Spec §6.4: a CNP captured from a ConnectX-4 Lx (scapy `roce.uts`), without its
    /// Ethernet header.
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

    #[test]
    fn short_frames_have_no_icrc() {
        assert_eq!(frame_icrc(&CAPTURED_CNP[..31]), None);
        assert!(frame_icrc(&CAPTURED_CNP[..32]).is_some());
    }
}

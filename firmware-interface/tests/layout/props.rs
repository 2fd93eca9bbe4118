//! Property tests: field round trips and isolation, struct byte images, signatures.

use firmware_interface::{
    Field,
    cmd::{self, CmdLayout, MailboxBlock},
    cmds,
    cqe::{Cqe64, ErrCqe},
    ctx,
    eqe::Eqe,
    wqe::{CtrlSeg, DataSeg, DatagramSeg},
};
use proptest::prelude::*;

type Layout = (&'static str, &'static [(&'static str, Field)], usize);

macro_rules! layouts {
    ($($p:ident :: $m:ident),* $(,)?) => {
        &[$((stringify!($m), $p::$m::FIELDS, $p::$m::SIZE)),*]
    };
}

/// A selection of layouts (all those with fields of every kind).
const LAYOUTS: &[Layout] = layouts!(
    cmds::query_hca_cap_in,
    cmds::init_hca_in,
    cmds::teardown_hca_out,
    cmds::query_pages_out,
    cmds::manage_pages_in,
    cmds::query_issi_out,
    cmds::create_mkey_in,
    cmds::create_eq_in,
    cmds::create_cq_in,
    cmds::create_qp_in,
    cmds::create_qp_out,
    cmds::rst2init_qp_in,
    cmds::sqerr2rts_qp_in,
    cmds::query_hca_vport_context_out,
    cmds::query_qp_out,
    cmds::query_vport_state_out,
    cmds::query_hca_vport_gid_in,
    cmds::set_roce_address_in,
    cmds::modify_nic_vport_context_in,
    cmds::query_special_contexts_out,
    ctx::cmd_hca_cap,
    ctx::cqc,
    ctx::eqc,
    ctx::qpc,
    ctx::ads,
    ctx::mkc,
    ctx::nic_vport_context,
    ctx::roce_addr_layout,
    ctx::atomic_caps,
    ctx::hca_vport_context,
);

fn bit(buf: &[u8], i: u32) -> u8 {
    (buf[(i / 8) as usize] >> (7 - i % 8)) & 1
}

/// Asserts that `a` and `b` differ only inside `f`.
fn only_field_changed(a: &[u8], b: &[u8], f: Field) -> Result<(), TestCaseError> {
    for i in 0..(a.len() as u32 * 8) {
        if i < f.bit_off || i >= f.bit_off + f.width {
            prop_assert_eq!(bit(a, i), bit(b, i), "bit {} outside the field changed", i);
        }
    }
    Ok(())
}

fn pick(layout: usize, field: usize) -> (usize, Field) {
    let (_, fields, size) = LAYOUTS[layout % LAYOUTS.len()];
    if fields.is_empty() {
        return (size, Field::dw(0, 31, 0));
    }
    (size, fields[field % fields.len()].1)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// set then get returns the (masked) value, and no bit outside the field moves.
    #[test]
    fn field_round_trip(layout in 0usize..64, field in 0usize..256, value: u64, fill: u8) {
        let (size, f) = pick(layout, field);
        prop_assume!(f.width != 0);
        let mut buf = vec![fill; size.max(f.end())];
        let before = buf.clone();
        if f.width <= 32 && f.dword_bits().is_some() {
            let v = value as u32;
            prop_assert!(f.set(&mut buf, v));
            let mask = if f.width == 32 { u32::MAX } else { (1 << f.width) - 1 };
            prop_assert_eq!(f.get(&buf), v & mask);
        } else if f.width == 64 {
            prop_assert!(f.set64(&mut buf, value));
            prop_assert_eq!(f.get64(&buf), value);
        } else {
            let s = f.slice_mut(&mut buf).expect("byte-aligned wide field");
            for (i, b) in s.iter_mut().enumerate() {
                *b = (value >> (i % 8 * 8)) as u8;
            }
            let s = f.slice(&buf).unwrap();
            prop_assert_eq!(s.len() * 8, f.width as usize);
        }
        only_field_changed(&before, &buf, f)?;
    }

    /// Embedded-context fields moved with `.at()` land at base + offset and stay isolated.
    #[test]
    fn embedded_field(field in 0usize..256, value: u32) {
        let fields = ctx::qpc::FIELDS;
        let f = fields[field % fields.len()].1;
        prop_assume!(f.dword_bits().is_some());
        let base = cmds::create_qp_in::QPC.byte_off();
        let g = f.at(base);
        let mut msg = vec![0u8; cmds::create_qp_in::SIZE];
        g.set(&mut msg, value);
        prop_assert_eq!(f.get(&msg[base..base + ctx::qpc::SIZE]), g.get(&msg));
        only_field_changed(&[0u8; cmds::create_qp_in::SIZE], &msg, g)?;
    }

    /// Byte images round-trip and match the field offsets.
    #[test]
    fn struct_images(bytes in proptest::collection::vec(any::<u8>(), 576)) {
        let b64: [u8; 64] = bytes[..64].try_into().unwrap();
        prop_assert_eq!(Cqe64::from_bytes(&b64).to_bytes(), b64);
        prop_assert_eq!(ErrCqe::from_bytes(&b64).to_bytes(), b64);
        prop_assert_eq!(Eqe::from_bytes(&b64).to_bytes(), b64);
        prop_assert_eq!(CmdLayout::from_bytes(&b64).to_bytes(), b64);
        let b576: [u8; 576] = bytes[..].try_into().unwrap();
        prop_assert_eq!(MailboxBlock::from_bytes(&b576).to_bytes(), b576);
        let b48: [u8; 48] = bytes[..48].try_into().unwrap();
        prop_assert_eq!(DatagramSeg::from_bytes(&b48).to_bytes(), b48);
        let b16: [u8; 16] = bytes[..16].try_into().unwrap();
        prop_assert_eq!(CtrlSeg::from_bytes(&b16).to_bytes(), b16);
        prop_assert_eq!(DataSeg::from_bytes(&b16).to_bytes(), b16);

        // Named fields read the big-endian bytes at the offsets of
        // `docs/mlx5.md#cqe-layout`.
        let c = Cqe64::from_bytes(&b64);
        let be32 = |o: usize| u32::from_be_bytes(b64[o..o + 4].try_into().unwrap());
        prop_assert_eq!(c.byte_cnt.get(), be32(0x2c));
        prop_assert_eq!(c.sop_drop_qpn.get(), be32(0x38));
        prop_assert_eq!(c.flags_rqpn.get(), be32(0x18));
        prop_assert_eq!(c.timestamp.get(), u64::from_be_bytes(b64[0x30..0x38].try_into().unwrap()));
        prop_assert_eq!(c.wqe_counter.get(), u16::from_be_bytes([b64[0x3c], b64[0x3d]]));
        prop_assert_eq!(c.op_own, b64[0x3f]);
        let e = CmdLayout::from_bytes(&b64);
        prop_assert_eq!(e.inlen.get(), be32(0x4));
        prop_assert_eq!(e.outlen.get(), be32(0x38));
        prop_assert_eq!(e.status_own, b64[0x3f]);
        let mb = MailboxBlock::from_bytes(&b576);
        prop_assert_eq!(mb.next.get(), u64::from_be_bytes(b576[0x230..0x238].try_into().unwrap()));
        prop_assert_eq!(mb.block_num.get(), u32::from_be_bytes(b576[0x238..0x23c].try_into().unwrap()));
        prop_assert_eq!(mb.token, b576[0x23d]);
        // read_from / write_to bounds.
        prop_assert!(Cqe64::read_from(&bytes[..63]).is_none());
        prop_assert_eq!(Cqe64::read_from(&bytes).unwrap(), c);
        let mut short = [0u8; 10];
        prop_assert!(!c.write_to(&mut short));
    }

    /// A block whose sig is set to `signature()` (computed with sig = 0) XORs to 0xff.
    #[test]
    fn signatures(bytes in proptest::collection::vec(any::<u8>(), 576)) {
        let xor = |b: &[u8]| b.iter().fold(0u8, |a, x| a ^ x);
        // Command entry.
        let mut e: [u8; 64] = bytes[..64].try_into().unwrap();
        e[cmd::SIG_OFFSET] = 0;
        e[cmd::SIG_OFFSET] = cmd::signature(&e);
        prop_assert_eq!(xor(&e), 0xff);
        // Mailbox: ctrl_sig first, then sig over everything before it.
        let mut m: [u8; 576] = bytes[..].try_into().unwrap();
        m[cmd::MAILBOX_CTRL_SIG_OFFSET] = cmd::signature(&m[cmd::MAILBOX_CTRL_SIG_RANGE]);
        m[cmd::MAILBOX_SIG_OFFSET] = cmd::signature(&m[cmd::MAILBOX_SIG_RANGE]);
        prop_assert_eq!(xor(&m[0x200..0x23f]), 0xff);
        prop_assert_eq!(xor(&m), 0xff);
    }

    /// mailbox_count agrees with ceil((len - 16) / 512).
    #[test]
    fn mailbox_count(len in 0usize..100_000) {
        let n = cmd::mailbox_count(len);
        if len <= 16 {
            prop_assert_eq!(n, 0);
        } else {
            prop_assert!(n * 512 >= len - 16);
            prop_assert!((n - 1) * 512 < len - 16);
        }
    }
}

#[test]
fn every_layout_is_listed_once() {
    let mut names: Vec<_> = LAYOUTS.iter().map(|l| l.0).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), LAYOUTS.len());
}

//! Layout tests: every firmware-interface type and field against reference positions written
//! down independently of the crate's constants, from the PRM layouts of Linux's
//! `include/linux/mlx5/mlx5_ifc.h` (bit offsets converted to byte offsets and `dw@X [hi:lo]`,
//! `docs/mlx5.md#conventions`) and the ring-entry structs of `device.h` and `qp.h`.
//!
//! * `tables.rs` checks every row of every transcribed layout table (it was generated once from
//!   the transcription and is now kept by hand); [`EXTRA`] and the tests below add the layouts
//!   that `docs/mlx5.md` gives in prose.
//! * `structs.rs`: sizes and field offsets of the `#[repr(C)]` structs, and constant values.
//! * `ifc.rs`: layouts the spec leaves open, checked against Linux `mlx5_ifc.h` / `lib/tout.c`.
//! * `props.rs`: property tests (field round trips, isolation, byte images, signatures).
//! * `efa.rs`: the EFA contract (little-endian) against `docs/efa.md`.

use firmware_interface::Field;

mod efa;
mod ifc;
mod props;
mod prose;
mod rmp;
mod srq;
mod structs;
mod tables;

/// Expected position of a field, in the notation of `docs/mlx5.md#conventions`.
#[derive(Clone, Copy, Debug)]
pub enum Exp {
    /// "dw@X [hi:lo]".
    Dw(usize, u32, u32),
    /// "bytes A..B" (inclusive end).
    Bytes(usize, usize),
    /// "struct x (N bytes)".
    Struct(usize),
    /// "array of ... (flexible)".
    Flex,
}

/// A reference row: (PRM name, field, byte off, position, width in bits).
pub type Row = (&'static str, Field, usize, Exp, u32);

/// Fields the crate adds to a reference table, from `docs/mlx5.md#command-layouts` and
/// `docs/mlx5.md#address-path` (module, row).
pub const EXTRA: &[(&str, Row)] = &[
    // CREATE_EQ: the event mask is 4 × BE64 from 0x58; word 0 is at 0x58.
    (
        "create_eq_in",
        (
            "event_bitmask_0",
            firmware_interface::cmds::create_eq_in::EVENT_BITMASK_0,
            0x58,
            Exp::Bytes(0x58, 0x5f),
            64,
        ),
    ),
    // MODIFY_NIC_VPORT_CONTEXT: field select at 0xc, bit 1 = roce_en, bit 3 = permanent_address.
    (
        "modify_nic_vport_context_in",
        (
            "field_select_roce_en",
            firmware_interface::cmds::modify_nic_vport_context_in::FIELD_SELECT_ROCE_EN,
            0xf,
            Exp::Dw(0xc, 1, 1),
            1,
        ),
    ),
    (
        "modify_nic_vport_context_in",
        (
            "field_select_permanent_address",
            firmware_interface::cmds::modify_nic_vport_context_in::FIELD_SELECT_PERMANENT_ADDRESS,
            0xf,
            Exp::Dw(0xc, 3, 3),
            1,
        ),
    ),
    // QUERY_HCA_VPORT_GID output: the GID count at 0xc, the 16-byte GIDs from 0x10.
    (
        "query_hca_vport_gid_out",
        (
            "gid",
            firmware_interface::cmds::query_hca_vport_gid_out::GID,
            0x10,
            Exp::Flex,
            0,
        ),
    ),
    // The address path's destination MAC (rmac_47_32 + rmac_31_0): 6 bytes from ads 0x26.
    (
        "ads",
        (
            "rmac",
            firmware_interface::ctx::ads::RMAC,
            0x26,
            Exp::Bytes(0x26, 0x2b),
            48,
        ),
    ),
];

/// Checks one layout: every row's position, that the rows cover every field of the module (and
/// nothing else), the size, and that every fixed field lies inside it.
pub fn check(name: &str, fields: &[(&str, Field)], size: usize, spec_size: usize, rows: &[Row]) {
    assert_eq!(size, spec_size, "{name}: SIZE");
    let extra: Vec<Row> = EXTRA
        .iter()
        .filter(|(m, _)| *m == name)
        .map(|(_, r)| *r)
        .collect();
    for &(field, f, off, exp, width) in rows.iter().chain(extra.iter()) {
        let ctx = format!("{name}.{field}");
        assert_eq!(f.byte_off(), off, "{ctx}: byte off");
        assert_eq!(f.width, width, "{ctx}: width");
        match exp {
            Exp::Dw(dw, hi, lo) => {
                assert_eq!(f.dword_bits(), Some((dw, hi, lo)), "{ctx}: dword bits");
                assert_eq!(hi - lo + 1, width, "{ctx}: reference row width");
            }
            Exp::Bytes(a, b) => {
                assert_eq!(f.bit_off, a as u32 * 8, "{ctx}: first byte");
                assert_eq!(f.end(), b + 1, "{ctx}: last byte");
                assert_eq!(
                    ((b + 1 - a) * 8) as u32,
                    width,
                    "{ctx}: reference row width"
                );
                if width == 32 {
                    assert_eq!(f.dword_bits(), Some((a, 31, 0)), "{ctx}: dword");
                }
            }
            Exp::Struct(len) => {
                assert_eq!(f.bit_off, off as u32 * 8, "{ctx}: struct start");
                assert_eq!(f.width as usize, len * 8, "{ctx}: struct size");
            }
            Exp::Flex => {
                assert_eq!(f.bit_off, off as u32 * 8, "{ctx}: array start");
                assert_eq!(f.width, 0, "{ctx}: flexible array width");
            }
        }
    }
    // Coverage: every module field is a reference row (header rows come from mbox_in/out).
    for &(fname, f) in fields {
        let hit = rows
            .iter()
            .chain(extra.iter())
            .find(|r| r.0.to_uppercase() == fname);
        let Some(r) = hit else {
            panic!("{name}.{fname}: field not in the reference table");
        };
        assert_eq!(r.1, f, "{name}.{fname}: row names another field");
        if f.width != 0 {
            assert!(f.end() <= size, "{name}.{fname}: beyond SIZE");
        } else {
            assert!(
                f.byte_off() >= size,
                "{name}.{fname}: flexible array inside SIZE"
            );
        }
    }
    let non_header = rows
        .iter()
        .filter(|r| !["opcode", "uid", "op_mod", "status", "syndrome"].contains(&r.0))
        .count()
        + extra.len();
    // Context tables have no header rows but may have a field named `status` (cqc, eqc).
    assert!(
        fields.len() == non_header || fields.len() == rows.len() + extra.len(),
        "{name}: {} fields vs {} reference rows",
        fields.len(),
        non_header
    );
}

//! Layouts `docs/mlx5.md` gives in prose rather than as a table (numbers typed from that text).

use super::{Exp::*, check};
use firmware_interface::{Field, cmds, ctx};

macro_rules! header_only {
    ($($m:ident),* $(,)?) => {
        #[test]
        fn header_only_layouts_are_16_bytes() {
            $( check(stringify!($m), cmds::$m::FIELDS, cmds::$m::SIZE, 16, &[]); )*
        }
    };
}

// The ALLOC inputs and NOP are the 16-byte header alone (`docs/mlx5.md#command-layouts`); the
// remaining outputs are the 16-byte output header only.
header_only!(
    set_hca_cap_out,
    init_hca_out,
    enable_hca_out,
    disable_hca_out,
    query_issi_in,
    set_issi_out,
    destroy_mkey_out,
    destroy_eq_out,
    destroy_cq_out,
    destroy_qp_out,
    qp_2err_out,
    qp_2rst_out,
    alloc_pd_in,
    dealloc_pd_out,
    alloc_uar_in,
    dealloc_uar_out,
    alloc_transport_domain_in,
    dealloc_transport_domain_out,
    nop_in,
    nop_out,
    query_special_contexts_in,
    modify_nic_vport_context_out,
    set_roce_address_out,
);

#[test]
fn modify_qp_layouts() {
    // "All four share one layout ... (total 272 bytes). The outputs are 16 bytes (ece at 0xc)."
    use cmds::modify_qp_out as m;
    check(
        "modify_qp_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[("ece", m::ECE, 0xc, Bytes(0xc, 0xf), 32)],
    );
    assert_eq!(cmds::modify_qp_in::SIZE, 272);
    assert_eq!(cmds::init2rtr_qp_in::QPC, cmds::rst2init_qp_in::QPC);
    assert_eq!(cmds::rtr2rts_qp_in::OPT_PARAM_MASK, Field::bytes(0x10, 4));
    assert_eq!(cmds::rts2rts_qp_in::QPN, Field::dw(0x8, 23, 0));
}

#[test]
fn query_nic_vport_context_out() {
    // "output = 16-byte header + 256-byte nic_vport_context at 0x10"
    use cmds::query_nic_vport_context_out as m;
    check(
        "query_nic_vport_context_out",
        m::FIELDS,
        m::SIZE,
        0x110,
        &[(
            "nic_vport_context",
            m::NIC_VPORT_CONTEXT,
            0x10,
            Struct(256),
            2048,
        )],
    );
}

#[test]
fn roce_address_queries() {
    // "QUERY_ROCE_ADDRESS (0x760) returns the same layout"; index as in SET_ROCE_ADDRESS.
    use cmds::{query_roce_address_in as i, query_roce_address_out as o};
    check(
        "query_roce_address_in",
        i::FIELDS,
        i::SIZE,
        16,
        &[
            (
                "roce_address_index",
                i::ROCE_ADDRESS_INDEX,
                0x8,
                Dw(0x8, 31, 16),
                16,
            ),
            ("vhca_port_num", i::VHCA_PORT_NUM, 0xb, Dw(0x8, 3, 0), 4),
        ],
    );
    check(
        "query_roce_address_out",
        o::FIELDS,
        o::SIZE,
        48,
        &[("roce_address", o::ROCE_ADDRESS, 0x10, Struct(32), 256)],
    );
}

#[test]
fn access_register_out() {
    // "register data from 0x10 (in and out)"
    use cmds::access_register_out as m;
    check(
        "access_register_out",
        m::FIELDS,
        m::SIZE,
        16,
        &[("register_data", m::REGISTER_DATA, 0x10, Flex, 0)],
    );
}

#[test]
fn nic_vport_context() {
    // "roce_en = bit 0 of byte 0x3, mtu at 0x26 (16 bits), system_image_guid 0x28, port_guid
    // 0x30, node_guid 0x38, permanent_address (8-byte mac_address_layout) at 0xf4, whose MAC
    // bytes are at 0xf6..0xfb."
    use ctx::nic_vport_context as c;
    check(
        "nic_vport_context",
        c::FIELDS,
        c::SIZE,
        256,
        &[
            ("roce_en", c::ROCE_EN, 0x3, Dw(0x0, 0, 0), 1),
            ("mtu", c::MTU, 0x26, Dw(0x24, 15, 0), 16),
            (
                "system_image_guid",
                c::SYSTEM_IMAGE_GUID,
                0x28,
                Bytes(0x28, 0x2f),
                64,
            ),
            ("port_guid", c::PORT_GUID, 0x30, Bytes(0x30, 0x37), 64),
            ("node_guid", c::NODE_GUID, 0x38, Bytes(0x38, 0x3f), 64),
            (
                "permanent_address",
                c::PERMANENT_ADDRESS,
                0xf4,
                Bytes(0xf4, 0xfb),
                64,
            ),
            (
                "permanent_mac",
                c::PERMANENT_MAC,
                0xf6,
                Bytes(0xf6, 0xfb),
                48,
            ),
        ],
    );
    // "⇒ permanent MAC = output bytes 0x106..0x10b"
    let mac = c::PERMANENT_MAC.at(cmds::query_nic_vport_context_out::NIC_VPORT_CONTEXT.byte_off());
    assert_eq!((mac.byte_off(), mac.end()), (0x106, 0x10c));
    // "context byte 0x3 bit 0 ⇒ message byte 0x103 bit 0"
    let en = c::ROCE_EN.at(cmds::modify_nic_vport_context_in::NIC_VPORT_CONTEXT.byte_off());
    let mut buf = [0u8; cmds::modify_nic_vport_context_in::SIZE];
    en.set(&mut buf, 1);
    assert_eq!(buf[0x103], 1);
    assert_eq!(buf.iter().map(|&b| b as u32).sum::<u32>(), 1);
}

#[test]
fn roce_cap() {
    // `mlx5_ifc.h roce_cap_bits`: sw_r_roce_src_udp_port dw@0x0 [27], qp_ts_format dw@0x0
    // [1:0], l3_type dw@0x10 [19:16], roce_version dw@0x10 [7:0], r_roce_dest_udp_port dw@0x14
    // [15:0], r_roce_max_src_udp_port dw@0x18 [31:16], r_roce_min_src_udp_port dw@0x18 [15:0],
    // roce_address_table_size dw@0x1c [15:0].
    use ctx::roce_cap as c;
    check(
        "roce_cap",
        c::FIELDS,
        c::SIZE,
        256,
        &[
            (
                "sw_r_roce_src_udp_port",
                c::SW_R_ROCE_SRC_UDP_PORT,
                0x0,
                Dw(0x0, 27, 27),
                1,
            ),
            ("qp_ts_format", c::QP_TS_FORMAT, 0x3, Dw(0x0, 1, 0), 2),
            ("l3_type", c::L3_TYPE, 0x11, Dw(0x10, 19, 16), 4),
            ("roce_version", c::ROCE_VERSION, 0x13, Dw(0x10, 7, 0), 8),
            (
                "r_roce_dest_udp_port",
                c::R_ROCE_DEST_UDP_PORT,
                0x16,
                Dw(0x14, 15, 0),
                16,
            ),
            (
                "r_roce_max_src_udp_port",
                c::R_ROCE_MAX_SRC_UDP_PORT,
                0x18,
                Dw(0x18, 31, 16),
                16,
            ),
            (
                "r_roce_min_src_udp_port",
                c::R_ROCE_MIN_SRC_UDP_PORT,
                0x1a,
                Dw(0x18, 15, 0),
                16,
            ),
            (
                "roce_address_table_size",
                c::ROCE_ADDRESS_TABLE_SIZE,
                0x1e,
                Dw(0x1c, 15, 0),
                16,
            ),
        ],
    );
}

#[test]
fn query_adapter_param_block() {
    // "ieee_vendor_id at block byte 0x19 [23:0], vsd_vendor_id at 0x1e [15:0], vsd (208 bytes)
    // at 0x20, vsd_contd_psid (16 bytes PSID) at 0xf0"
    use ctx::query_adapter_param_block as c;
    check(
        "query_adapter_param_block",
        c::FIELDS,
        c::SIZE,
        256,
        &[
            (
                "ieee_vendor_id",
                c::IEEE_VENDOR_ID,
                0x19,
                Dw(0x18, 23, 0),
                24,
            ),
            ("vsd_vendor_id", c::VSD_VENDOR_ID, 0x1e, Dw(0x1c, 15, 0), 16),
            ("vsd", c::VSD, 0x20, Bytes(0x20, 0xef), 1664),
            (
                "vsd_contd_psid",
                c::VSD_CONTD_PSID,
                0xf0,
                Bytes(0xf0, 0xff),
                128,
            ),
        ],
    );
}

#[test]
fn host_endianness_reg() {
    // "16-byte register whose byte 0 (he) = 0x00 for a little-endian host, 0x80 for big-endian"
    use ctx::host_endianness_reg as c;
    check(
        "host_endianness_reg",
        c::FIELDS,
        c::SIZE,
        16,
        &[("he", c::HE, 0x0, Bytes(0x0, 0x0), 8)],
    );
    assert_eq!((c::HE_LITTLE, c::HE_BIG), (0x00, 0x80));
}

#[test]
fn embedded_context_positions() {
    // The primary path is at qpc 0x18 (command 0x30), the secondary at qpc 0x44 (command 0x5c);
    // the destination MAC's 6 bytes at ads 0x26 are qpc 0x3e, command 0x56.
    let qpc = cmds::create_qp_in::QPC.byte_off();
    assert_eq!(qpc, 0x18);
    assert_eq!(ctx::qpc::PRIMARY_ADDRESS_PATH.at(qpc).byte_off(), 0x30);
    assert_eq!(ctx::qpc::SECONDARY_ADDRESS_PATH.at(qpc).byte_off(), 0x5c);
    let ads = ctx::qpc::PRIMARY_ADDRESS_PATH.byte_off();
    assert_eq!(ctx::ads::RMAC.at(ads).byte_off(), 0x3e);
    assert_eq!(ctx::ads::RMAC.at(ads).at(qpc).byte_off(), 0x56);
    // Every embedded context fits its slot.
    assert_eq!(cmds::create_qp_in::QPC.width as usize, ctx::qpc::SIZE * 8);
    assert_eq!(cmds::query_qp_out::QPC.width as usize, ctx::qpc::SIZE * 8);
    assert_eq!(
        ctx::qpc::PRIMARY_ADDRESS_PATH.width as usize,
        ctx::ads::SIZE * 8
    );
    assert_eq!(
        cmds::create_cq_in::CQ_CONTEXT.width as usize,
        ctx::cqc::SIZE * 8
    );
    assert_eq!(
        cmds::create_eq_in::EQ_CONTEXT_ENTRY.width as usize,
        ctx::eqc::SIZE * 8
    );
    assert_eq!(
        cmds::create_mkey_in::MEMORY_KEY_MKEY_ENTRY.width as usize,
        ctx::mkc::SIZE * 8
    );
    assert_eq!(
        cmds::set_roce_address_in::ROCE_ADDRESS.width as usize,
        ctx::roce_addr_layout::SIZE * 8
    );
    assert_eq!(
        cmds::query_hca_cap_out::CAPABILITY.width as usize,
        ctx::CAP_BLOCK_SIZE * 8
    );
    assert_eq!(
        cmds::set_hca_cap_in::CAPABILITY.width as usize,
        ctx::CAP_BLOCK_SIZE * 8
    );
    // Capability positions are relative to the block at 0x10 of the QUERY_HCA_CAP output.
    let cap = cmds::query_hca_cap_out::CAPABILITY.byte_off();
    assert_eq!(
        ctx::cmd_hca_cap::PORT_TYPE.at(cap).dword_bits(),
        Some((0x44, 9, 8))
    );
    // MTT entries (BE64) and the page lists of EQ, CQ and QP start at byte 0x110.
    for f in [
        cmds::create_mkey_in::KLM_PAS_MTT,
        cmds::create_cq_in::PAS,
        cmds::create_eq_in::PAS,
        cmds::create_qp_in::PAS,
    ] {
        assert_eq!(f.byte_off(), 0x110);
    }
    assert_eq!(cmds::manage_pages_in::PAS.byte_off(), 0x10);
}

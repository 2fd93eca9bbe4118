//! Per-command message layouts (`docs/mlx5.md#command-layouts`), one module per
//! `mlx5_ifc_<cmd>_in/out_bits` table.
//!
//! Offsets are from the start of the command message (byte 0 = opcode / status); the first 16
//! bytes travel inline in the command entry. The common header fields (opcode, uid, op_mod;
//! status, syndrome) are in [`crate::mbox_in`] / [`crate::mbox_out`] and are not repeated here.
//! Embedded contexts are byte fields; address their inner fields with
//! `ctx::qpc::PD.at(create_qp_in::QPC.byte_off())`.

// ---------------------------------------------------------------- QUERY_HCA_CAP / SET_HCA_CAP

layout! {
    /// QUERY_HCA_CAP (0x100) input.
    pub mod query_hca_cap_in: size 16;
    fields {
        /// Query another function.
        OTHER_FUNCTION = dw(0x8, 31, 31);
        /// Embedded-CPU VF function.
        EC_VF_FUNCTION = dw(0x8, 30, 30);
        /// Function id type.
        FUNCTION_ID_TYPE = dw(0x8, 28, 28);
        /// Function id (0 = this function).
        FUNCTION_ID = dw(0x8, 15, 0);
    }
}

layout! {
    /// QUERY_HCA_CAP (0x100) output: the 4096-byte capability block at 0x10.
    pub mod query_hca_cap_out: size 4112;
    fields {
        /// `hca_cap_union` (4096 bytes; `ctx::cmd_hca_cap` for the general page).
        CAPABILITY = bytes(0x10, 4096);
    }
}

layout! {
    /// SET_HCA_CAP (0x109) input: the modified 4096-byte capability block at 0x10.
    pub mod set_hca_cap_in: size 4112;
    fields {
        /// Set another function's caps.
        OTHER_FUNCTION = dw(0x8, 31, 31);
        /// Embedded-CPU VF function.
        EC_VF_FUNCTION = dw(0x8, 30, 30);
        /// Function id type.
        FUNCTION_ID_TYPE = dw(0x8, 28, 28);
        /// Function id (0 = this function).
        FUNCTION_ID = dw(0x8, 15, 0);
        /// `hca_cap_union` (4096 bytes).
        CAPABILITY = bytes(0x10, 4096);
    }
}

layout! {
    /// SET_HCA_CAP (0x109) output: header only.
    pub mod set_hca_cap_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- QUERY_ADAPTER

layout! {
    /// QUERY_ADAPTER (0x101) input: header only.
    pub mod query_adapter_in: size 16;
    fields {}
}

layout! {
    /// QUERY_ADAPTER (0x101) output.
    pub mod query_adapter_out: size 272;
    fields {
        /// `query_adapter_param_block` (256 bytes, `ctx::query_adapter_param_block`).
        QUERY_ADAPTER_STRUCT = bytes(0x10, 256);
    }
}

// ---------------------------------------------------------------- INIT_HCA / TEARDOWN_HCA

layout! {
    /// INIT_HCA (0x102) input (normally all-zero body).
    pub mod init_hca_in: size 32;
    fields {
        /// Software vHCA id.
        SW_VHCA_ID = dw(0xc, 29, 16);
        /// 128-bit software owner id (only when `cmd_hca_cap.sw_owner_id`).
        SW_OWNER_ID = bytes(0x10, 16);
    }
}

layout! {
    /// INIT_HCA (0x102) output: header only.
    pub mod init_hca_out: size 16;
    fields {}
}

layout! {
    /// TEARDOWN_HCA (0x103) input.
    pub mod teardown_hca_in: size 16;
    fields {
        /// 0 graceful, 1 force, 2 prepare fast teardown (`op_mod::TEARDOWN_*`).
        PROFILE = dw(0x8, 15, 0);
    }
}

layout! {
    /// TEARDOWN_HCA (0x103) output.
    pub mod teardown_hca_out: size 16;
    fields {
        /// 0 = success, 1 = FORCE_STATE_FAIL.
        STATE = dw(0xc, 0, 0);
    }
    /// `state`: teardown succeeded.
    pub const STATE_SUCCESS: u32 = 0;
    /// `state`: force/fast teardown failed.
    pub const STATE_FORCE_FAIL: u32 = 1;
}

// ---------------------------------------------------------------- ENABLE_HCA / DISABLE_HCA

layout! {
    /// ENABLE_HCA (0x104) input.
    pub mod enable_hca_in: size 16;
    fields {
        /// Embedded-CPU function.
        EMBEDDED_CPU_FUNCTION = dw(0x8, 31, 31);
        /// Function id (0 = this function).
        FUNCTION_ID = dw(0x8, 15, 0);
    }
}

layout! {
    /// ENABLE_HCA (0x104) output: header only (ifc.h declares 12 bytes; drivers pass 16).
    pub mod enable_hca_out: size 16;
    fields {}
}

layout! {
    /// DISABLE_HCA (0x105) input.
    pub mod disable_hca_in: size 16;
    fields {
        /// Embedded-CPU function.
        EMBEDDED_CPU_FUNCTION = dw(0x8, 31, 31);
        /// Function id (0 = this function).
        FUNCTION_ID = dw(0x8, 15, 0);
    }
}

layout! {
    /// DISABLE_HCA (0x105) output: header only.
    pub mod disable_hca_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- QUERY_PAGES / MANAGE_PAGES

layout! {
    /// QUERY_PAGES (0x107) input (op_mod: `op_mod::PAGES_*`).
    pub mod query_pages_in: size 16;
    fields {
        /// Embedded-CPU function.
        EMBEDDED_CPU_FUNCTION = dw(0x8, 31, 31);
        /// Function id.
        FUNCTION_ID = dw(0x8, 15, 0);
    }
}

layout! {
    /// QUERY_PAGES (0x107) output.
    pub mod query_pages_out: size 16;
    fields {
        /// Embedded-CPU function (echo in MANAGE_PAGES).
        EMBEDDED_CPU_FUNCTION = dw(0x8, 31, 31);
        /// Function id (echo in MANAGE_PAGES).
        FUNCTION_ID = dw(0x8, 15, 0);
        /// Number of 4 KB pages wanted; **signed** (read as `i32`; negative = give back).
        NUM_PAGES = bytes(0xc, 4);
    }
}

layout! {
    /// MANAGE_PAGES (0x108) input; GIVE carries BE64 page addresses from 0x10.
    pub mod manage_pages_in: size 16;
    fields {
        /// Embedded-CPU function.
        EMBEDDED_CPU_FUNCTION = dw(0x8, 31, 31);
        /// Function id.
        FUNCTION_ID = dw(0x8, 15, 0);
        /// Number of entries given (GIVE) or wanted (TAKE).
        INPUT_NUM_ENTRIES = bytes(0xc, 4);
        /// Flexible array of BE64 4 KB-page DMA addresses.
        PAS = bytes(0x10, 0);
    }
    /// Size of one PAS entry.
    pub const PAS_ENTRY_SIZE: usize = 8;
}

layout! {
    /// MANAGE_PAGES (0x108) output; TAKE returns BE64 page addresses from 0x10.
    pub mod manage_pages_out: size 16;
    fields {
        /// Number of addresses returned (TAKE).
        OUTPUT_NUM_ENTRIES = bytes(0x8, 4);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0x10, 0);
    }
    /// Size of one PAS entry.
    pub const PAS_ENTRY_SIZE: usize = 8;
}

// ---------------------------------------------------------------- QUERY_ISSI / SET_ISSI

layout! {
    /// QUERY_ISSI (0x10a) input: header only.
    pub mod query_issi_in: size 16;
    fields {}
}

layout! {
    /// QUERY_ISSI (0x10a) output.
    pub mod query_issi_out: size 112;
    fields {
        /// Current ISSI.
        CURRENT_ISSI = dw(0x8, 15, 0);
        /// Bit n set = ISSI n supported.
        SUPPORTED_ISSI_DW0 = bytes(0x6c, 4);
    }
}

layout! {
    /// SET_ISSI (0x10b) input.
    pub mod set_issi_in: size 16;
    fields {
        /// ISSI to use (1 when supported).
        CURRENT_ISSI = dw(0x8, 15, 0);
    }
}

layout! {
    /// SET_ISSI (0x10b) output: header only.
    pub mod set_issi_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- CREATE_MKEY / DESTROY_MKEY

layout! {
    /// CREATE_MKEY (0x200) input; MTT/KLM list from 0x110.
    pub mod create_mkey_in: size 0x110;
    fields {
        /// MTT entries carry access bits in their low bits.
        PG_ACCESS = dw(0xc, 31, 31);
        /// Translation comes from a umem.
        MKEY_UMEM_VALID = dw(0xc, 30, 30);
        /// Data-direct mkey.
        DATA_DIRECT = dw(0xc, 29, 29);
        /// `mkc` context (64 bytes, `ctx::mkc`).
        MEMORY_KEY_MKEY_ENTRY = bytes(0x10, 64);
        /// Number of 16-byte octwords of translations actually supplied.
        TRANSLATIONS_OCTWORD_ACTUAL_SIZE = bytes(0x60, 4);
        /// Flexible array of translation entries (BE64 MTTs).
        KLM_PAS_MTT = bytes(0x110, 0);
    }
    /// Size of one MTT entry.
    pub const MTT_ENTRY_SIZE: usize = 8;
}

layout! {
    /// CREATE_MKEY (0x200) output.
    pub mod create_mkey_out: size 16;
    fields {
        /// Mkey index; key = `mkey_index << 8 | mkc.mkey_7_0`.
        MKEY_INDEX = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_MKEY (0x202) input.
    pub mod destroy_mkey_in: size 16;
    fields {
        /// Mkey index (= key >> 8).
        MKEY_INDEX = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_MKEY (0x202) output: header only.
    pub mod destroy_mkey_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- CREATE_EQ / DESTROY_EQ

layout! {
    /// CREATE_EQ (0x301) input; PAS list from 0x110.
    pub mod create_eq_in: size 0x110;
    fields {
        /// `eqc` context (64 bytes, `ctx::eqc`).
        EQ_CONTEXT_ENTRY = bytes(0x10, 64);
        /// 4 × BE64 event masks; bit n of the first word enables event type n.
        EVENT_BITMASK = bytes(0x58, 32);
        /// First BE64 word of `event_bitmask` (event types 0..63), for `set64`.
        EVENT_BITMASK_0 = bytes(0x58, 8);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// CREATE_EQ (0x301) output.
    pub mod create_eq_out: size 16;
    fields {
        /// EQ number.
        EQ_NUMBER = dw(0x8, 7, 0);
    }
}

layout! {
    /// DESTROY_EQ (0x302) input.
    pub mod destroy_eq_in: size 16;
    fields {
        /// EQ number.
        EQ_NUMBER = dw(0x8, 7, 0);
    }
}

layout! {
    /// DESTROY_EQ (0x302) output: header only.
    pub mod destroy_eq_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- CREATE_CQ / DESTROY_CQ

layout! {
    /// CREATE_CQ (0x400) input; PAS list from 0x110.
    pub mod create_cq_in: size 0x110;
    fields {
        /// `cqc` context (64 bytes, `ctx::cqc`).
        CQ_CONTEXT = bytes(0x10, 64);
        /// Buffer comes from a umem.
        CQ_UMEM_VALID = dw(0x5c, 31, 31);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// CREATE_CQ (0x400) output.
    pub mod create_cq_out: size 16;
    fields {
        /// CQ number.
        CQN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_CQ (0x401) input.
    pub mod destroy_cq_in: size 16;
    fields {
        /// CQ number.
        CQN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_CQ (0x401) output: header only.
    pub mod destroy_cq_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- CREATE_SRQ / DESTROY_SRQ

layout! {
    /// CREATE_SRQ (0x700) input; PAS list from 0x110.
    pub mod create_srq_in: size 0x110;
    fields {
        /// `srqc` context (64 bytes, `ctx::srqc`).
        SRQ_CONTEXT_ENTRY = bytes(0x10, 64);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// CREATE_SRQ (0x700) output.
    pub mod create_srq_out: size 16;
    fields {
        /// SRQ number.
        SRQN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_SRQ (0x701) input.
    pub mod destroy_srq_in: size 16;
    fields {
        /// SRQ number.
        SRQN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_SRQ (0x701) output: header only.
    pub mod destroy_srq_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- RMP (the SRQ of ISSI 1)

layout! {
    /// CREATE_RMP (0x90c) input; the RMP's PAS list follows its `wq` (from 0x110).
    pub mod create_rmp_in: size 0x110;
    fields {
        /// `rmpc` context (240 bytes, `ctx::rmpc`).
        CTX = bytes(0x20, 0xf0);
        /// Flexible array of BE64 page addresses (`ctx.wq.pas`).
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// CREATE_RMP (0x90c) output.
    pub mod create_rmp_out: size 16;
    fields {
        /// RMP number.
        RMPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// MODIFY_RMP (0x90d) input: the fields the bitmask selects, from the context.
    pub mod modify_rmp_in: size 0x110;
    fields {
        /// State the RMP is in (`ctx::rmpc::STATE_*`).
        RMP_STATE = dw(0x8, 31, 28);
        /// RMP number.
        RMPN = dw(0x8, 23, 0);
        /// `rmp_bitmask.lwm`: modify `ctx.wq.lwm`.
        BITMASK_LWM = dw(0x14, 0, 0);
        /// `rmpc` context (240 bytes, `ctx::rmpc`).
        CTX = bytes(0x20, 0xf0);
    }
}

layout! {
    /// MODIFY_RMP (0x90d) output: header only.
    pub mod modify_rmp_out: size 16;
    fields {}
}

layout! {
    /// QUERY_RMP (0x90f) input.
    pub mod query_rmp_in: size 16;
    fields {
        /// RMP number.
        RMPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// QUERY_RMP (0x90f) output; the PAS list follows (from 0x110).
    pub mod query_rmp_out: size 0x110;
    fields {
        /// `rmpc` context (240 bytes, `ctx::rmpc`).
        RMP_CONTEXT = bytes(0x20, 0xf0);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// DESTROY_RMP (0x90e) input.
    pub mod destroy_rmp_in: size 16;
    fields {
        /// RMP number.
        RMPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_RMP (0x90e) output: header only.
    pub mod destroy_rmp_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- CREATE_QP / DESTROY_QP

layout! {
    /// CREATE_QP (0x500) input; PAS list from 0x110.
    pub mod create_qp_in: size 0x110;
    fields {
        /// Extended QPC present.
        QPC_EXT = dw(0x8, 31, 31);
        /// Requested QPN (special QPs).
        INPUT_QPN = dw(0x8, 23, 0);
        /// Optional-parameter mask (`ctx::qpc::optpar`).
        OPT_PARAM_MASK = bytes(0x10, 4);
        /// Enhanced connection establishment.
        ECE = bytes(0x14, 4);
        /// `qpc` context (232 bytes, `ctx::qpc`).
        QPC = bytes(0x18, 232);
        /// Offset in the WQ umem.
        WQ_UMEM_OFFSET = bytes(0x100, 8);
        /// WQ umem id.
        WQ_UMEM_ID = bytes(0x108, 4);
        /// WQ buffer comes from a umem.
        WQ_UMEM_VALID = dw(0x10c, 31, 31);
        /// Flexible array of BE64 page addresses (RQ first, then SQ).
        PAS = bytes(0x110, 0);
    }
}

layout! {
    /// CREATE_QP (0x500) output.
    pub mod create_qp_out: size 16;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
        /// Enhanced connection establishment.
        ECE = bytes(0xc, 4);
    }
}

layout! {
    /// DESTROY_QP (0x501) input.
    pub mod destroy_qp_in: size 16;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DESTROY_QP (0x501) output: header only.
    pub mod destroy_qp_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- QP transitions

layout! {
    /// RST2INIT_QP (0x502) input — the layout RST2INIT, INIT2INIT, INIT2RTR, RTR2RTS and RTS2RTS
    /// share (see [`modify_qp_in`]); SQERR2RTS and SQD2RTS have their own
    /// ([`sqerr2rts_qp_in`], [`sqd2rts_qp_in`]: no ECE word).
    pub mod rst2init_qp_in: size 272;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
        /// Optional-parameter mask (`ctx::qpc::optpar`).
        OPT_PARAM_MASK = bytes(0x10, 4);
        /// Enhanced connection establishment.
        ECE = bytes(0x14, 4);
        /// `qpc` context (232 bytes, `ctx::qpc`).
        QPC = bytes(0x18, 232);
    }
}

// RST2INIT, INIT2RTR, RTR2RTS and RTS2RTS share this layout in `mlx5_ifc.h`; Linux's
// `init2init_qp_in` has the same positions (its ECE word included).
pub use self::rst2init_qp_in as modify_qp_in;
pub use self::rst2init_qp_in as init2rtr_qp_in;
pub use self::rst2init_qp_in as rtr2rts_qp_in;
pub use self::rst2init_qp_in as rts2rts_qp_in;
pub use self::rst2init_qp_in as init2init_qp_in;

layout! {
    /// SQERR2RTS_QP (0x506) input (Linux `mlx5_ifc_sqerr2rts_qp_in_bits`): the modify-QP
    /// layout without an ECE word (bytes 0x14..0x17 are reserved).
    pub mod sqerr2rts_qp_in: size 272;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
        /// Optional-parameter mask (`ctx::qpc::optpar`).
        OPT_PARAM_MASK = bytes(0x10, 4);
        /// `qpc` context (232 bytes, `ctx::qpc`).
        QPC = bytes(0x18, 232);
    }
}

layout! {
    /// SQD_RTS_QP (0x50c) input (Linux `mlx5_ifc_sqd2rts_qp_in_bits`): as
    /// [`sqerr2rts_qp_in`], no ECE word.
    pub mod sqd2rts_qp_in: size 272;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
        /// Optional-parameter mask (`ctx::qpc::optpar`).
        OPT_PARAM_MASK = bytes(0x10, 4);
        /// `qpc` context (232 bytes, `ctx::qpc`).
        QPC = bytes(0x18, 232);
    }
}

layout! {
    /// Output of every modify-QP command (RST2INIT ... RTS2RTS).
    pub mod modify_qp_out: size 16;
    fields {
        /// Enhanced connection establishment.
        ECE = bytes(0xc, 4);
    }
}

layout! {
    /// 2ERR_QP (0x507) input.
    pub mod qp_2err_in: size 16;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// 2ERR_QP (0x507) output: header only.
    pub mod qp_2err_out: size 16;
    fields {}
}

layout! {
    /// 2RST_QP (0x50a) input.
    pub mod qp_2rst_in: size 16;
    fields {
        /// QP number.
        QPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// 2RST_QP (0x50a) output: header only.
    pub mod qp_2rst_out: size 16;
    fields {}
}

layout! {
    /// QUERY_QP (0x50b) input.
    pub mod query_qp_in: size 16;
    fields {
        /// Extended QPC wanted.
        QPC_EXT = dw(0x8, 31, 31);
        /// QP number.
        QPN = dw(0x8, 23, 0);
    }
}

layout! {
    /// QUERY_QP (0x50b) output.
    pub mod query_qp_out: size 464;
    fields {
        /// Optional-parameter mask.
        OPT_PARAM_MASK = bytes(0x10, 4);
        /// Enhanced connection establishment.
        ECE = bytes(0x14, 4);
        /// `qpc` context (232 bytes, `ctx::qpc`).
        QPC = bytes(0x18, 232);
        /// PAS list or extended QPC + PAS (192 bytes).
        QP_PAS_OR_QPC_EXT_AND_PAS = bytes(0x110, 192);
    }
}

// ---------------------------------------------------------------- PD / UAR / transport domain

layout! {
    /// ALLOC_PD (0x800) input: header only.
    pub mod alloc_pd_in: size 16;
    fields {}
}

layout! {
    /// ALLOC_PD (0x800) output.
    pub mod alloc_pd_out: size 16;
    fields {
        /// Protection domain number.
        PD = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_PD (0x801) input.
    pub mod dealloc_pd_in: size 16;
    fields {
        /// Protection domain number.
        PD = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_PD (0x801) output: header only.
    pub mod dealloc_pd_out: size 16;
    fields {}
}

layout! {
    /// ALLOC_UAR (0x802) input: header only.
    pub mod alloc_uar_in: size 16;
    fields {}
}

layout! {
    /// ALLOC_UAR (0x802) output.
    pub mod alloc_uar_out: size 16;
    fields {
        /// UAR index (page at BAR0 + uar × 4 KB).
        UAR = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_UAR (0x803) input.
    pub mod dealloc_uar_in: size 16;
    fields {
        /// UAR index.
        UAR = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_UAR (0x803) output: header only.
    pub mod dealloc_uar_out: size 16;
    fields {}
}

layout! {
    /// ALLOC_TRANSPORT_DOMAIN (0x816) input: header only.
    pub mod alloc_transport_domain_in: size 16;
    fields {}
}

layout! {
    /// ALLOC_TRANSPORT_DOMAIN (0x816) output.
    pub mod alloc_transport_domain_out: size 16;
    fields {
        /// Transport domain number.
        TRANSPORT_DOMAIN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_TRANSPORT_DOMAIN (0x817) input.
    pub mod dealloc_transport_domain_in: size 16;
    fields {
        /// Transport domain number.
        TRANSPORT_DOMAIN = dw(0x8, 23, 0);
    }
}

layout! {
    /// DEALLOC_TRANSPORT_DOMAIN (0x817) output: header only.
    pub mod dealloc_transport_domain_out: size 16;
    fields {}
}

// ---------------------------------------------------------------- NOP / special contexts

layout! {
    /// NOP (0x80d) input: header only.
    pub mod nop_in: size 16;
    fields {}
}

layout! {
    /// NOP (0x80d) output: header only.
    pub mod nop_out: size 16;
    fields {}
}

layout! {
    /// QUERY_SPECIAL_CONTEXTS (0x203) input: header only.
    pub mod query_special_contexts_in: size 16;
    fields {}
}

layout! {
    /// QUERY_SPECIAL_CONTEXTS (0x203) output.
    pub mod query_special_contexts_out: size 32;
    fields {
        /// Dump-fill mkey.
        DUMP_FILL_MKEY = bytes(0x8, 4);
        /// Reserved lkey (usable without registration when `qpc.rlky`).
        RESD_LKEY = bytes(0xc, 4);
        /// Null mkey.
        NULL_MKEY = bytes(0x10, 4);
        /// Terminate-scatter-list mkey.
        TERMINATE_SCATTER_LIST_MKEY = bytes(0x14, 4);
        /// Repeated mkey.
        REPEATED_MKEY = bytes(0x18, 4);
    }
}

// ---------------------------------------------------------------- ACCESS_REG

layout! {
    /// ACCESS_REG (0x805) input (op_mod `op_mod::ACCESS_REG_*`); register data from 0x10.
    pub mod access_register_in: size 16;
    fields {
        /// Register id (e.g. `op_mod::REG_HOST_ENDIANNESS`).
        REGISTER_ID = dw(0x8, 15, 0);
        /// Register argument.
        ARGUMENT = bytes(0xc, 4);
        /// Flexible register data.
        REGISTER_DATA = bytes(0x10, 0);
    }
}

layout! {
    /// ACCESS_REG (0x805) output; register data from 0x10.
    pub mod access_register_out: size 16;
    fields {
        /// Flexible register data.
        REGISTER_DATA = bytes(0x10, 0);
    }
}

// ---------------------------------------------------------------- port / address queries

layout! {
    /// QUERY_VPORT_STATE (0x750) input (op_mod `op_mod::VPORT_STATE_*`).
    pub mod query_vport_state_in: size 16;
    fields {
        /// Query another vport.
        OTHER_VPORT = dw(0x8, 31, 31);
        /// Vport number.
        VPORT_NUMBER = dw(0x8, 15, 0);
    }
}

layout! {
    /// QUERY_VPORT_STATE (0x750) output.
    pub mod query_vport_state_out: size 16;
    fields {
        /// Administrative state.
        ADMIN_STATE = dw(0xc, 7, 4);
        /// Operational state: 0 down, 1 up.
        STATE = dw(0xc, 3, 0);
    }
    /// `state`: down.
    pub const STATE_DOWN: u32 = 0;
    /// `state`: up.
    pub const STATE_UP: u32 = 1;
}

layout! {
    /// QUERY_NIC_VPORT_CONTEXT (0x754) input.
    pub mod query_nic_vport_context_in: size 16;
    fields {
        /// Query another vport.
        OTHER_VPORT = dw(0x8, 31, 31);
        /// Vport number.
        VPORT_NUMBER = dw(0x8, 15, 0);
        /// Allowed list type.
        ALLOWED_LIST_TYPE = dw(0xc, 26, 24);
    }
}

layout! {
    /// QUERY_NIC_VPORT_CONTEXT (0x754) output (only the fields
    /// `docs/mlx5.md#command-layouts` names).
    pub mod query_nic_vport_context_out: size 0x110;
    fields {
        /// `nic_vport_context` (256 bytes, `ctx::nic_vport_context`).
        NIC_VPORT_CONTEXT = bytes(0x10, 256);
    }
}

layout! {
    /// MODIFY_NIC_VPORT_CONTEXT (0x755) input.
    pub mod modify_nic_vport_context_in: size 512;
    fields {
        /// Modify another vport.
        OTHER_VPORT = dw(0x8, 31, 31);
        /// Vport number.
        VPORT_NUMBER = dw(0x8, 15, 0);
        /// `modify_nic_vport_field_select` (4 bytes): which context fields to change.
        FIELD_SELECT = bytes(0xc, 4);
        /// `field_select.roce_en` (bit 1 of the field_select word).
        FIELD_SELECT_ROCE_EN = dw(0xc, 1, 1);
        /// `field_select.permanent_address` (bit 3 of the field_select word).
        FIELD_SELECT_PERMANENT_ADDRESS = dw(0xc, 3, 3);
        /// `nic_vport_context` (256 bytes, `ctx::nic_vport_context`).
        NIC_VPORT_CONTEXT = bytes(0x100, 256);
    }
    /// `field_select` bit value: roce_en.
    pub const SELECT_ROCE_EN: u32 = 1 << 1;
    /// `field_select` bit value: permanent_address.
    pub const SELECT_PERMANENT_ADDRESS: u32 = 1 << 3;
}

layout! {
    /// MODIFY_NIC_VPORT_CONTEXT (0x755) output: header only.
    pub mod modify_nic_vport_context_out: size 16;
    fields {}
}

layout! {
    /// QUERY_HCA_VPORT_CONTEXT (0x762) input (Linux `mlx5_ifc_query_hca_vport_context_in_bits`:
    /// the positions of `query_hca_vport_gid_in`).
    pub mod query_hca_vport_context_in: size 16;
    fields {
        /// Query another vport.
        OTHER_VPORT = dw(0x8, 31, 31);
        /// Port number (only when num_ports = 2).
        PORT_NUM = dw(0x8, 19, 16);
        /// Vport number.
        VPORT_NUMBER = dw(0x8, 15, 0);
    }
}

layout! {
    /// QUERY_HCA_VPORT_CONTEXT (0x762) output: the 512-byte `ctx::hca_vport_context` at 0x10
    /// (528 bytes in all).
    pub mod query_hca_vport_context_out: size 0x210;
    fields {
        /// `hca_vport_context` (512 bytes).
        HCA_VPORT_CONTEXT = bytes(0x10, 512);
    }
}

layout! {
    /// QUERY_HCA_VPORT_GID (0x764) input.
    pub mod query_hca_vport_gid_in: size 16;
    fields {
        /// Query another vport.
        OTHER_VPORT = dw(0x8, 31, 31);
        /// Port number (only when num_ports = 2).
        PORT_NUM = dw(0x8, 19, 16);
        /// Vport number.
        VPORT_NUMBER = dw(0x8, 15, 0);
        /// GID index (0xffff = all).
        GID_INDEX = dw(0xc, 15, 0);
    }
    /// `gid_index` value requesting all GIDs.
    pub const GID_INDEX_ALL: u32 = 0xffff;
}

layout! {
    /// QUERY_HCA_VPORT_GID (0x764) output; 16-byte GIDs from 0x10.
    pub mod query_hca_vport_gid_out: size 16;
    fields {
        /// Number of GIDs returned.
        GIDS_NUM = dw(0xc, 31, 16);
        /// Flexible array of 16-byte GIDs.
        GID = bytes(0x10, 0);
    }
    /// Size of one GID.
    pub const GID_SIZE: usize = 16;
}

layout! {
    /// SET_ROCE_ADDRESS (0x761) input.
    pub mod set_roce_address_in: size 48;
    fields {
        /// GID table index.
        ROCE_ADDRESS_INDEX = dw(0x8, 31, 16);
        /// vHCA port number.
        VHCA_PORT_NUM = dw(0x8, 3, 0);
        /// `roce_addr_layout` (32 bytes, `ctx::roce_addr_layout`).
        ROCE_ADDRESS = bytes(0x10, 32);
    }
}

layout! {
    /// SET_ROCE_ADDRESS (0x761) output: header only.
    pub mod set_roce_address_out: size 16;
    fields {}
}

layout! {
    /// QUERY_ROCE_ADDRESS (0x760) input (index at the same place as SET_ROCE_ADDRESS).
    pub mod query_roce_address_in: size 16;
    fields {
        /// GID table index.
        ROCE_ADDRESS_INDEX = dw(0x8, 31, 16);
        /// vHCA port number.
        VHCA_PORT_NUM = dw(0x8, 3, 0);
    }
}

layout! {
    /// QUERY_ROCE_ADDRESS (0x760) output.
    pub mod query_roce_address_out: size 48;
    fields {
        /// `roce_addr_layout` (32 bytes, `ctx::roce_addr_layout`).
        ROCE_ADDRESS = bytes(0x10, 32);
    }
}

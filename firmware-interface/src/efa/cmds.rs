//! Admin command and response layouts (`docs/efa.md#admin-commands`), one module per
//! `efa_admin_*_cmd` / `efa_admin_*_resp`.
//!
//! Command offsets are from byte 0 of the 64-byte submission entry
//! ([`crate::efa::admin::AqEntry`]); response offsets from byte 0 of the 64-byte completion
//! entry ([`crate::efa::admin::AcqEntry`]). The common 4-byte command header (command id,
//! opcode, flags) and the 8-byte completion header are in those structs and not repeated.

// ---------------------------------------------------------------- QP

le_layout! {
    /// CREATE_QP (1) command.
    pub mod create_qp_cmd: size 64;
    fields {
        /// Protection domain.
        PD = u16(4);
        /// QP type ([`QP_TYPE_UD`], [`QP_TYPE_SRD`]).
        QP_TYPE = u8(6);
        /// The SQ is in virtual memory (`sq_virt`).
        SQ_VIRT = bits(7, 0, 0);
        /// The RQ is in virtual memory (`rq_virt`).
        RQ_VIRT = bits(7, 1, 1);
        /// Accept RDMA write with immediate that consumes no receive WR.
        UNSOLICITED_WRITE_RECV = bits(7, 2, 2);
        /// SQ ring DMA address (unused: the SQ is a low-latency queue in BAR2).
        SQ_BASE_ADDR = u64(8);
        /// RQ ring DMA address.
        RQ_BASE_ADDR = u64(16);
        /// CQ of send completions.
        SEND_CQ_IDX = u32(24);
        /// CQ of receive completions.
        RECV_CQ_IDX = u32(28);
        /// L_Key of a virtual SQ.
        SQ_L_KEY = u32(32);
        /// L_Key of a virtual RQ.
        RQ_L_KEY = u32(36);
        /// SQ ring size in bytes.
        SEND_QUEUE_RING_SIZE = u32(40);
        /// SQ depth in WQEs.
        SEND_QUEUE_DEPTH = u32(44);
        /// RQ ring size in bytes.
        RECV_QUEUE_RING_SIZE = u32(48);
        /// RQ depth in descriptors.
        RECV_QUEUE_DEPTH = u32(52);
        /// UAR the QP's doorbells belong to.
        UAR = u16(56);
        /// Service level.
        SL = u8(58);
    }
    /// QP type: unreliable datagram.
    pub const QP_TYPE_UD: u32 = 1;
    /// QP type: scalable reliable datagram.
    pub const QP_TYPE_SRD: u32 = 2;
}

le_layout! {
    /// CREATE_QP (1) response.
    pub mod create_qp_resp: size 32;
    fields {
        /// Opaque handle naming the QP in later commands.
        QP_HANDLE = u32(8);
        /// QP number (what peers address).
        QP_NUM = u16(12);
        /// Sub-CQ index of send completions.
        SEND_SUB_CQ_IDX = u16(16);
        /// Sub-CQ index of receive completions.
        RECV_SUB_CQ_IDX = u16(18);
        /// SQ doorbell offset in the doorbell BAR.
        SQ_DB_OFFSET = u32(20);
        /// RQ doorbell offset in the doorbell BAR.
        RQ_DB_OFFSET = u32(24);
        /// Offset of the SQ (low-latency queue) descriptors in the memory BAR.
        LLQ_DESCRIPTORS_OFFSET = u32(28);
    }
}

le_layout! {
    /// MODIFY_QP (2) command.
    pub mod modify_qp_cmd: size 32;
    fields {
        /// Which attributes to apply ([`MASK_QP_STATE`] ...).
        MODIFY_MASK = u32(4);
        /// The QP handle.
        QP_HANDLE = u32(8);
        /// New state ([`QP_STATE_RESET`] ...).
        QP_STATE = u32(12);
        /// The state the driver believes the QP is in.
        CUR_QP_STATE = u32(16);
        /// Q_Key.
        QKEY = u32(20);
        /// SQ packet sequence number.
        SQ_PSN = u32(24);
        /// Request an async event when the SQ drained.
        SQ_DRAINED_ASYNC_NOTIFY = u8(28);
        /// RNR retry count (SRD).
        RNR_RETRY = u8(29);
    }
    /// `modify_mask` bit: `qp_state` is valid.
    pub const MASK_QP_STATE: u32 = 1 << 0;
    /// `modify_mask` bit: `cur_qp_state` is valid.
    pub const MASK_CUR_QP_STATE: u32 = 1 << 1;
    /// `modify_mask` bit: `qkey` is valid.
    pub const MASK_QKEY: u32 = 1 << 2;
    /// `modify_mask` bit: `sq_psn` is valid.
    pub const MASK_SQ_PSN: u32 = 1 << 3;
    /// `modify_mask` bit: `sq_drained_async_notify` is valid.
    pub const MASK_SQ_DRAINED_ASYNC_NOTIFY: u32 = 1 << 4;
    /// `modify_mask` bit: `rnr_retry` is valid.
    pub const MASK_RNR_RETRY: u32 = 1 << 5;
    /// Every defined `modify_mask` bit.
    pub const MASK_ALL: u32 = 0x3f;
    /// QP state RESET.
    pub const QP_STATE_RESET: u32 = 0;
    /// QP state INIT.
    pub const QP_STATE_INIT: u32 = 1;
    /// QP state RTR.
    pub const QP_STATE_RTR: u32 = 2;
    /// QP state RTS.
    pub const QP_STATE_RTS: u32 = 3;
    /// QP state SQD.
    pub const QP_STATE_SQD: u32 = 4;
    /// QP state SQE.
    pub const QP_STATE_SQE: u32 = 5;
    /// QP state ERR.
    pub const QP_STATE_ERR: u32 = 6;
}

le_layout! {
    /// MODIFY_QP (2) response: the completion header only.
    pub mod modify_qp_resp: size 8;
    fields {}
}

le_layout! {
    /// QUERY_QP (3) command.
    pub mod query_qp_cmd: size 8;
    fields {
        /// The QP handle.
        QP_HANDLE = u32(4);
    }
}

le_layout! {
    /// QUERY_QP (3) response.
    pub mod query_qp_resp: size 24;
    fields {
        /// State (`modify_qp_cmd::QP_STATE_*`).
        QP_STATE = u32(8);
        /// Q_Key.
        QKEY = u32(12);
        /// SQ packet sequence number.
        SQ_PSN = u32(16);
        /// The SQ is draining.
        SQ_DRAINING = u8(20);
        /// RNR retry count.
        RNR_RETRY = u8(21);
    }
}

le_layout! {
    /// DESTROY_QP (4) command.
    pub mod destroy_qp_cmd: size 8;
    fields {
        /// The QP handle.
        QP_HANDLE = u32(4);
    }
}

// ---------------------------------------------------------------- AH

le_layout! {
    /// CREATE_AH (5) command.
    pub mod create_ah_cmd: size 24;
    fields {
        /// Destination GID (16 bytes, network order).
        DEST_ADDR = bytes(4, 16);
        /// Protection domain.
        PD = u16(20);
    }
}

le_layout! {
    /// CREATE_AH (5) response.
    pub mod create_ah_resp: size 16;
    fields {
        /// Address handle (what a TX WQE names).
        AH = u16(8);
    }
}

le_layout! {
    /// DESTROY_AH (6) command.
    pub mod destroy_ah_cmd: size 8;
    fields {
        /// Address handle.
        AH = u16(4);
        /// Protection domain it was created in.
        PD = u16(6);
    }
}

// ---------------------------------------------------------------- MR

le_layout! {
    /// REG_MR (7) command.
    pub mod reg_mr_cmd: size 64;
    fields {
        /// Protection domain.
        PD = u16(4);
        /// The page-list union: up to [`INLINE_PBL_ENTRIES`] page addresses inline
        /// (`inline_pbl_array`), or (submission flag `ctrl_data`) the control buffer naming
        /// the page list, whose three words follow.
        PBL = bytes(8, 32);
        /// Page-list control buffer: length in bytes (chunk 0's used length when indirect).
        PBL_LENGTH = u32(8);
        /// Page-list control buffer: DMA address bits 31:0.
        PBL_ADDR_LO = u32(12);
        /// Page-list control buffer: DMA address bits 63:32.
        PBL_ADDR_HI = u32(16);
        /// Region length in bytes.
        MR_LENGTH = u64(40);
        /// log2 of the page size.
        PHYS_PAGE_SIZE_SHIFT = bits(48, 4, 0);
        /// Physical-address mode (no page list).
        MEM_ADDR_PHY_MODE_EN = bits(48, 7, 7);
        /// Local write access.
        LOCAL_WRITE = bits(49, 0, 0);
        /// Remote write access.
        REMOTE_WRITE = bits(49, 1, 1);
        /// Remote read access.
        REMOTE_READ = bits(49, 2, 2);
        /// Number of pages in the page list.
        PAGE_NUM = u32(52);
        /// I/O virtual address of the region's first byte.
        IOVA = u64(56);
    }
    /// Byte offset of the page-list control buffer ([`crate::efa::admin::CtrlBuffInfo`]): it
    /// sits in the page-list union, not at the entry's generic control-buffer offset 4.
    pub const PBL_CTRL_OFF: usize = 8;
    /// Page addresses that fit inline.
    pub const INLINE_PBL_ENTRIES: usize = 4;
    /// The permissions byte.
    pub const PERMISSIONS: crate::field::LeField = LeField::u8(49);
    /// `permissions` bits this contract defines.
    pub const PERMISSIONS_MASK: u32 = 0x7;
}

le_layout! {
    /// REG_MR (7) response.
    pub mod reg_mr_resp: size 24;
    fields {
        /// Local key.
        L_KEY = u32(8);
        /// Remote key.
        R_KEY = u32(12);
        /// Which of the interconnect ids below are valid.
        VALIDITY = u8(16);
        /// Interconnect id of receives.
        RECV_IC_ID = u8(17);
        /// Interconnect id of RDMA reads.
        RDMA_READ_IC_ID = u8(18);
        /// Interconnect id of RDMA-write receives.
        RDMA_RECV_IC_ID = u8(19);
    }
}

le_layout! {
    /// DEREG_MR (8) command.
    pub mod dereg_mr_cmd: size 8;
    fields {
        /// Local key of the region.
        L_KEY = u32(4);
    }
}

le_layout! {
    /// ALLOC_MR (20) command (fast-registration MR; newer devices).
    pub mod alloc_mr_cmd: size 12;
    fields {
        /// Protection domain.
        PD = u16(4);
        /// Most pages the MR can map.
        MAX_PAGES = u32(8);
    }
}

le_layout! {
    /// ALLOC_MR (20) response.
    pub mod alloc_mr_resp: size 16;
    fields {
        /// Local key.
        L_KEY = u32(8);
        /// Remote key.
        R_KEY = u32(12);
    }
}

// ---------------------------------------------------------------- CQ

le_layout! {
    /// CREATE_CQ (9) command.
    pub mod create_cq_cmd: size 28;
    fields {
        /// Raise completion events through an EQ.
        INTERRUPT_MODE_ENABLED = bits(4, 5, 5);
        /// The ring is in virtual memory.
        VIRT = bits(4, 6, 6);
        /// Entry size in 4-byte words (4 or 8).
        CQ_ENTRY_SIZE_WORDS = bits(5, 4, 0);
        /// Write the source GID into extended RX completions (needs 8-word entries).
        SET_SRC_ADDR = bits(5, 5, 5);
        /// Depth of each sub-CQ in entries (a power of two).
        CQ_DEPTH = u16(6);
        /// EQ of completion events.
        EQN = u16(8);
        /// Ring DMA address bits 31:0.
        CQ_BA_LO = u32(12);
        /// Ring DMA address bits 63:32.
        CQ_BA_HI = u32(16);
        /// L_Key of a virtual ring.
        L_KEY = u32(20);
        /// Sub-CQs (must equal the queue attributes' `sub_cqs_per_cq`).
        NUM_SUB_CQS = u16(24);
        /// UAR the CQ's doorbell belongs to.
        UAR = u16(26);
    }
}

le_layout! {
    /// CREATE_CQ (9) response.
    pub mod create_cq_resp: size 20;
    fields {
        /// CQ index.
        CQ_IDX = u16(8);
        /// Depth the device allocated.
        CQ_ACTUAL_DEPTH = u16(10);
        /// CQ doorbell offset in the doorbell BAR.
        DB_OFFSET = u32(12);
        /// `db_offset` is valid.
        DB_VALID = bits(16, 0, 0);
    }
}

le_layout! {
    /// DESTROY_CQ (10) command.
    pub mod destroy_cq_cmd: size 8;
    fields {
        /// CQ index.
        CQ_IDX = u16(4);
    }
}

// ---------------------------------------------------------------- features

le_layout! {
    /// GET_FEATURE (11) / SET_FEATURE (12) command.
    pub mod feature_cmd: size 64;
    fields {
        /// The control buffer (12 bytes; HOST_INFO).
        CONTROL_BUFFER = bytes(4, 12);
        /// Feature id ([`crate::efa::feature::id`]).
        FEATURE_ID = u8(17);
        /// The SET_FEATURE data (44 bytes; a feature block at offset 0 of it).
        DATA = bytes(20, 44);
    }
    /// Byte offset of the SET_FEATURE data (add it to a feature block's field offsets).
    pub const DATA_OFF: usize = 20;
}

le_layout! {
    /// GET_FEATURE (11) response: a feature block in the 56 bytes from 0x8.
    pub mod get_feature_resp: size 64;
    fields {
        /// The feature block ([`crate::efa::feature`]).
        DATA = bytes(8, 56);
    }
    /// Byte offset of the feature block (add it to a feature block's field offsets).
    pub const DATA_OFF: usize = 8;
}

// ---------------------------------------------------------------- statistics

le_layout! {
    /// GET_STATS (13) command.
    pub mod get_stats_cmd: size 20;
    fields {
        /// Statistics type ([`TYPE_BASIC`] ...).
        TYPE = u8(16);
        /// Scope ([`SCOPE_ALL`], [`SCOPE_QUEUE`]).
        SCOPE = u8(17);
        /// Scope modifier (the queue).
        SCOPE_MODIFIER = u16(18);
    }
    /// BASIC: tx_bytes, tx_pkts, rx_bytes, rx_pkts, rx_drops (qkey_viol on newer devices).
    pub const TYPE_BASIC: u32 = 0;
    /// MESSAGES: send_bytes, send_wrs, recv_bytes, recv_wrs.
    pub const TYPE_MESSAGES: u32 = 1;
    /// RDMA_READ: read_wrs, read_bytes, read_wr_err, read_resp_bytes.
    pub const TYPE_RDMA_READ: u32 = 2;
    /// RDMA_WRITE: write_wrs, write_bytes, write_wr_err, write_recv_bytes.
    pub const TYPE_RDMA_WRITE: u32 = 3;
    /// NETWORK: retransmission and remote-health counters.
    pub const TYPE_NETWORK: u32 = 4;
    /// Scope: the whole device.
    pub const SCOPE_ALL: u32 = 0;
    /// Scope: one queue.
    pub const SCOPE_QUEUE: u32 = 1;
}

le_layout! {
    /// GET_STATS (13) response: u64 counters from 0x8, in the order of the statistics type.
    pub mod get_stats_resp: size 64;
    fields {
        /// The first counter.
        COUNTER_0 = u64(8);
    }
    /// Byte offset of counter `i` (at most [`MAX_COUNTERS`]).
    pub const fn counter(i: usize) -> crate::field::LeField {
        LeField::u64(8 + 8 * i)
    }
    /// Counters that fit the response.
    pub const MAX_COUNTERS: usize = 7;
}

// ---------------------------------------------------------------- PD, UAR

le_layout! {
    /// ALLOC_PD (14) response.
    pub mod alloc_pd_resp: size 12;
    fields {
        /// Protection domain.
        PD = u16(8);
    }
}

le_layout! {
    /// DEALLOC_PD (15) command.
    pub mod dealloc_pd_cmd: size 8;
    fields {
        /// Protection domain.
        PD = u16(4);
    }
}

le_layout! {
    /// ALLOC_UAR (16) response.
    pub mod alloc_uar_resp: size 12;
    fields {
        /// User access region.
        UAR = u16(8);
    }
}

le_layout! {
    /// DEALLOC_UAR (17) command.
    pub mod dealloc_uar_cmd: size 8;
    fields {
        /// User access region.
        UAR = u16(4);
    }
}

// ---------------------------------------------------------------- EQ

le_layout! {
    /// CREATE_EQ (18) command.
    pub mod create_eq_cmd: size 24;
    fields {
        /// Depth in entries (a power of two).
        DEPTH = u16(4);
        /// MSI-X vector.
        MSIX_VEC = u8(6);
        /// Entry size in 4-byte words (a driver sends 4).
        ENTRY_SIZE_WORDS = bits(7, 4, 0);
        /// Ring DMA address bits 31:0.
        BA_LO = u32(8);
        /// Ring DMA address bits 63:32.
        BA_HI = u32(12);
        /// Events to report; bit 0 completion events.
        EVENT_BITMASK = u32(16);
    }
    /// `event_bitmask` bit 0: completion events.
    pub const EVENT_COMPLETION: u32 = 1;
}

le_layout! {
    /// CREATE_EQ (18) response.
    pub mod create_eq_resp: size 12;
    fields {
        /// EQ number.
        EQN = u16(8);
    }
}

le_layout! {
    /// DESTROY_EQ (19) command.
    pub mod destroy_eq_cmd: size 8;
    fields {
        /// EQ number.
        EQN = u16(4);
    }
}

//! Capability pages and object contexts (`docs/mlx5.md#capabilities`,
//! `docs/mlx5.md#object-contexts`).
//!
//! Offsets are relative to the start of the context; combine with [`crate::Field::at`] and the
//! command field that embeds it, e.g.
//! `ctx::qpc::PD.at(cmds::create_qp_in::QPC.byte_off())`.

/// Size of the capability block returned by QUERY_HCA_CAP / sent by SET_HCA_CAP
/// (`hca_cap_union`).
pub const CAP_BLOCK_SIZE: usize = 4096;

layout! {
    /// General device capabilities (`cmd_hca_cap`, 256 bytes; cap_type GENERAL), at byte 0x10
    /// of QUERY_HCA_CAP output / SET_HCA_CAP input.
    pub mod cmd_hca_cap: size 256;
    fields {
        ABS_NATIVE_PORT_NUM = dw(0x0, 24, 24);
        /// GENERAL_2 capability page exists.
        HCA_CAP_2 = dw(0x4, 31, 31);
        /// This function's vHCA id.
        VHCA_ID = dw(0x4, 15, 0);
        /// log2 max WQEs per SRQ.
        LOG_MAX_SRQ_SZ = dw(0x10, 31, 24);
        /// log2 max WQEs per work queue.
        LOG_MAX_QP_SZ = dw(0x10, 23, 16);
        /// log2 max number of QPs.
        LOG_MAX_QP = dw(0x10, 4, 0);
        /// log2 max number of SRQs.
        LOG_MAX_SRQ = dw(0x14, 20, 16);
        MAX_SGL_FOR_OPTIMIZED_PERFORMANCE = dw(0x18, 31, 24);
        /// log2 max CQEs per CQ.
        LOG_MAX_CQ_SZ = dw(0x18, 23, 16);
        /// log2 max number of CQs.
        LOG_MAX_CQ = dw(0x18, 4, 0);
        /// log2 max EQEs per EQ.
        LOG_MAX_EQ_SZ = dw(0x1c, 31, 24);
        RELAXED_ORDERING_WRITE = dw(0x1c, 23, 23);
        /// log2 max number of mkeys.
        LOG_MAX_MKEY = dw(0x1c, 21, 16);
        /// Fast teardown supported (Linux position; rdma-core differs, see
        /// `docs/mlx5.md#where-the-sources-disagree`).
        FAST_TEARDOWN = dw(0x1c, 4, 4);
        /// log2 max number of EQs.
        LOG_MAX_EQ = dw(0x1c, 3, 0);
        /// Force teardown supported.
        FORCE_TEARDOWN = dw(0x20, 15, 15);
        LOG_MAX_KLM_LIST_SIZE = dw(0x20, 5, 0);
        /// Drivers set it when max allows.
        RELEASE_ALL_PAGES = dw(0x28, 26, 26);
        /// log2 max outstanding RDMA read/atomic as requester.
        LOG_MAX_RA_REQ_QP = dw(0x28, 21, 16);
        /// log2 max outstanding RDMA read/atomic as responder.
        LOG_MAX_RA_RES_QP = dw(0x28, 5, 0);
        CACHE_LINE_128BYTE = dw(0x2c, 27, 27);
        /// GID table size (encoded).
        GID_TABLE_SIZE = dw(0x2c, 15, 0);
        /// P_Key table size (encoded).
        PKEY_TABLE_SIZE = dw(0x30, 15, 0);
        VPORT_GROUP_MANAGER = dw(0x34, 31, 31);
        IB_VIRT = dw(0x34, 29, 29);
        LOCAL_CA_ACK_DELAY = dw(0x34, 20, 16);
        PORT_MODULE_EVENT = dw(0x34, 15, 15);
        /// 0 = InfiniBand, 1 = Ethernet ([`PORT_TYPE_IB`], [`PORT_TYPE_ETH`]).
        PORT_TYPE = dw(0x34, 9, 8);
        /// Number of physical ports.
        NUM_PORTS = dw(0x34, 7, 0);
        /// log2 max message size.
        LOG_MAX_MSG = dw(0x38, 28, 24);
        /// CQE version (0 or 1).
        CQE_VERSION = dw(0x3c, 3, 0);
        DRAIN_SIGERR = dw(0x40, 16, 16);
        /// Command checksums; drivers write 0 (off).
        CMDIF_CHECKSUM = dw(0x40, 15, 14);
        SHO = dw(0x40, 8, 8);
        DCT = dw(0x40, 5, 5);
        ETH_NET_OFFLOADS = dw(0x40, 3, 3);
        /// RoCE supported/enabled.
        ROCE = dw(0x40, 2, 2);
        /// Atomics supported.
        ATOMIC = dw(0x40, 1, 1);
        CQ_OI = dw(0x44, 31, 31);
        CQ_RESIZE = dw(0x44, 30, 30);
        CQ_MODERATION = dw(0x44, 29, 29);
        /// On-demand paging.
        PG = dw(0x44, 24, 24);
        /// XRC supported.
        XRC = dw(0x44, 3, 3);
        /// UD supported.
        UD = dw(0x44, 2, 2);
        /// UC supported.
        UC = dw(0x44, 1, 1);
        /// RC supported.
        RC = dw(0x44, 0, 0);
        /// 4 KB UARs supported.
        UAR_4K = dw(0x48, 31, 31);
        /// UAR area size code (semantics UNVERIFIED).
        UAR_SZ = dw(0x48, 21, 16);
        UMEM_UID_0 = dw(0x48, 13, 13);
        /// log2 FW page size (semantics UNVERIFIED).
        LOG_PG_SZ = dw(0x48, 7, 0);
        BF = dw(0x4c, 31, 31);
        DRIVER_VERSION = dw(0x4c, 30, 30);
        MKEY_BY_NAME = dw(0x4c, 25, 25);
        /// log2 BlueFlame register size in bytes.
        LOG_BF_REG_SIZE = dw(0x4c, 20, 16);
        /// Max send WQE size in bytes.
        MAX_WQE_SZ_SQ = dw(0x50, 15, 0);
        /// Max receive WQE size in bytes.
        MAX_WQE_SZ_RQ = dw(0x54, 15, 0);
        MAX_WQE_SZ_SQ_DC = dw(0x58, 15, 0);
        MAX_QP_MCG = dw(0x5c, 24, 0);
        LOG_MAX_MCG = dw(0x60, 7, 0);
        /// log2 max transport domains.
        LOG_MAX_TRANSPORT_DOMAIN = dw(0x64, 28, 24);
        RELAXED_ORDERING_READ = dw(0x64, 21, 21);
        /// log2 max number of PDs.
        LOG_MAX_PD = dw(0x64, 20, 16);
        /// log2 max XRC domains.
        LOG_MAX_XRCD = dw(0x64, 4, 0);
        LOG_MAX_RQ = dw(0x6c, 28, 24);
        LOG_MAX_SQ = dw(0x6c, 20, 16);
        LOG_MAX_TIR = dw(0x6c, 12, 8);
        LOG_MAX_TIS = dw(0x6c, 4, 0);
        LOG_MAX_RMP = dw(0x70, 28, 24);
        LOG_MAX_RQT = dw(0x70, 20, 16);
        ROCE_RW_SUPPORTED = dw(0x74, 30, 30);
        LOG_MAX_WQ_SZ = dw(0x78, 4, 0);
        SQ_TS_FORMAT = dw(0x88, 31, 30);
        RQ_TS_FORMAT = dw(0x88, 29, 28);
        /// log2 max user contexts.
        LOG_MAX_UCTX = dw(0x8c, 28, 24);
        /// Max number of EQs (newer FW).
        MAX_NUM_EQS = dw(0x8c, 15, 0);
        /// Driver writes PAGE_SHIFT - 12.
        LOG_UAR_PAGE_SZ = dw(0x90, 15, 0);
        DEVICE_FREQUENCY_MHZ = bytes(0x98, 4);
        /// internal_timer frequency.
        DEVICE_FREQUENCY_KHZ = bytes(0x9c, 4);
        /// UARs per system page when uar_4k.
        NUM_OF_UARS_PER_PAGE = bytes(0xa4, 4);
        /// Device always writes 128-byte CQEs.
        CQE_128_ALWAYS = dw(0xb4, 2, 2);
        /// CQE compression supported.
        CQE_COMPRESSION = dw(0xb4, 0, 0);
        NUM_VHCA_PORTS = dw(0xc0, 15, 8);
        /// INIT_HCA carries a 128-bit sw_owner_id.
        SW_OWNER_ID = dw(0xc0, 1, 1);
    }
    /// `port_type`: InfiniBand.
    pub const PORT_TYPE_IB: u32 = 0;
    /// `port_type`: Ethernet (RoCE).
    pub const PORT_TYPE_ETH: u32 = 1;
}

layout! {
    /// RoCE capability page (`roce_cap`, cap_type ROCE; only the fields of
    /// `docs/mlx5.md#capabilities`).
    /// The page size (256 bytes) is UNVERIFIED.
    pub mod roce_cap: size 256;
    fields {
        /// Software may choose the RoCE v2 UDP source port.
        SW_R_ROCE_SRC_UDP_PORT = dw(0x0, 27, 27);
        QP_TS_FORMAT = dw(0x0, 1, 0);
        L3_TYPE = dw(0x10, 19, 16);
        ROCE_VERSION = dw(0x10, 7, 0);
        R_ROCE_DEST_UDP_PORT = dw(0x14, 15, 0);
        R_ROCE_MAX_SRC_UDP_PORT = dw(0x18, 31, 16);
        R_ROCE_MIN_SRC_UDP_PORT = dw(0x18, 15, 0);
        ROCE_ADDRESS_TABLE_SIZE = dw(0x1c, 15, 0);
    }
}

layout! {
    /// QUERY_ADAPTER parameter block (256 bytes at 0x10 of the output).
    pub mod query_adapter_param_block: size 256;
    fields {
        /// IEEE vendor id ("block byte 0x19 \[23:0\]").
        IEEE_VENDOR_ID = dw(0x18, 23, 0);
        /// VSD vendor id ("0x1e \[15:0\]").
        VSD_VENDOR_ID = dw(0x1c, 15, 0);
        /// Vendor specific data (208 bytes).
        VSD = bytes(0x20, 208);
        /// PSID (16 bytes).
        VSD_CONTD_PSID = bytes(0xf0, 16);
    }
}

layout! {
    /// Atomic capability page (`atomic_caps`, cap_type ATOMIC; Linux `mlx5_ifc_atomic_caps_bits`).
    /// Only the first 256 bytes carry fields; the page is the 4096-byte capability block.
    pub mod atomic_caps: size 256;
    fields {
        /// Endianness of the 8-byte atomic response the requester writes to local memory
        /// ([`REQ_MODE_BE`], [`REQ_MODE_HOST_ENDIANNESS`]); the one writable field.
        ATOMIC_REQ_8B_ENDIANNESS_MODE = dw(0x8, 31, 30);
        /// The device can answer 8-byte atomics in host endianness (mode 1).
        SUPPORTED_ATOMIC_REQ_8B_ENDIANNESS_MODE_1 = dw(0x8, 25, 25);
        /// Atomic operations supported (`OPS_*` bits).
        ATOMIC_OPERATIONS = dw(0x10, 15, 0);
        /// Atomic operand sizes on QPs (`SIZE_QP_*` bits).
        ATOMIC_SIZE_QP = dw(0x14, 15, 0);
        /// Atomic operand sizes on DC (same encoding).
        ATOMIC_SIZE_DC = dw(0x18, 15, 0);
    }
    /// `atomic_req_8B_endianness_mode`: responses big-endian (the reset value).
    pub const REQ_MODE_BE: u32 = 0;
    /// `atomic_req_8B_endianness_mode`: responses in host endianness (what Linux sets when
    /// `supported_atomic_req_8B_endianness_mode_1` is set).
    pub const REQ_MODE_HOST_ENDIANNESS: u32 = 1;
    /// `atomic_operations`: compare-and-swap.
    pub const OPS_CMP_SWAP: u32 = 1 << 0;
    /// `atomic_operations`: fetch-and-add.
    pub const OPS_FETCH_ADD: u32 = 1 << 1;
    /// `atomic_operations`: masked (extended) compare-and-swap.
    pub const OPS_EXTENDED_CMP_SWAP: u32 = 1 << 2;
    /// `atomic_operations`: masked (extended) fetch-and-add.
    pub const OPS_EXTENDED_FETCH_ADD: u32 = 1 << 3;
    /// `atomic_size_qp`: 8-byte operands.
    pub const SIZE_QP_8BYTES: u32 = 1 << 3;
}

layout! {
    /// HOST_ENDIANNESS register (ACCESS_REG id 0x7004, 16 bytes).
    pub mod host_endianness_reg: size 16;
    fields {
        /// `he`: 0x00 little-endian host, 0x80 big-endian host.
        HE = bytes(0x0, 1);
    }
    /// `he` for a little-endian host.
    pub const HE_LITTLE: u8 = 0x00;
    /// `he` for a big-endian host.
    pub const HE_BIG: u8 = 0x80;
}

layout! {
    /// CQ context (`cqc`, 64 bytes, at 0x10 of CREATE_CQ).
    pub mod cqc: size 64;
    fields {
        /// Read-back status.
        STATUS = dw(0x0, 31, 28);
        DBR_UMEM_VALID = dw(0x0, 25, 25);
        APU_CQ = dw(0x0, 24, 24);
        /// CQE size: [`CQE_SZ_64`] / [`CQE_SZ_128`].
        CQE_SZ = dw(0x0, 23, 21);
        /// Collapsed CQ.
        CC = dw(0x0, 20, 20);
        SCQE_BREAK_MODERATION_EN = dw(0x0, 18, 18);
        /// Ignore overrun.
        OI = dw(0x0, 17, 17);
        CQ_PERIOD_MODE = dw(0x0, 16, 15);
        /// CQE compression enable.
        CQE_COMP_EN = dw(0x0, 14, 14);
        MINI_CQE_RES_FORMAT = dw(0x0, 13, 12);
        /// Read-back state ([`ARMED`], [`FIRED`], ...).
        ST = dw(0x0, 11, 8);
        CQE_COMPRESSION_LAYOUT = dw(0x0, 1, 0);
        /// Start offset in the first page, units of page_size/64.
        PAGE_OFFSET = dw(0x8, 11, 6);
        /// log2 number of CQEs.
        LOG_CQ_SIZE = dw(0xc, 28, 24);
        /// UAR index receiving this CQ's arm doorbells.
        UAR_PAGE = dw(0xc, 23, 0);
        /// Moderation period.
        CQ_PERIOD = dw(0x10, 27, 16);
        /// Moderation count.
        CQ_MAX_COUNT = dw(0x10, 15, 0);
        /// EQ number for completion events.
        C_EQN_OR_APU_ELEMENT = bytes(0x14, 4);
        /// page_shift - 12.
        LOG_PAGE_SIZE = dw(0x18, 28, 24);
        LAST_NOTIFIED_INDEX = dw(0x20, 23, 0);
        LAST_SOLICIT_INDEX = dw(0x24, 23, 0);
        CONSUMER_COUNTER = dw(0x28, 23, 0);
        PRODUCER_COUNTER = dw(0x2c, 23, 0);
        /// DMA address of the CQ doorbell record.
        DBR_ADDR = bytes(0x38, 8);
    }
    /// `cqe_sz`: 64-byte CQEs.
    pub const CQE_SZ_64: u32 = 0;
    /// `cqe_sz`: 128-byte CQEs.
    pub const CQE_SZ_128: u32 = 1;
    /// `cqe_sz`: 128-byte padded CQEs.
    pub const CQE_SZ_128_PAD: u32 = 2;
    /// State: armed.
    pub const ARMED: u32 = 0x9;
    /// State: fired.
    pub const FIRED: u32 = 0xa;
    /// State: always armed.
    pub const ALWAYS_ARMED: u32 = 0xb;
}

layout! {
    /// SRQ context (`srqc`, 64 bytes, at 0x10 of CREATE_SRQ; Linux `mlx5_ifc_srqc_bits`).
    pub mod srqc: size 64;
    fields {
        /// Read-back state ([`STATE_GOOD`], [`STATE_ERROR`]).
        STATE = dw(0x0, 31, 28);
        /// log2 number of WQEs.
        LOG_SRQ_SIZE = dw(0x0, 27, 24);
        /// WQE signature enable.
        WQ_SIGNATURE = dw(0x4, 31, 31);
        /// Contiguous buffer (no PAS list).
        CONT_SRQ = dw(0x4, 30, 30);
        /// Reserved lkey enable.
        RLKY = dw(0x4, 28, 28);
        /// log2 of the WQE stride in 16-byte units.
        LOG_RQ_STRIDE = dw(0x4, 26, 24);
        /// XRC domain (XRC SRQs).
        XRCD = dw(0x4, 23, 0);
        /// Start offset in the first page, units of page_size/64.
        PAGE_OFFSET = dw(0x8, 31, 26);
        /// CQ (XRC SRQs).
        CQN = dw(0x8, 23, 0);
        /// page_shift - 12.
        LOG_PAGE_SIZE = dw(0x10, 29, 24);
        /// Protection domain.
        PD = dw(0x18, 23, 0);
        /// Limit water mark: an SRQ_RQ_LIMIT event when fewer WQEs are posted (0: none).
        LWM = dw(0x1c, 31, 16);
        /// WQE counter (read-back).
        WQE_CNT = dw(0x1c, 15, 0);
        /// DMA address of the doorbell record (word 0: receive counter).
        DBR_ADDR = bytes(0x28, 8);
    }
    /// `state`: good.
    pub const STATE_GOOD: u32 = 0x0;
    /// `state`: error.
    pub const STATE_ERROR: u32 = 0x1;
}

layout! {
    /// Work queue (`wq`, 192 bytes; Linux `mlx5_ifc_wq_bits`): the ring part of an RMP, RQ or
    /// SQ context, its PAS list right after it.
    pub mod wq: size 0xc0;
    fields {
        /// Ring format ([`TYPE_LINKED_LIST`], [`TYPE_CYCLIC`], ...).
        WQ_TYPE = dw(0x0, 31, 28);
        /// WQE signature enable.
        WQ_SIGNATURE = dw(0x0, 27, 27);
        /// End padding mode.
        END_PADDING_MODE = dw(0x0, 26, 25);
        /// CD slave.
        CD_SLAVE = dw(0x0, 24, 24);
        /// Start offset in the first page, units of page_size/64.
        PAGE_OFFSET = dw(0x4, 20, 16);
        /// Limit water mark: a limit event when fewer WQEs are posted (0: none).
        LWM = dw(0x4, 15, 0);
        /// Protection domain.
        PD = dw(0x8, 23, 0);
        /// UAR page (send queues).
        UAR_PAGE = dw(0xc, 23, 0);
        /// DMA address of the doorbell record.
        DBR_ADDR = bytes(0x10, 8);
        /// Hardware counter (read-back).
        HW_COUNTER = bytes(0x18, 4);
        /// Software counter (read-back).
        SW_COUNTER = bytes(0x1c, 4);
        /// log2 of the WQE stride in bytes (an SRQC's `log_rq_stride` + 4).
        LOG_WQ_STRIDE = dw(0x20, 19, 16);
        /// page_shift - 12.
        LOG_WQ_PG_SZ = dw(0x20, 12, 8);
        /// log2 number of WQEs.
        LOG_WQ_SZ = dw(0x20, 4, 0);
        /// Flexible array of BE64 page addresses.
        PAS = bytes(0xc0, 0);
    }
    /// `wq_type`: linked list (the SRQ format: each WQE starts with a next segment).
    pub const TYPE_LINKED_LIST: u32 = 0x0;
    /// `wq_type`: cyclic.
    pub const TYPE_CYCLIC: u32 = 0x1;
}

layout! {
    /// Receive memory pool context (`rmpc`, 240 bytes, at 0x20 of CREATE_RMP / MODIFY_RMP /
    /// QUERY_RMP; Linux `mlx5_ifc_rmpc_bits`): what an SRQ is at ISSI 1.
    pub mod rmpc: size 0xf0;
    fields {
        /// State ([`STATE_RDY`], [`STATE_ERR`]).
        STATE = dw(0x0, 23, 20);
        /// Basic cyclic receive WQE.
        BASIC_CYCLIC_RCV_WQE = dw(0x4, 31, 31);
        /// The work queue (`ctx::wq`), PAS list after it.
        WQ = bytes(0x30, 0xc0);
    }
    /// `state`: ready.
    pub const STATE_RDY: u32 = 0x1;
    /// `state`: error.
    pub const STATE_ERR: u32 = 0x3;
}

layout! {
    /// EQ context (`eqc`, 64 bytes, at 0x10 of CREATE_EQ).
    pub mod eqc: size 64;
    fields {
        /// Read-back status.
        STATUS = dw(0x0, 31, 28);
        EC = dw(0x0, 18, 18);
        /// Ignore overrun.
        OI = dw(0x0, 17, 17);
        /// State ([`ARMED`], [`FIRED`], [`ALWAYS_ARMED`]).
        ST = dw(0x0, 11, 8);
        /// Start offset in the first page.
        PAGE_OFFSET = dw(0x8, 11, 6);
        /// log2 number of EQEs.
        LOG_EQ_SIZE = dw(0xc, 28, 24);
        /// UAR index holding this EQ's doorbell.
        UAR_PAGE = dw(0xc, 23, 0);
        /// MSI-X vector index.
        INTR = dw(0x14, 11, 0);
        /// page_shift - 12.
        LOG_PAGE_SIZE = dw(0x18, 28, 24);
        CONSUMER_COUNTER = dw(0x28, 23, 0);
        PRODUCER_COUNTER = dw(0x2c, 23, 0);
    }
    /// State: armed.
    pub const ARMED: u32 = 0x9;
    /// State: fired.
    pub const FIRED: u32 = 0xa;
    /// State: always armed.
    pub const ALWAYS_ARMED: u32 = 0xb;
}

layout! {
    /// QP context (`qpc`, 232 bytes, at 0x18 of CREATE_QP, the modify-QP commands and QUERY_QP).
    pub mod qpc: size 232;
    fields {
        /// QP state (`STATE_*`).
        STATE = dw(0x0, 31, 28);
        LAG_TX_PORT_AFFINITY = dw(0x0, 27, 24);
        /// Service type (`ST_*`).
        ST = dw(0x0, 23, 16);
        ISOLATE_VL_TC = dw(0x0, 13, 13);
        /// Path migration state ([`PM_STATE_MIGRATED`]).
        PM_STATE = dw(0x0, 12, 11);
        REQ_E2E_CREDIT_MODE = dw(0x0, 9, 8);
        OFFLOAD_TYPE = dw(0x0, 7, 4);
        END_PADDING_MODE = dw(0x0, 3, 2);
        WQ_SIGNATURE = dw(0x4, 31, 31);
        BLOCK_LB_MC = dw(0x4, 30, 30);
        ATOMIC_LIKE_WRITE_EN = dw(0x4, 29, 29);
        LATENCY_SENSITIVE = dw(0x4, 28, 28);
        DRAIN_SIGERR = dw(0x4, 26, 26);
        DP_ORDERING_FORCE = dw(0x4, 24, 24);
        /// Protection domain.
        PD = dw(0x4, 23, 0);
        /// Path MTU (`MTU_*`).
        MTU = dw(0x8, 31, 29);
        /// log2 max message size.
        LOG_MSG_MAX = dw(0x8, 28, 24);
        /// log2 number of RQ WQEs.
        LOG_RQ_SIZE = dw(0x8, 22, 19);
        /// log2(RQ WQE size) - 4.
        LOG_RQ_STRIDE = dw(0x8, 18, 16);
        /// No send queue.
        NO_SQ = dw(0x8, 15, 15);
        /// log2 number of SQ WQEBBs.
        LOG_SQ_SIZE = dw(0x8, 14, 11);
        RETRY_MODE = dw(0x8, 9, 8);
        TS_FORMAT = dw(0x8, 7, 6);
        /// Reserved-lkey enable.
        RLKY = dw(0x8, 4, 4);
        ULP_STATELESS_OFFLOAD_MODE = dw(0x8, 3, 0);
        COUNTER_SET_ID = dw(0xc, 31, 24);
        /// UAR index of the send doorbell page.
        UAR_PAGE = dw(0xc, 23, 0);
        /// User index (0xffffff for kernel QPs with CQE version 1).
        USER_INDEX = dw(0x10, 23, 0);
        /// page_shift - 12.
        LOG_PAGE_SIZE = dw(0x14, 28, 24);
        /// Remote QPN.
        REMOTE_QPN = dw(0x14, 23, 0);
        /// Primary address path (`ads`, 44 bytes).
        PRIMARY_ADDRESS_PATH = bytes(0x18, 44);
        /// Secondary address path (`ads`, 44 bytes).
        SECONDARY_ADDRESS_PATH = bytes(0x44, 44);
        LOG_ACK_REQ_FREQ = dw(0x70, 31, 28);
        /// log2 max outstanding RDMA read/atomic as initiator.
        LOG_SRA_MAX = dw(0x70, 23, 21);
        RETRY_COUNT = dw(0x70, 18, 16);
        RNR_RETRY = dw(0x70, 15, 13);
        /// Fast-registration enable.
        FRE = dw(0x70, 11, 11);
        CUR_RNR_RETRY = dw(0x70, 10, 8);
        CUR_RETRY_COUNT = dw(0x70, 7, 5);
        NEXT_SEND_PSN = dw(0x78, 23, 0);
        LOG_NUM_DCI_STREAM_CHANNELS = dw(0x7c, 28, 24);
        /// Send CQ number.
        CQN_SND = dw(0x7c, 23, 0);
        LOG_NUM_DCI_ERRORED_STREAMS = dw(0x80, 28, 24);
        DETH_SQPN = dw(0x80, 23, 0);
        LAST_ACKED_PSN = dw(0x88, 23, 0);
        SSN = dw(0x8c, 23, 0);
        /// log2 max outstanding RDMA read/atomic as responder.
        LOG_RRA_MAX = dw(0x90, 23, 21);
        /// Atomic mode ([`ATOMIC_MODE_IB`], [`ATOMIC_MODE_8B`]).
        ATOMIC_MODE = dw(0x90, 19, 16);
        /// Remote read enable.
        RRE = dw(0x90, 15, 15);
        /// Remote write enable.
        RWE = dw(0x90, 14, 14);
        /// Remote atomic enable.
        RAE = dw(0x90, 13, 13);
        PAGE_OFFSET = dw(0x90, 11, 6);
        DP_ORDERING_1 = dw(0x90, 3, 3);
        CD_SLAVE_RECEIVE = dw(0x90, 2, 2);
        CD_SLAVE_SEND = dw(0x90, 1, 1);
        CD_MASTER = dw(0x90, 0, 0);
        /// IB RNR timer code.
        MIN_RNR_NAK = dw(0x94, 28, 24);
        NEXT_RCV_PSN = dw(0x94, 23, 0);
        XRCD = dw(0x98, 23, 0);
        /// Receive CQ number.
        CQN_RCV = dw(0x9c, 23, 0);
        /// DMA address of the QP doorbell record.
        DBR_ADDR = bytes(0xa0, 8);
        Q_KEY = bytes(0xa8, 4);
        /// RQ type (`RQ_TYPE_*`).
        RQ_TYPE = dw(0xac, 26, 24);
        SRQN_RMPN_XRQN = dw(0xac, 23, 0);
        RMSN = dw(0xb0, 23, 0);
        HW_SQ_WQEBB_COUNTER = dw(0xb4, 31, 16);
        SW_SQ_WQEBB_COUNTER = dw(0xb4, 15, 0);
        HW_RQ_COUNTER = bytes(0xb8, 4);
        SW_RQ_COUNTER = bytes(0xbc, 4);
        CGS = dw(0xc4, 16, 16);
        CS_REQ = dw(0xc4, 15, 8);
        CS_RES = dw(0xc4, 7, 0);
        DC_ACCESS_KEY = bytes(0xc8, 8);
        DBR_UMEM_VALID = dw(0xd0, 28, 28);
    }
    /// `st`: reliable connected.
    pub const ST_RC: u32 = 0x0;
    /// `st`: unreliable connected.
    pub const ST_UC: u32 = 0x1;
    /// `st`: unreliable datagram.
    pub const ST_UD: u32 = 0x2;
    /// `st`: XRC.
    pub const ST_XRC: u32 = 0x3;
    /// `st`: MLX.
    pub const ST_MLX: u32 = 0x4;
    /// `st`: DC initiator.
    pub const ST_DCI: u32 = 0x5;
    /// `st`: DC target.
    pub const ST_DCT: u32 = 0x6;
    /// `st`: QP0 (SMI).
    pub const ST_QP0: u32 = 0x7;
    /// `st`: QP1 (GSI).
    pub const ST_QP1: u32 = 0x8;
    /// `st`: raw ethertype.
    pub const ST_RAW_ETHERTYPE: u32 = 0x9;
    /// `st`: raw IPv6.
    pub const ST_RAW_IPV6: u32 = 0xa;
    /// `st`: sniffer.
    pub const ST_SNIFFER: u32 = 0xb;
    /// `st`: UMR registration QP.
    pub const ST_REG_UMR: u32 = 0xc;
    /// `st`: PTP 1588.
    pub const ST_PTP_1588: u32 = 0xd;
    /// `st`: sync UMR.
    pub const ST_SYNC_UMR: u32 = 0xe;
    /// `state`: reset.
    pub const STATE_RST: u32 = 0;
    /// `state`: init.
    pub const STATE_INIT: u32 = 1;
    /// `state`: ready to receive.
    pub const STATE_RTR: u32 = 2;
    /// `state`: ready to send.
    pub const STATE_RTS: u32 = 3;
    /// `state`: send queue error.
    pub const STATE_SQER: u32 = 4;
    /// `state`: send queue drained.
    pub const STATE_SQD: u32 = 5;
    /// `state`: error.
    pub const STATE_ERR: u32 = 6;
    /// `state`: send queue draining.
    pub const STATE_SQ_DRAINING: u32 = 7;
    /// `state`: suspended.
    pub const STATE_SUSPENDED: u32 = 9;
    /// `pm_state`: armed.
    pub const PM_STATE_ARMED: u32 = 0;
    /// `pm_state`: rearm.
    pub const PM_STATE_REARM: u32 = 1;
    /// `pm_state`: migrated (what drivers set unless APM is used).
    pub const PM_STATE_MIGRATED: u32 = 3;
    /// `rq_type`: regular RQ.
    pub const RQ_TYPE_REGULAR: u32 = 0;
    /// `rq_type`: SRQ.
    pub const RQ_TYPE_SRQ: u32 = 1;
    /// `rq_type`: CRQ.
    pub const RQ_TYPE_CRQ: u32 = 2;
    /// `rq_type`: zero-length RQ (no RQ).
    pub const RQ_TYPE_ZERO: u32 = 3;
    /// `mtu`: 256 bytes.
    pub const MTU_256: u32 = 1;
    /// `mtu`: 512 bytes.
    pub const MTU_512: u32 = 2;
    /// `mtu`: 1024 bytes.
    pub const MTU_1024: u32 = 3;
    /// `mtu`: 2048 bytes.
    pub const MTU_2048: u32 = 4;
    /// `mtu`: 4096 bytes.
    pub const MTU_4096: u32 = 5;
    /// `atomic_mode`: IB-compatible.
    pub const ATOMIC_MODE_IB: u32 = 1;
    /// `atomic_mode`: 8-byte atomics.
    pub const ATOMIC_MODE_8B: u32 = 3;
    /// `user_index` of kernel QPs ("CQE version 0" behaviour).
    pub const USER_INDEX_NONE: u32 = 0xff_ffff;

    /// `opt_param_mask` bits (`qp.h enum mlx5_qp_optpar`).
    pub mod optpar {
        /// Alternate address path.
        pub const ALT_ADDR_PATH: u32 = 1 << 0;
        /// Remote read enable.
        pub const RRE: u32 = 1 << 1;
        /// Remote atomic enable.
        pub const RAE: u32 = 1 << 2;
        /// Remote write enable.
        pub const RWE: u32 = 1 << 3;
        /// P_Key index.
        pub const PKEY_INDEX: u32 = 1 << 4;
        /// Q_Key.
        pub const Q_KEY: u32 = 1 << 5;
        /// RNR timeout.
        pub const RNR_TIMEOUT: u32 = 1 << 6;
        /// Primary address path.
        pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
        /// Initiator RDMA read/atomic depth.
        pub const SRA_MAX: u32 = 1 << 8;
        /// Responder RDMA read/atomic depth.
        pub const RRA_MAX: u32 = 1 << 9;
        /// Path migration state.
        pub const PM_STATE: u32 = 1 << 10;
        /// Retry count.
        pub const RETRY_COUNT: u32 = 1 << 12;
        /// RNR retry.
        pub const RNR_RETRY: u32 = 1 << 13;
        /// ACK timeout.
        pub const ACK_TIMEOUT: u32 = 1 << 14;
        /// LAG TX port affinity.
        pub const LAG_TX_AFF: u32 = 1 << 15;
        /// Primary port.
        pub const PRI_PORT: u32 = 1 << 16;
        /// Primary address path DSCP.
        pub const PRIMARY_ADDR_PATH_DSCP: u32 = 1 << 17;
        /// RMPN / XRQN.
        pub const RMPN_XRQN: u32 = 1 << 18;
        /// Receive CQ number.
        pub const CQN_RCV: u32 = 1 << 19;
        /// DC HS.
        pub const DC_HS: u32 = 1 << 20;
        /// DC key.
        pub const DC_KEY: u32 = 1 << 21;
        /// Offload type.
        pub const OFFLOAD_TYPE: u32 = 1 << 24;
        /// Counter set id.
        pub const COUNTER_SET_ID: u32 = 1 << 25;
    }
}

layout! {
    /// Address path (`ads`, 44 bytes): primary at qpc 0x18, secondary at qpc 0x44.
    pub mod ads: size 44;
    fields {
        /// Force loopback (IB).
        FL = dw(0x0, 31, 31);
        FREE_AR = dw(0x0, 30, 30);
        PKEY_INDEX = dw(0x0, 15, 0);
        PLANE_INDEX = dw(0x4, 31, 24);
        /// GRH present (IB).
        GRH = dw(0x4, 23, 23);
        /// Source path bits (IB).
        MLID = dw(0x4, 22, 16);
        /// Remote LID (IB).
        RLID = dw(0x4, 15, 0);
        /// IB 5-bit ACK timeout code.
        ACK_TIMEOUT = dw(0x8, 31, 27);
        /// Source GID index.
        SRC_ADDR_INDEX = dw(0x8, 23, 16);
        /// Static rate (0 = port rate).
        STAT_RATE = dw(0x8, 11, 8);
        HOP_LIMIT = dw(0x8, 7, 0);
        TCLASS = dw(0xc, 27, 20);
        FLOW_LABEL = dw(0xc, 19, 0);
        /// Destination GID (16 bytes).
        RGID_RIP = bytes(0x10, 16);
        F_DSCP = dw(0x20, 27, 27);
        F_ECN = dw(0x20, 26, 26);
        F_ETH_PRIO = dw(0x20, 24, 24);
        ECN = dw(0x20, 23, 22);
        DSCP = dw(0x20, 21, 16);
        /// RoCE v2 UDP source port.
        UDP_SPORT = dw(0x20, 15, 0);
        DEI_CFI = dw(0x24, 31, 31);
        ETH_PRIO = dw(0x24, 30, 28);
        /// Service level (IB).
        SL = dw(0x24, 27, 24);
        /// Port number (1-based).
        VHCA_PORT_NUM = dw(0x24, 23, 16);
        /// Destination MAC bytes 0..1.
        RMAC_47_32 = dw(0x24, 15, 0);
        /// Destination MAC bytes 2..5.
        RMAC_31_0 = bytes(0x28, 4);
        /// The 6-byte destination MAC (`rmac_47_32` + `rmac_31_0`), for slices.
        RMAC = bytes(0x26, 6);
    }
}

layout! {
    /// Memory key context (`mkc`, 64 bytes, at 0x10 of CREATE_MKEY).
    pub mod mkc: size 64;
    fields {
        /// Must be 0 for a usable key.
        FREE = dw(0x0, 30, 30);
        /// Access mode bits 4:2.
        ACCESS_MODE_4_2 = dw(0x0, 28, 26);
        RELAXED_ORDERING_WRITE = dw(0x0, 18, 18);
        SMALL_FENCE_ON_RDMA_READ_RESPONSE = dw(0x0, 16, 16);
        UMR_EN = dw(0x0, 15, 15);
        /// Remote atomic.
        A = dw(0x0, 14, 14);
        /// Remote write.
        RW = dw(0x0, 13, 13);
        /// Remote read.
        RR = dw(0x0, 12, 12);
        /// Local write.
        LW = dw(0x0, 11, 11);
        /// Local read.
        LR = dw(0x0, 10, 10);
        /// Access mode bits 1:0 (`ACCESS_MODE_*`).
        ACCESS_MODE_1_0 = dw(0x0, 9, 8);
        MA_TRANSLATION_MODE = dw(0x0, 5, 4);
        /// Bound QP (0xffffff = none).
        QPN = dw(0x4, 31, 8);
        /// Low 8 "variant" bits of the key.
        MKEY_7_0 = dw(0x4, 7, 0);
        /// Key covers the whole 64-bit space.
        LENGTH64 = dw(0xc, 31, 31);
        BSF_EN = dw(0xc, 30, 30);
        SYNC_UMR = dw(0xc, 29, 29);
        EXPECTED_SIGERR_COUNT = dw(0xc, 26, 26);
        EN_RINVAL = dw(0xc, 24, 24);
        /// Protection domain.
        PD = dw(0xc, 23, 0);
        /// I/O virtual start address.
        START_ADDR = bytes(0x10, 8);
        /// Length in bytes.
        LEN = bytes(0x18, 8);
        BSF_OCTWORD_SIZE = bytes(0x20, 4);
        CROSSING_TARGET_VHCA_ID = dw(0x30, 31, 16);
        /// Number of 16-byte translation octwords (`ceil(npages / 2)`).
        TRANSLATIONS_OCTWORD_SIZE = bytes(0x34, 4);
        RELAXED_ORDERING_READ = dw(0x38, 6, 6);
        /// **Absolute** log2 of the translation page size.
        LOG_PAGE_SIZE = dw(0x38, 5, 0);
    }
    /// Access mode: physical address (no translation).
    pub const ACCESS_MODE_PA: u32 = 0;
    /// Access mode: MTT.
    pub const ACCESS_MODE_MTT: u32 = 1;
    /// Access mode: KLM.
    pub const ACCESS_MODE_KLM: u32 = 2;
    /// Access mode: KSM.
    pub const ACCESS_MODE_KSM: u32 = 3;
    /// `qpn` value for a key not bound to a QP.
    pub const QPN_NONE: u32 = 0xff_ffff;
    /// MTT entry low bit with `pg_access`: read.
    pub const MTT_READ: u64 = 1 << 0;
    /// MTT entry low bit with `pg_access`: write.
    pub const MTT_WRITE: u64 = 1 << 1;
}

layout! {
    /// NIC vport context (`nic_vport_context`, 256 bytes; at 0x10 of QUERY_NIC_VPORT_CONTEXT
    /// output and 0x100 of MODIFY_NIC_VPORT_CONTEXT input).
    pub mod nic_vport_context: size 256;
    fields {
        /// RoCE enabled.
        ROCE_EN = dw(0x0, 0, 0);
        /// MTU (16 bits at byte 0x26).
        MTU = dw(0x24, 15, 0);
        SYSTEM_IMAGE_GUID = bytes(0x28, 8);
        PORT_GUID = bytes(0x30, 8);
        NODE_GUID = bytes(0x38, 8);
        /// `mac_address_layout` (8 bytes; MAC in the last 6).
        PERMANENT_ADDRESS = bytes(0xf4, 8);
        /// The permanent MAC address (6 bytes).
        PERMANENT_MAC = bytes(0xf6, 6);
    }
}

layout! {
    /// IB HCA vport context (`hca_vport_context`, 512 bytes as Linux `mlx5_ifc.h` declares it;
    /// at 0x10 of QUERY_HCA_VPORT_CONTEXT output; only the fields the driver reads).
    pub mod hca_vport_context: size 512;
    fields {
        /// IB port state.
        PORT_STATE = dw(0x20, 7, 4);
        PORT_GUID = bytes(0x30, 8);
        NODE_GUID = bytes(0x38, 8);
        LID = dw(0x60, 31, 16);
        SM_LID = dw(0x64, 31, 16);
    }
}

layout! {
    /// RoCE GID table entry (`roce_addr_layout`, 32 bytes; at 0x10 of SET_ROCE_ADDRESS input
    /// and QUERY_ROCE_ADDRESS output).
    pub mod roce_addr_layout: size 32;
    fields {
        /// 16-byte GID (IPv4-mapped IPv6 for IPv4).
        SOURCE_L3_ADDRESS = bytes(0x0, 16);
        VLAN_VALID = dw(0x10, 28, 28);
        VLAN_ID = dw(0x10, 27, 16);
        /// Source MAC bytes 0..1.
        SOURCE_MAC_47_32 = dw(0x10, 15, 0);
        /// Source MAC bytes 2..5.
        SOURCE_MAC_31_0 = bytes(0x14, 4);
        /// 0 IPv4, 1 IPv6.
        ROCE_L3_TYPE = dw(0x18, 11, 8);
        /// 0 RoCE v1, 2 RoCE v2.
        ROCE_VERSION = dw(0x18, 7, 0);
    }
    /// `roce_l3_type`: IPv4.
    pub const L3_TYPE_IPV4: u32 = 0;
    /// `roce_l3_type`: IPv6.
    pub const L3_TYPE_IPV6: u32 = 1;
    /// `roce_version`: RoCE v1.
    pub const ROCE_VERSION_V1: u32 = 0;
    /// `roce_version`: RoCE v2.
    pub const ROCE_VERSION_V2: u32 = 2;
}

//! Feature ids and the GET_FEATURE / SET_FEATURE blocks (`docs/efa.md#features`).
//!
//! Offsets are from the start of the feature block: byte 0x8 of a GET_FEATURE completion
//! ([`crate::efa::cmds::get_feature_resp::DATA_OFF`]) or byte 0x14 of a SET_FEATURE
//! submission ([`crate::efa::cmds::feature_cmd::DATA_OFF`]); `FIELD.at(DATA_OFF)` addresses
//! a field inside the entry. HOST_INFO is not inline: it travels in the control buffer.
//!
//! EFA has no low-latency-queue (LLQ) feature block: the SQ is always an LLQ, its limits are
//! in [`queue_attr`] (`max_llq_size`, `max_tx_batch`) and its placement in the CREATE_QP
//! response.

/// Feature ids (`efa_admin_aq_feature_id`).
pub mod id {
    /// Device attributes (always supported).
    pub const DEVICE_ATTR: u8 = 1;
    /// Async event configuration (GET and SET).
    pub const AENQ_CONFIG: u8 = 2;
    /// Network attributes (the device GID and MTU).
    pub const NETWORK_ATTR: u8 = 3;
    /// Queue attributes (`QUEUE_ATTR_1` in newer headers).
    pub const QUEUE_ATTR: u8 = 4;
    /// Hardware hints (driver timeouts).
    pub const HW_HINTS: u8 = 5;
    /// Host information (SET only, through the control buffer).
    pub const HOST_INFO: u8 = 6;
    /// Event queue attributes.
    pub const EVENT_QUEUE_ATTR: u8 = 7;

    /// Every feature id as `(value, name)`.
    pub const ALL: &[(u8, &str)] = &[
        (DEVICE_ATTR, "DEVICE_ATTR"),
        (AENQ_CONFIG, "AENQ_CONFIG"),
        (NETWORK_ATTR, "NETWORK_ATTR"),
        (QUEUE_ATTR, "QUEUE_ATTR"),
        (HW_HINTS, "HW_HINTS"),
        (HOST_INFO, "HOST_INFO"),
        (EVENT_QUEUE_ATTR, "EVENT_QUEUE_ATTR"),
    ];
}

/// Whether `supported_features` (from [`device_attr::SUPPORTED_FEATURES`]) has feature `id`
/// (bit `1 << id`; DEVICE_ATTR always counts as supported).
pub const fn supported(supported_features: u64, id: u8) -> bool {
    id == self::id::DEVICE_ATTR || (id < 64 && supported_features & (1 << id) != 0)
}

le_layout! {
    /// DEVICE_ATTR block.
    pub mod device_attr: size 56;
    fields {
        /// Bitmap of supported feature ids (`1 << id`).
        SUPPORTED_FEATURES = u64(0);
        /// Bitmap of allowed MR page sizes.
        PAGE_SIZE_CAP = u64(8);
        /// Firmware version.
        FW_VERSION = u32(16);
        /// Admin API version (a driver requires at least 1).
        ADMIN_API_VERSION = u32(20);
        /// Device version.
        DEVICE_VERSION = u32(24);
        /// BAR index of the doorbells.
        DB_BAR = u16(28);
        /// Physical address width in bits.
        PHYS_ADDR_WIDTH = u8(30);
        /// Virtual address width in bits.
        VIRT_ADDR_WIDTH = u8(31);
        /// Capability bits ([`CAP_RDMA_READ`] ...).
        DEVICE_CAPS = u32(32);
        /// Largest RDMA operation in bytes.
        MAX_RDMA_SIZE = u32(36);
        /// Node GUID.
        GUID = u64(40);
        /// Maximum link speed in Gb/s.
        MAX_LINK_SPEED_GBPS = u16(48);
    }
    /// `device_caps`: RDMA read.
    pub const CAP_RDMA_READ: u32 = 1 << 0;
    /// `device_caps`: RNR retry is configurable.
    pub const CAP_RNR_RETRY: u32 = 1 << 1;
    /// `device_caps`: 128-byte TX WQEs.
    pub const CAP_DATA_POLLING_128: u32 = 1 << 2;
    /// `device_caps`: RDMA write.
    pub const CAP_RDMA_WRITE: u32 = 1 << 3;
    /// `device_caps`: unsolicited RDMA write with immediate receive.
    pub const CAP_UNSOLICITED_WRITE_RECV: u32 = 1 << 4;
    /// The lowest `admin_api_version` a driver accepts.
    pub const MIN_ADMIN_API_VERSION: u32 = 1;
}

le_layout! {
    /// QUEUE_ATTR block.
    pub mod queue_attr: size 56;
    fields {
        /// Most QPs.
        MAX_QP = u32(0);
        /// Deepest SQ in WQEs.
        MAX_SQ_DEPTH = u32(4);
        /// Inline data bytes in a TX WQE.
        INLINE_BUF_SIZE = u32(8);
        /// Deepest RQ in descriptors.
        MAX_RQ_DEPTH = u32(12);
        /// Most CQs.
        MAX_CQ = u32(16);
        /// Deepest CQ in entries.
        MAX_CQ_DEPTH = u32(20);
        /// Sub-CQs of every CQ.
        SUB_CQS_PER_CQ = u16(24);
        /// Shallowest SQ in WQEs.
        MIN_SQ_DEPTH = u16(26);
        /// Most buffer descriptors in a send.
        MAX_WR_SEND_SGES = u16(28);
        /// Most descriptors in a receive.
        MAX_WR_RECV_SGES = u16(30);
        /// Most MRs.
        MAX_MR = u32(32);
        /// Most pages in one MR.
        MAX_MR_PAGES = u32(36);
        /// Most PDs.
        MAX_PD = u32(40);
        /// Most AHs.
        MAX_AH = u32(44);
        /// Largest SQ (low-latency queue) in bytes.
        MAX_LLQ_SIZE = u32(48);
        /// Most local buffers in an RDMA operation.
        MAX_WR_RDMA_SGES = u16(52);
        /// Most SQ bytes between two doorbells, in 64-byte units (0 = unlimited).
        MAX_TX_BATCH = u16(54);
    }
}

le_layout! {
    /// NETWORK_ATTR block.
    pub mod network_attr: size 20;
    fields {
        /// The device's own GID (network order).
        ADDR = bytes(0, 16);
        /// Maximum payload size in bytes.
        MTU = u32(16);
    }
}

le_layout! {
    /// AENQ_CONFIG block (GET and SET).
    pub mod aenq_config: size 8;
    fields {
        /// Groups the device can report (bit `1 << group`).
        SUPPORTED_GROUPS = u32(0);
        /// Groups enabled.
        ENABLED_GROUPS = u32(4);
    }
}

le_layout! {
    /// EVENT_QUEUE_ATTR block.
    pub mod event_queue_attr: size 12;
    fields {
        /// Most EQs.
        MAX_EQ = u32(0);
        /// Deepest EQ in entries.
        MAX_EQ_DEPTH = u32(4);
        /// Event types the device reports.
        EVENT_BITMASK = u32(8);
    }
}

le_layout! {
    /// HW_HINTS block (0 = use the driver's default).
    pub mod hw_hints: size 8;
    fields {
        /// Read-less register read timeout (ms).
        MMIO_READ_TIMEOUT = u16(0);
        /// Driver watchdog timeout (ms).
        DRIVER_WATCHDOG_TIMEOUT = u16(2);
        /// Admin completion timeout.
        ADMIN_COMPLETION_TIMEOUT = u16(4);
        /// Admin polling interval (ms).
        POLL_INTERVAL = u16(6);
    }
}

le_layout! {
    /// HOST_INFO block (SET only, sent through the control buffer).
    pub mod host_info: size 180;
    fields {
        /// OS distribution string.
        OS_DIST_STR = bytes(0, 128);
        /// OS type (0 = Linux).
        OS_TYPE = u32(128);
        /// Kernel version string.
        KERNEL_VER_STR = bytes(132, 32);
        /// Kernel version code.
        KERNEL_VER = u32(164);
        /// Driver module type.
        DRIVER_VER_MODULE_TYPE = bits(168, 7, 0);
        /// Driver sub-minor version.
        DRIVER_VER_SUB_MINOR = bits(168, 15, 8);
        /// Driver minor version.
        DRIVER_VER_MINOR = bits(168, 23, 16);
        /// Driver major version.
        DRIVER_VER_MAJOR = bits(168, 31, 24);
        /// PCI function.
        BDF_FUNCTION = bits(172, 2, 0);
        /// PCI device.
        BDF_DEVICE = bits(172, 7, 3);
        /// PCI bus.
        BDF_BUS = bits(172, 15, 8);
        /// Spec minor version.
        SPEC_VER_MINOR = bits(174, 7, 0);
        /// Spec major version.
        SPEC_VER_MAJOR = bits(174, 15, 8);
        /// The driver is in-tree.
        FLAGS_INTREE = bits(176, 0, 0);
        /// GPUDirect is supported.
        FLAGS_GDR = bits(176, 1, 1);
    }
    /// `os_type`: Linux.
    pub const OS_TYPE_LINUX: u32 = 0;
    /// The common spec version a driver sends: (major, minor) = (2, 0).
    pub const SPEC_VERSION: (u32, u32) = (2, 0);
}

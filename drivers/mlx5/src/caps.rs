//! Device capabilities (`docs/mlx5.md#capabilities`): parsed from the `cmd_hca_cap` block and
//! validated once, so the rest of the driver can use them as bounds.

use firmware_interface::ctx::{atomic_caps, cmd_hca_cap as c, roce_cap};

use crate::error::{CapField, OutputFault};

/// The link layer of the device's ports (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PortType {
    /// InfiniBand (0).
    InfiniBand,
    /// Ethernet, i.e. RoCE (1).
    #[default]
    Ethernet,
}

/// General capabilities as the firmware reports them after INIT_HCA (current values),
/// validated: every `log_max_*` that bounds an object number is at most 24, the WQE sizes are
/// usable, the BlueFlame registers fit in a UAR page.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// log2 max number of QPs (≤ 24).
    pub log_max_qp: u8,
    /// log2 max WQEs per work queue (≤ 16).
    pub log_max_qp_sz: u8,
    /// log2 max number of SRQs (≤ 24; 0: none).
    pub log_max_srq: u8,
    /// log2 max WQEs per SRQ (≤ 16).
    pub log_max_srq_sz: u8,
    /// log2 max number of CQs (≤ 24).
    pub log_max_cq: u8,
    /// log2 max CQEs per CQ (≤ 24).
    pub log_max_cq_sz: u8,
    /// log2 max number of EQs.
    pub log_max_eq: u8,
    /// log2 max EQEs per EQ (≤ 24).
    pub log_max_eq_sz: u8,
    /// log2 max number of mkeys (≤ 24).
    pub log_max_mkey: u8,
    /// log2 max number of PDs (≤ 24).
    pub log_max_pd: u8,
    /// log2 max number of transport domains (≤ 24).
    pub log_max_transport_domain: u8,
    /// log2 max message size.
    pub log_max_msg: u8,
    /// log2 max outstanding RDMA read/atomic per QP as requester.
    pub log_max_ra_req_qp: u8,
    /// log2 max outstanding RDMA read/atomic per QP as responder.
    pub log_max_ra_res_qp: u8,
    /// Link layer.
    pub port_type: PortType,
    /// Number of physical ports (≥ 1).
    pub num_ports: u8,
    /// Number of vHCA ports (`SET_ROCE_ADDRESS` names the port only when this is non-zero).
    pub num_vhca_ports: u8,
    /// Max send WQE size in bytes (≥ 64).
    pub max_wqe_sz_sq: u16,
    /// Max receive WQE size in bytes (≥ 16).
    pub max_wqe_sz_rq: u16,
    /// log2 BlueFlame register size in bytes (6..=10).
    pub log_bf_reg_size: u8,
    /// BlueFlame supported.
    pub bf: bool,
    /// CQE version (0 or 1).
    pub cqe_version: u8,
    /// RC supported.
    pub rc: bool,
    /// UD supported.
    pub ud: bool,
    /// UC supported.
    pub uc: bool,
    /// XRC supported.
    pub xrc: bool,
    /// RoCE supported.
    pub roce: bool,
    /// Atomic operations supported.
    pub atomic: bool,
    /// GID table size (encoded, as reported).
    pub gid_table_size: u16,
    /// P_Key table size (encoded, as reported).
    pub pkey_table_size: u16,
    /// This function's vHCA id.
    pub vhca_id: u16,
    /// Frequency of the internal timer in kHz.
    pub device_frequency_khz: u32,
    /// Fast teardown supported.
    pub fast_teardown: bool,
    /// Force teardown supported.
    pub force_teardown: bool,
    /// `log_uar_page_sz` in effect (0 on 4 KB pages).
    pub log_uar_page_sz: u16,
    /// Command checksums in effect (`cmdif_checksum`, 0 = off).
    pub cmdif_checksum: u8,
    /// RoCE: size of the RoCE address (GID) table, from the RoCE capability page (0 when not
    /// queried).
    pub roce_address_table_size: u16,
    /// RoCE: software may choose the RoCE v2 UDP source port.
    pub sw_r_roce_src_udp_port: bool,
    /// Atomics: the operations (`atomic_caps::OPS_*` bits) from the atomic capability page (0
    /// when the device has no atomics).
    pub atomic_operations: u16,
    /// Atomics: operand sizes on QPs (`atomic_caps::SIZE_QP_*` bits).
    pub atomic_size_qp: u16,
    /// Atomics: the 8-byte original value an atomic returns lands in local memory in host
    /// byte order (`atomic_req_8B_endianness_mode` = host endianness, which the driver sets
    /// when the device supports it, as Linux does; or a big-endian host). Otherwise it lands
    /// big-endian.
    pub atomic_response_host_order: bool,
}

fn bad(field: CapField, value: u32) -> OutputFault {
    OutputFault::Capability { field, value }
}

/// Checks `value <= max`.
fn at_most(field: CapField, value: u32, max: u32) -> Result<u8, OutputFault> {
    if value > max {
        return Err(bad(field, value));
    }
    Ok(value as u8)
}

impl Caps {
    /// Parses and validates a general capability block (`cmd_hca_cap`, the first 256 bytes of
    /// the 4096-byte block of QUERY_HCA_CAP).
    pub fn parse(block: &[u8]) -> Result<Caps, OutputFault> {
        use CapField as F;
        let g = |f: firmware_interface::Field| f.get(block);
        let port_type = match g(c::PORT_TYPE) {
            c::PORT_TYPE_IB => PortType::InfiniBand,
            c::PORT_TYPE_ETH => PortType::Ethernet,
            v => return Err(bad(F::PortType, v)),
        };
        let num_ports = g(c::NUM_PORTS);
        if num_ports == 0 {
            return Err(bad(F::NumPorts, 0));
        }
        let max_wqe_sz_sq = g(c::MAX_WQE_SZ_SQ);
        if max_wqe_sz_sq < 64 {
            return Err(bad(F::MaxWqeSzSq, max_wqe_sz_sq));
        }
        let max_wqe_sz_rq = g(c::MAX_WQE_SZ_RQ);
        if max_wqe_sz_rq < 16 {
            return Err(bad(F::MaxWqeSzRq, max_wqe_sz_rq));
        }
        // Two BlueFlame registers (the regular ones) from UAR offset 0x800 must fit in 4 KB.
        let log_bf_reg_size = g(c::LOG_BF_REG_SIZE);
        if !(6..=10).contains(&log_bf_reg_size) {
            return Err(bad(F::LogBfRegSize, log_bf_reg_size));
        }
        Ok(Caps {
            log_max_qp: at_most(F::LogMaxQp, g(c::LOG_MAX_QP), 24)?,
            log_max_qp_sz: at_most(F::LogMaxQpSz, g(c::LOG_MAX_QP_SZ), 16)?,
            log_max_srq: at_most(F::LogMaxSrq, g(c::LOG_MAX_SRQ), 24)?,
            log_max_srq_sz: at_most(F::LogMaxSrqSz, g(c::LOG_MAX_SRQ_SZ), 16)?,
            log_max_cq: at_most(F::LogMaxCq, g(c::LOG_MAX_CQ), 24)?,
            log_max_cq_sz: at_most(F::LogMaxCqSz, g(c::LOG_MAX_CQ_SZ), 24)?,
            log_max_eq: g(c::LOG_MAX_EQ) as u8,
            log_max_eq_sz: at_most(F::LogMaxEqSz, g(c::LOG_MAX_EQ_SZ), 24)?,
            log_max_mkey: at_most(F::LogMaxMkey, g(c::LOG_MAX_MKEY), 24)?,
            log_max_pd: at_most(F::LogMaxPd, g(c::LOG_MAX_PD), 24)?,
            log_max_transport_domain: at_most(
                F::LogMaxTransportDomain,
                g(c::LOG_MAX_TRANSPORT_DOMAIN),
                24,
            )?,
            log_max_msg: at_most(F::LogMaxMsg, g(c::LOG_MAX_MSG), 31)?,
            log_max_ra_req_qp: at_most(F::LogMaxRa, g(c::LOG_MAX_RA_REQ_QP), 31)?,
            log_max_ra_res_qp: at_most(F::LogMaxRa, g(c::LOG_MAX_RA_RES_QP), 31)?,
            port_type,
            num_ports: num_ports as u8,
            num_vhca_ports: g(c::NUM_VHCA_PORTS) as u8,
            max_wqe_sz_sq: max_wqe_sz_sq as u16,
            max_wqe_sz_rq: max_wqe_sz_rq as u16,
            log_bf_reg_size: log_bf_reg_size as u8,
            bf: g(c::BF) != 0,
            cqe_version: at_most(F::CqeVersion, g(c::CQE_VERSION), 1)?,
            rc: g(c::RC) != 0,
            ud: g(c::UD) != 0,
            uc: g(c::UC) != 0,
            xrc: g(c::XRC) != 0,
            roce: g(c::ROCE) != 0,
            atomic: g(c::ATOMIC) != 0,
            gid_table_size: g(c::GID_TABLE_SIZE) as u16,
            pkey_table_size: g(c::PKEY_TABLE_SIZE) as u16,
            vhca_id: g(c::VHCA_ID) as u16,
            device_frequency_khz: g(c::DEVICE_FREQUENCY_KHZ),
            fast_teardown: g(c::FAST_TEARDOWN) != 0,
            force_teardown: g(c::FORCE_TEARDOWN) != 0,
            log_uar_page_sz: g(c::LOG_UAR_PAGE_SZ) as u16,
            cmdif_checksum: g(c::CMDIF_CHECKSUM) as u8,
            roce_address_table_size: 0,
            sw_r_roce_src_udp_port: false,
            atomic_operations: 0,
            atomic_size_qp: 0,
            atomic_response_host_order: false,
        })
    }

    /// Adds the fields of the RoCE capability page (`roce_cap`).
    pub(crate) fn add_roce(&mut self, block: &[u8]) {
        self.roce_address_table_size = roce_cap::ROCE_ADDRESS_TABLE_SIZE.get(block) as u16;
        self.sw_r_roce_src_udp_port = roce_cap::SW_R_ROCE_SRC_UDP_PORT.get(block) != 0;
    }

    /// Adds the fields of the current atomic capability page (`atomic_caps`); a response mode
    /// other than big-endian (0) or host endianness (1) is a bad output.
    pub(crate) fn add_atomic(&mut self, block: &[u8]) -> Result<(), OutputFault> {
        let mode = atomic_caps::ATOMIC_REQ_8B_ENDIANNESS_MODE.get(block);
        if mode != atomic_caps::REQ_MODE_BE && mode != atomic_caps::REQ_MODE_HOST_ENDIANNESS {
            return Err(bad(CapField::AtomicReqEndiannessMode, mode));
        }
        self.atomic_operations = atomic_caps::ATOMIC_OPERATIONS.get(block) as u16;
        self.atomic_size_qp = atomic_caps::ATOMIC_SIZE_QP.get(block) as u16;
        self.atomic_response_host_order =
            mode == atomic_caps::REQ_MODE_HOST_ENDIANNESS || cfg!(target_endian = "big");
        Ok(())
    }

    /// Whether `n` is a possible number of an object counted by `log_max` (fits 24 bits and
    /// is below `2^log_max`).
    pub(crate) fn fits(n: u32, log_max: u8) -> bool {
        n <= 0xff_ffff && (n as u64) < (1u64 << log_max.min(24))
    }
}

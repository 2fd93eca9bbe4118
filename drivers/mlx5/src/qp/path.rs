//! The address path of a connected QP (`ads`, Linux `mlx5_set_path`) and the path MTU:
//! [`Mtu`] for connected QPs, the fixed values of datagram QPs.

use firmware_interface::Field;
use firmware_interface::cmds::rst2init_qp_in;
use firmware_interface::ctx::{ads, qpc};
use nic_hal::{Platform, RegisterIo};

use crate::caps::PortType;
use crate::device::Device;

use super::ServiceType;

/// Path MTU (`qpc.mtu`, IB encoding).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256,
    /// 512 bytes.
    Mtu512,
    /// 1024 bytes.
    #[default]
    Mtu1024,
    /// 2048 bytes.
    Mtu2048,
    /// 4096 bytes.
    Mtu4096,
}

impl Mtu {
    pub(super) fn prm(self) -> u32 {
        match self {
            Mtu::Mtu256 => qpc::MTU_256,
            Mtu::Mtu512 => qpc::MTU_512,
            Mtu::Mtu1024 => qpc::MTU_1024,
            Mtu::Mtu2048 => qpc::MTU_2048,
            Mtu::Mtu4096 => qpc::MTU_4096,
        }
    }

    /// The MTU in bytes.
    #[cfg_attr(not(feature = "raw"), allow(dead_code))]
    pub fn bytes(self) -> u32 {
        128 << self.prm()
    }
}

/// Primary address path of a connected QP (`ads`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressPath {
    /// Destination GID (RoCE v2 over IPv4: IPv4-mapped IPv6 address).
    pub rgid: [u8; 16],
    /// Destination MAC (RoCE).
    pub rmac: [u8; 6],
    /// Source GID index.
    pub src_gid_index: u8,
    /// Hop limit / TTL.
    pub hop_limit: u8,
    /// Traffic class (RoCE v2: DSCP = `traffic_class >> 2`).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// RoCE v2 UDP source port.
    pub udp_sport: u16,
    /// Service level (IB: SL; RoCE: Ethernet priority = `sl & 7`).
    pub sl: u8,
    /// Destination LID (IB).
    pub dlid: u16,
    /// A GRH is present (IB; RoCE always has one).
    pub grh: bool,
    /// Static rate code (0 = port rate).
    pub stat_rate: u8,
    /// Local ACK timeout (IB 5-bit code: 4.096 µs × 2^n), set at RTR2RTS.
    pub ack_timeout: u8,
}

impl Default for AddressPath {
    fn default() -> Self {
        AddressPath {
            rgid: [0; 16],
            rmac: [0; 6],
            src_gid_index: 0,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
            udp_sport: 0,
            sl: 0,
            dlid: 0,
            grh: false,
            stat_rate: 0,
            ack_timeout: 14,
        }
    }
}

/// The path MTU code and `log_msg_max` of a datagram QP, as Linux's mlx5_ib sets them: GSI
/// (QP1) 256 bytes / 2^8, UD 4096 bytes / 2^12 (a UD message is one packet). `None` for
/// connected QPs (their MTU comes from [`QpModify::mtu`](super::QpModify::mtu)).
pub(crate) fn datagram_mtu(service: ServiceType) -> Option<(u32, u32)> {
    match service {
        ServiceType::Gsi => Some((qpc::MTU_256, 8)),
        ServiceType::Ud => Some((qpc::MTU_4096, 12)),
        ServiceType::Rc => None,
    }
}

/// Writes `v` into field `f` of the QPC's primary address path.
pub(super) fn pp(buf: &mut [u8], f: Field, v: u32) {
    f.at(rst2init_qp_in::QPC.byte_off() + qpc::PRIMARY_ADDRESS_PATH.byte_off())
        .set(buf, v);
}

pub(super) fn pp_bytes(buf: &mut [u8], f: Field, v: &[u8]) {
    let f = f.at(rst2init_qp_in::QPC.byte_off() + qpc::PRIMARY_ADDRESS_PATH.byte_off());
    if let Some(d) = f.slice_mut(buf)
        && d.len() == v.len()
    {
        d.copy_from_slice(v);
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// The primary path fields of INIT2RTR (`docs/mlx5.md#qp-context`, Linux `mlx5_set_path`).
    pub(super) fn write_path(&self, inp: &mut [u8], p: &AddressPath) {
        pp(inp, ads::STAT_RATE, p.stat_rate as u32);
        match self.caps.port_type {
            PortType::Ethernet => {
                pp(inp, ads::SRC_ADDR_INDEX, p.src_gid_index as u32);
                pp(inp, ads::HOP_LIMIT, p.hop_limit as u32);
                pp(inp, ads::TCLASS, p.traffic_class as u32);
                pp(inp, ads::FLOW_LABEL, p.flow_label);
                pp_bytes(inp, ads::RGID_RIP, &p.rgid);
                pp_bytes(inp, ads::RMAC, &p.rmac);
                pp(inp, ads::UDP_SPORT, p.udp_sport as u32);
                pp(inp, ads::DSCP, (p.traffic_class >> 2) as u32);
                pp(inp, ads::ETH_PRIO, (p.sl & 7) as u32);
            }
            PortType::InfiniBand => {
                pp(inp, ads::RLID, p.dlid as u32);
                pp(inp, ads::SL, p.sl as u32);
                if p.grh {
                    pp(inp, ads::GRH, 1);
                    pp(inp, ads::SRC_ADDR_INDEX, p.src_gid_index as u32);
                    pp(inp, ads::HOP_LIMIT, p.hop_limit as u32);
                    pp(inp, ads::TCLASS, p.traffic_class as u32);
                    pp(inp, ads::FLOW_LABEL, p.flow_label);
                    pp_bytes(inp, ads::RGID_RIP, &p.rgid);
                }
            }
        }
    }
}

//! Address handles: the 48-byte datagram segment (address vector, `docs/mlx5.md#other-segments`) of
//! UD sends, built once at creation; `post_send` copies it and fills in the destination QPN and
//! Q_Key.

use firmware_interface::wqe::{self, DatagramSeg};
use firmware_interface::{Be16, Be32};
use nic_hal::{Platform, RegisterIo};
use verbs::AhAttr;

use crate::caps::PortType;
use crate::device::Device;
use crate::error::Error;

/// The RoCE v2 UDP source port for a flow label: the IANA ephemeral range (0xc000 and up),
/// low 14 bits from the flow label folded (`fl[13:0] ^ fl[19:14]`); 0xc000 for flow label 0.
pub const fn roce_udp_sport(flow_label: u32) -> u16 {
    let fl = flow_label & wqe::AV_FLOW_LABEL_MASK;
    (0xc000 | ((fl & 0x3fff) ^ ((fl >> 14) & 0x3f))) as u16
}

/// An address handle: a ready datagram segment (Q_Key and destination QPN zero, filled per
/// work request).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ah {
    pub(crate) av: [[u8; 16]; 3],
    pd: u32,
    attr: AhAttr,
}

impl Ah {
    /// The datagram segment as built (Q_Key 0, `dqp_dct` = `EXTENDED_UD_AV`).
    pub fn datagram(&self) -> DatagramSeg {
        let mut b = [0u8; 48];
        for (i, u) in self.av.iter().enumerate() {
            b[i * 16..i * 16 + 16].copy_from_slice(u);
        }
        DatagramSeg::from_bytes(&b)
    }

    /// Protection domain.
    pub fn pd(&self) -> u32 {
        self.pd
    }

    /// The attributes it was made from.
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Builds an address handle (no command: the AV lives in the driver). RoCE: `is_global`
    /// must be set (RoCE packets always carry a GRH), `dmac` must be given (there is no
    /// neighbour resolution here), `sgid_index` must be inside the GID table; the UDP source
    /// port comes from the flow label (as Linux's `rdma_flow_label_to_udp_sport`), the priority from `sl & 7`.
    /// InfiniBand: LID routed, with a GRH when `is_global`.
    pub fn create_ah(&self, pd: u32, attr: &AhAttr) -> Result<Ah, Error> {
        let caps = &self.caps;
        if pd > 0xff_ffff
            || attr.port_num == 0
            || attr.port_num > caps.num_ports
            || attr.flow_label > wqe::AV_FLOW_LABEL_MASK
            || attr.sl > 15
            || attr.static_rate > 15
        {
            return Err(Error::InvalidArgument);
        }
        let mut av = DatagramSeg {
            dqp_dct: Be32::new(wqe::EXTENDED_UD_AV),
            ..DatagramSeg::default()
        };
        let grh = (attr.sgid_index as u32) << wqe::AV_SGID_INDEX_SHIFT | attr.flow_label;
        match caps.port_type {
            PortType::Ethernet => {
                let table = caps.roce_address_table_size;
                if !attr.is_global
                    || attr.dmac == [0; 6]
                    || (table != 0 && attr.sgid_index as u16 >= table)
                {
                    return Err(Error::InvalidArgument);
                }
                av.stat_rate_sl = (attr.static_rate << 4) | ((attr.sl & 7) << 1);
                av.rlid = Be16::new(roce_udp_sport(attr.flow_label));
                av.rmac = attr.dmac;
                av.tclass = attr.traffic_class;
                av.hop_limit = attr.hop_limit;
                av.grh_gid_fl = Be32::new(grh);
                av.rgid = attr.dgid.0;
            }
            PortType::InfiniBand => {
                av.stat_rate_sl = (attr.static_rate << 4) | attr.sl;
                av.fl_mlid = attr.src_path_bits & 0x7f;
                av.rlid = Be16::new(attr.dlid);
                if attr.is_global {
                    av.tclass = attr.traffic_class;
                    av.hop_limit = attr.hop_limit;
                    av.grh_gid_fl = Be32::new(wqe::AV_GRH | grh);
                    av.rgid = attr.dgid.0;
                }
            }
        }
        let b = av.to_bytes();
        let mut units = [[0u8; 16]; 3];
        for (i, u) in units.iter_mut().enumerate() {
            u.copy_from_slice(&b[i * 16..i * 16 + 16]);
        }
        Ok(Ah {
            av: units,
            pd,
            attr: *attr,
        })
    }
}

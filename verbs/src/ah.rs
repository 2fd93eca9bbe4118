//! Address handles from a received datagram (`ibv_init_ah_from_wc` / `ibv_create_ah_from_wc`):
//! the reply to a UD sender goes where its work completion and the 40 bytes in front of its
//! payload (the GRH area) say it came from.

use crate::error::Error;
use crate::provider::Provider;
use crate::types::{AhAttr, Gid};
use crate::wr::WorkCompletion;

/// Bytes in front of every UD receive's payload (`sizeof(struct ibv_grh)`).
pub const GRH_SIZE: usize = 40;

/// The address attributes of a reply to the sender of the UD receive `wc`, whose first
/// [`GRH_SIZE`] bytes are `grh` (`ibv_init_ah_from_wc`), from source GID index `sgid_index` of
/// port `port_num`:
/// * a RoCEv2 datagram over IPv4 has 20 unused bytes then the sender's IPv4 header there:
///   the destination GID is the IPv4-mapped source address, the hop limit its TTL, the
///   traffic class its TOS;
/// * an IPv6 (RoCEv2) or IB GRH (version 6): the destination GID is its source GID, the
///   flow label and traffic class are the sender's, the hop limit 0xFF (as rdma-core sets it).
///
/// The Ethernet address is not in the datagram: `dmac` stays zero, for the caller to fill in
/// from its neighbour table (a connection manager's). EINVAL when `grh` is shorter than 40
/// bytes or holds neither header.
pub fn init_ah_from_wc(
    port_num: u8,
    sgid_index: u8,
    wc: &WorkCompletion,
    grh: &[u8],
) -> Result<AhAttr, Error> {
    let g = grh.get(..GRH_SIZE).ok_or(Error::InvalidArgument)?;
    let base = AhAttr {
        sgid_index,
        is_global: true,
        port_num,
        sl: wc.sl,
        dlid: wc.slid,
        ..AhAttr::default()
    };
    // IPv4: version 4, a 20-byte header (IHL 5) after 20 unused bytes
    if g[..20].iter().all(|b| *b == 0) && g[20] == 0x45 {
        let src = [g[32], g[33], g[34], g[35]];
        return Ok(AhAttr {
            dgid: Gid::from_ipv4(src),
            hop_limit: g[28],
            traffic_class: g[21],
            ..base
        });
    }
    if g[0] >> 4 == 6 {
        let vtf = u32::from_be_bytes([g[0], g[1], g[2], g[3]]);
        let mut sgid = [0u8; 16];
        sgid.copy_from_slice(&g[8..24]);
        return Ok(AhAttr {
            dgid: Gid(sgid),
            flow_label: vtf & 0xF_FFFF,
            traffic_class: (vtf >> 20) as u8,
            hop_limit: 0xFF,
            ..base
        });
    }
    Err(Error::InvalidArgument)
}

/// An address handle on `pd` for a reply to the sender of `wc` (`ibv_create_ah_from_wc`):
/// [`init_ah_from_wc`] with `dmac` (the sender's Ethernet address, from a neighbour table),
/// then [`Provider::create_ah`].
pub fn create_ah_from_wc<P: Provider>(
    p: &P,
    pd: &P::Pd,
    port_num: u8,
    wc: &WorkCompletion,
    grh: &[u8],
    dmac: [u8; 6],
) -> Result<P::Ah, Error> {
    let attr = AhAttr {
        dmac,
        ..init_ah_from_wc(port_num, 0, wc, grh)?
    };
    p.create_ah(pd, &attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_and_ipv6_headers_give_the_senders_gid() {
        let wc = WorkCompletion {
            src_qp: 77,
            ..WorkCompletion::default()
        };
        let mut g = [0u8; 40];
        g[20] = 0x45;
        g[21] = 0x68; // TOS
        g[28] = 63; // TTL
        g[32..36].copy_from_slice(&[10, 0, 0, 9]);
        let a = init_ah_from_wc(1, 0, &wc, &g).unwrap();
        assert_eq!(a.dgid, Gid::from_ipv4([10, 0, 0, 9]));
        assert_eq!((a.hop_limit, a.traffic_class, a.port_num), (63, 0x68, 1));
        assert!(a.is_global);

        let mut g = [0u8; 40];
        g[..4].copy_from_slice(&(6u32 << 28 | 0x2A << 20 | 0x12345).to_be_bytes());
        g[8..24].copy_from_slice(&[0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
        let a = init_ah_from_wc(1, 2, &wc, &g).unwrap();
        assert_eq!(a.dgid.0[..2], [0xfe, 0x80]);
        assert_eq!(
            (a.flow_label, a.traffic_class, a.hop_limit, a.sgid_index),
            (0x12345, 0x2A, 0xFF, 2)
        );

        assert_eq!(
            init_ah_from_wc(1, 0, &wc, &[0u8; 40]),
            Err(Error::InvalidArgument)
        );
        assert_eq!(
            init_ah_from_wc(1, 0, &wc, &[0u8; 39]),
            Err(Error::InvalidArgument)
        );
    }
}

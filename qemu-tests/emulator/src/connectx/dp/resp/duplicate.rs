//! Duplicate requests (a PSN before the expected one): re-ACK a SEND or WRITE, replay a READ
//! from the resource that covers it, resend an atomic's saved result.

use roce_wire::packet::{OpKind, PacketView};
use roce_wire::transport::{psn_add, psn_diff};

use super::Resource;
use crate::Device;
use crate::connectx::dp::QpInfo;
use crate::connectx::dp::mkey::{Sgl, access};

impl Device {
    /// A request with a PSN already executed (C9-105 and the responder resources).
    pub(super) fn duplicate(&mut self, qpn: u32, info: &QpInfo, pkt: &PacketView<'_>) {
        self.net.stats.rx_duplicates += 1;
        let Some(qp) = self.obj.qps.get(qpn) else {
            return;
        };
        let r = &qp.dp.resp;
        let epsn = r.epsn;
        let psn = pkt.bth.psn;
        match pkt.bth.opcode.kind() {
            OpKind::Send | OpKind::RdmaWrite
                if pkt.bth.ack_req || pkt.bth.opcode.position().ends_message() =>
            {
                self.queue_ack(qpn, pkt, psn_add(epsn, 0xff_ffff));
            }
            OpKind::RdmaReadRequest => {
                let Some(reth) = pkt.ext.reth else {
                    return;
                };
                let found = r.res.iter().rev().find_map(|x| match *x {
                    Resource::Read {
                        first,
                        last,
                        va,
                        rkey,
                        len,
                    } if psn_diff(psn, first) >= 0 && psn_diff(psn, last) <= 0 => {
                        Some((va, rkey, len))
                    }
                    _ => None,
                });
                let Some((va, rkey, len)) = found else {
                    return;
                };
                let end = va.saturating_add(u64::from(len));
                let req_end = reth.va.saturating_add(u64::from(reth.dma_len));
                if reth.rkey != rkey || reth.va < va || req_end > end || !info.rre {
                    return;
                }
                let dlen = u64::from(reth.dma_len);
                let sgl = if dlen == 0 {
                    Sgl::default()
                } else {
                    match self.translate(reth.rkey, info.pd, reth.va, dlen, access::RR) {
                        Ok(s) => s,
                        Err(_) => return,
                    }
                };
                let _ = self.read_responses(info, pkt, psn, &sgl, dlen);
            }
            OpKind::CompareSwap | OpKind::FetchAdd => {
                let found = r.res.iter().rev().find_map(|x| match *x {
                    Resource::Atomic { psn: p, orig } if p == psn => Some(orig),
                    _ => None,
                });
                if let Some(orig) = found {
                    self.atomic_reply(qpn, info, pkt, psn, orig);
                }
            }
            _ => {}
        }
    }
}

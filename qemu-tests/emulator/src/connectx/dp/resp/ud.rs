//! UD receive: Q_Key check, the 40-byte GRH area, the scatter and the completion.
//!
//! A message longer than the receive WQE's buffers (GRH area included) is the IB spec's
//! responder length error, which for the unreliable services is not the QP's error: without
//! an SRQ it is dropped silently (the spec's class D: no completion, the WQE stays posted for
//! the next message, counted in `rx_too_long`); with an SRQ the WQE taken for it completes
//! with a local length error (class E). The QP stays in RTS either way, so one hostile
//! datagram cannot stop a UD QP (QP1 included). Linux's software RoCE (rxe) classifies and
//! handles this case the same way.

use firmware_interface::cqe::{self, syndrome as cs};
use firmware_interface::ctx::qpc as q;
use firmware_interface::wqe::UD_GRH_SIZE;
use roce_wire::packet::{GSI_QKEY, IPPROTO_UDP, Ipv4Header, PacketView};

use super::{RespErr, receives};
use crate::Device;
use crate::connectx::objects::QP1;

impl Device {
    /// A UD packet for QP `dest_qp`.
    pub(crate) fn ud_rx(&mut self, pkt: &PacketView<'_>, frame_len: usize) {
        let qpn = pkt.bth.dest_qp;
        let Some(info) = self.qp_info(qpn) else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        let dgram = info.st == q::ST_UD || info.st == q::ST_QP1;
        if !dgram || !receives(info.state) {
            self.net.stats.rx_dropped += 1;
            return;
        }
        let Some(deth) = pkt.ext.deth else {
            self.net.stats.rx_dropped += 1;
            return;
        };
        let want = if qpn == QP1 { GSI_QKEY } else { info.qkey };
        if deth.qkey != want {
            self.net.stats.rx_qkey_mismatch += 1;
            return;
        }
        let sgl = match self.reserve_recv(qpn) {
            Ok(s) => s,
            Err(RespErr::Rnr | RespErr::Invalid) => {
                self.net.stats.rx_no_wqe += 1;
                return;
            }
            Err(RespErr::Local(synd, _)) => {
                self.resp_err_cqe(qpn, &info, synd);
                self.qp_to_err(qpn, None);
                return;
            }
            Err(_) => {
                self.qp_fatal(qpn);
                return;
            }
        };
        let total = UD_GRH_SIZE as u64 + pkt.payload.len() as u64;
        if total > sgl.len {
            if self.srq_of(qpn).is_some() {
                // class E: the SRQ's WQE is consumed and completes in error
                self.resp_err_cqe(qpn, &info, cs::LOCAL_LENGTH_ERR);
            } else {
                // class D: silently dropped, the WQE stays
                self.net.stats.rx_too_long += 1;
            }
            return;
        }
        // The GRH area for RoCE v2 over IPv4: 20 zero bytes, then the IPv4 header.
        let ip = Ipv4Header {
            tos: pkt.tos,
            total_length: u16::try_from(frame_len).unwrap_or(u16::MAX),
            identification: pkt.ip_id,
            dont_fragment: true,
            more_fragments: false,
            fragment_offset: 0,
            ttl: pkt.ttl,
            protocol: IPPROTO_UDP,
            src: pkt.src_ip,
            dst: pkt.dst_ip,
        };
        let mut grh = [0u8; UD_GRH_SIZE];
        grh[20..].copy_from_slice(&ip.to_bytes());
        if self.sgl_write(&sgl, 0, &grh).is_err()
            || self
                .sgl_write(&sgl, UD_GRH_SIZE as u64, pkt.payload)
                .is_err()
        {
            self.resp_err_cqe(qpn, &info, cs::LOCAL_ACCESS_ERR);
            self.qp_to_err(qpn, None);
            return;
        }
        let imm = pkt.ext.imm_dt.map(|i| i.imm);
        let op = if imm.is_some() {
            cqe::opcode::RESP_SEND_IMM
        } else {
            cqe::opcode::RESP_SEND
        };
        self.resp_cqe(
            qpn,
            &info,
            op,
            total as u32,
            imm,
            pkt.bth.solicited,
            deth.src_qp,
            true,
        );
    }
}

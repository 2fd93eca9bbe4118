//! The MAD transport: a device's GSI QP (QP1) with its buffers, carrying CM MADs to and from
//! QP1 of the peers; the first [`Transport`] (the only place that knows of QP1). The same
//! machinery, with another [`Framing`], carries the datagram transport of a device without
//! QP1 ([`crate::dgram`]): a UD QP of the manager's own, each MAD behind a header that names
//! its sender.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::net::Ipv4Addr;

use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Provider, QpAttr, QpAttrMask, QpCap,
    QpInitAttr as VerbsQpInitAttr, QpState, QpType, QueuePair, RecvWr, SendFlags, SendWr, Sge,
    UdDest, WcStatus, WorkCompletion, WrOpcode,
};

use crate::conn::Peer;
use crate::error::Error;
use crate::mad::{self, DGRAM_CM_QKEY, DGRAM_HEADER_SIZE, DgramHeader, GSI_QKEY, MadBytes};
use crate::qp::{qp_init, qp_to_err};
use crate::slab::Key;
use crate::transport::{Received, Transport};

const SLOT: usize = 512;
const GRH: usize = 40;
const SEND_BIT: u64 = 1 << 32;
/// Peer device addresses the datagram transport remembers.
const MAX_LEARNT_GIDS: usize = 4096;

/// How MADs travel on the QP.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Framing {
    /// The GSI QP: a bare MAD to QP1 with the GSI Q_Key; a receive starts with the 40-byte
    /// GRH area, whose IP header names the sender.
    Grh,
    /// A UD QP of the manager's (a device without QP1): a [`DgramHeader`] naming this
    /// manager (`ip`, `gid`; the QPN is the QP's) then the MAD, with [`DGRAM_CM_QKEY`]; a
    /// receive has no GRH area, the sender is the one its header names.
    Header { ip: Ipv4Addr, gid: Gid },
}

impl Framing {
    /// Bytes in front of the MAD in a receive buffer.
    fn prefix(&self) -> usize {
        match self {
            Framing::Grh => GRH,
            Framing::Header { .. } => DGRAM_HEADER_SIZE,
        }
    }
    fn qp_type(&self) -> QpType {
        match self {
            Framing::Grh => QpType::Gsi,
            Framing::Header { .. } => QpType::Ud,
        }
    }
    fn qkey(&self) -> u32 {
        match self {
            Framing::Grh => GSI_QKEY,
            Framing::Header { .. } => DGRAM_CM_QKEY,
        }
    }
}

/// The MAD QP of a device: its GSI QP (QP1, [`QpType::Gsi`]; on Linux the kernel's MAD layer
/// owns it), its CQ, and registered buffers: `recv` slots then `send` slots of 512 bytes.
/// MADs go to QP1 of the peer with the GSI Q_Key, P_Key index 0.
pub(crate) struct Gsi<P: Provider> {
    pub qp: P::Qp,
    cq: P::Cq,
    pd: P::Pd,
    mr: P::Mr,
    /// The slots (the MR holds another handle to them).
    buf: Buffer,
    recv_slots: u16,
    send_slots: u16,
    pub free_send: Vec<u16>,
    /// Address handles by peer address, with the GID each was made for.
    ahs: Vec<(Ipv4Addr, Gid, P::Ah)>,
    /// Device addresses the peers' datagram headers gave (the datagram transport).
    gids: Vec<(Ipv4Addr, Gid)>,
    framing: Framing,
    /// An error completion was seen: the QP is (or is going) to the error state, so it must
    /// be reset and its receives posted again.
    broken: bool,
}

// ------------------------------------------------------------------ the device MAD QP

impl<P: Provider> Gsi<P> {
    pub(crate) fn create(p: &P, recv_slots: u16, send_slots: u16) -> Result<Gsi<P>, Error> {
        Self::create_framed(p, recv_slots, send_slots, Framing::Grh)
    }

    /// The QP of `framing` (GSI or UD) with its buffers, every receive posted.
    pub(crate) fn create_framed(
        p: &P,
        recv_slots: u16,
        send_slots: u16,
        framing: Framing,
    ) -> Result<Gsi<P>, Error> {
        let (recv_slots, send_slots) = (recv_slots.max(1), send_slots.max(1));
        let total = recv_slots as usize + send_slots as usize;
        let pd = p.alloc_pd()?;
        let made = (|| {
            let cq = p.create_cq(total as u32 + 1, 0, None)?;
            let buf = match p.alloc_buf(total * SLOT) {
                Ok(b) => b,
                Err(e) => {
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            // (On the failure paths below, a failed `dereg_mr` leaves the memory with the
            // MR, which keeps it: dropping `buf` then frees nothing the device can reach.)
            let mr = match p.reg_mr(&pd, buf.clone(), AccessFlags::LOCAL_WRITE) {
                Ok(m) => m,
                Err(e) => {
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            let qp = p.create_qp(
                &pd,
                &VerbsQpInitAttr {
                    qp_type: framing.qp_type(),
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCap {
                        max_send_wr: send_slots as u32,
                        max_recv_wr: recv_slots as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                    sq_sig_all: true,
                },
            );
            let mut qp = match qp {
                Ok((qp, _)) => qp,
                Err(e) => {
                    let _ = p.dereg_mr(mr);
                    let _ = p.destroy_cq(cq);
                    return Err(e.into());
                }
            };
            if let Err(e) = qp_init(
                p,
                &mut qp,
                framing.qp_type(),
                AccessFlags::empty(),
                framing.qkey(),
            ) {
                let _ = p.destroy_qp(qp);
                let _ = p.dereg_mr(mr);
                let _ = p.destroy_cq(cq);
                return Err(e);
            }
            Ok((cq, buf, mr, qp))
        })();
        let (cq, buf, mr, qp) = match made {
            Ok(v) => v,
            Err(e) => {
                let _ = p.dealloc_pd(pd);
                return Err(e);
            }
        };
        let mut g = Gsi {
            qp,
            cq,
            pd,
            mr,
            buf,
            recv_slots,
            send_slots,
            free_send: (0..send_slots).rev().collect(),
            ahs: Vec::new(),
            gids: Vec::new(),
            framing,
            broken: false,
        };
        if let Err(e) = g.post_all_recvs(p) {
            g.teardown(p);
            return Err(e);
        }
        Ok(g)
    }

    /// The device address known for a peer's `ip` (the datagram transport: given, or from
    /// the peer's header).
    pub(crate) fn peer_gid(&self, ip: Ipv4Addr) -> Option<Gid> {
        self.gids.iter().find(|(i, _)| *i == ip).map(|(_, g)| *g)
    }

    /// Records `gid` as the device address of the peer at `ip` (the oldest entry goes when
    /// the table is full).
    pub(crate) fn set_peer_gid(&mut self, ip: Ipv4Addr, gid: Gid) {
        match self.gids.iter_mut().find(|(i, _)| *i == ip) {
            Some(e) => e.1 = gid,
            None => {
                if self.gids.len() >= MAX_LEARNT_GIDS {
                    self.gids.remove(0);
                }
                self.gids.push((ip, gid));
            }
        }
    }

    fn slot_addr(&self, slot: u32) -> u64 {
        self.buf.addr() + slot as u64 * SLOT as u64
    }

    fn post_recv(&mut self, p: &P, slot: u16) -> Result<(), Error> {
        let sge = [Sge {
            addr: self.slot_addr(slot as u32),
            length: (self.framing.prefix() + mad::MAD_SIZE) as u32,
            lkey: self.mr.lkey(),
        }];
        p.post_recv(
            &mut self.qp,
            &[RecvWr {
                wr_id: slot as u64,
                sg_list: &sge,
            }],
        )?;
        Ok(())
    }

    /// Sends one MAD; the datagram framing's header says `req_qp_type` (the GSI framing has
    /// no room for it).
    fn send_mad(&mut self, p: &P, to: &Peer, bytes: &MadBytes, req_qp_type: u8) -> bool {
        let Some(slot) = self.free_send.pop() else {
            return false;
        };
        let at = self.recv_slots as u32 + slot as u32;
        let off = at as usize * SLOT;
        let head = match self.framing {
            Framing::Grh => 0,
            Framing::Header { ip, gid } => {
                let h = DgramHeader {
                    ip,
                    qpn: self.qp.qp_num(),
                    gid: gid.0,
                    qp_type: req_qp_type,
                }
                .encode();
                if self.buf.write(off, &h).is_err() {
                    self.free_send.push(slot);
                    return false;
                }
                DGRAM_HEADER_SIZE
            }
        };
        if self.buf.write(off + head, bytes).is_err() {
            self.free_send.push(slot);
            return false;
        }
        // the peer's device address: the one its header gave, else its IPv4-mapped GID
        let dgid = self
            .gids
            .iter()
            .find(|(ip, _)| *ip == to.ip)
            .map_or(Gid::from_ipv4(to.ip.octets()), |(_, g)| *g);
        if let Some(i) = self
            .ahs
            .iter()
            .position(|(ip, g, _)| *ip == to.ip && *g != dgid)
        {
            let (_, _, ah) = self.ahs.swap_remove(i);
            let _ = p.destroy_ah(ah);
        }
        if !self.ahs.iter().any(|(ip, _, _)| *ip == to.ip) {
            let attr = AhAttr {
                dgid,
                sgid_index: 0,
                hop_limit: 64,
                is_global: true,
                port_num: 1,
                dmac: to.mac,
                ..AhAttr::default()
            };
            match p.create_ah(&self.pd, &attr) {
                Ok(ah) => self.ahs.push((to.ip, dgid, ah)),
                Err(_) => {
                    self.free_send.push(slot);
                    return false;
                }
            }
        }
        let Some((_, _, ah)) = self.ahs.iter().find(|(ip, _, _)| *ip == to.ip) else {
            self.free_send.push(slot);
            return false;
        };
        let sge = [Sge {
            addr: self.slot_addr(at),
            length: (head + mad::MAD_SIZE) as u32,
            lkey: self.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: SEND_BIT | slot as u64,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sge,
            dest: Some(UdDest {
                ah,
                remote_qpn: to.qpn,
                remote_qkey: self.framing.qkey(),
            }),
            ..SendWr::default()
        };
        if p.post_send(&mut self.qp, &[wr]).is_err() {
            self.free_send.push(slot);
            return false;
        }
        true
    }

    /// Polls the CQ: frees send buffers, returns received MADs as (source IP, source QPN,
    /// bytes), reposting their buffers; `bad` counts receives in error.
    fn poll_cq(&mut self, p: &P, d: Key, out: &mut Vec<Received>, bad: &mut u64) {
        let mut wc = [WorkCompletion::default(); 16];
        loop {
            let n = match p.poll_cq(&self.cq, &mut wc) {
                Ok(n) => n,
                Err(_) => {
                    *bad += 1;
                    0
                }
            };
            for w in &wc[..n] {
                if w.wr_id & SEND_BIT != 0 {
                    let slot = (w.wr_id & 0xFFFF) as u16;
                    // a completion for a buffer that is not out is the device's error
                    if slot >= self.send_slots || self.free_send.contains(&slot) {
                        *bad += 1;
                    } else {
                        self.free_send.push(slot);
                    }
                    if w.status != WcStatus::Success {
                        self.broken = true;
                    }
                    continue;
                }
                let Ok(slot) = u16::try_from(w.wr_id) else {
                    *bad += 1;
                    continue;
                };
                if slot >= self.recv_slots {
                    *bad += 1;
                    continue;
                }
                if w.status != WcStatus::Success {
                    // the QP is in error (a datagram too long for the buffer, say): the buffer
                    // is not reposted; `recover` resets the QP and posts every buffer again
                    *bad += 1;
                    self.broken = true;
                    continue;
                }
                let pre = self.framing.prefix();
                let mut m = [0u8; GRH + mad::MAD_SIZE];
                let m = &mut m[..pre + mad::MAD_SIZE];
                let ok = w.byte_len as usize >= m.len()
                    && self.buf.read(slot as usize * SLOT, m).is_ok();
                let _ = self.post_recv(p, slot);
                if !ok {
                    *bad += 1;
                    continue;
                }
                let src = match self.framing {
                    Framing::Grh => grh_source(&m[..GRH]).map(|ip| (ip, 0)),
                    Framing::Header { .. } => match DgramHeader::decode(&m[..pre]) {
                        // the header must name the QP the device says it came from
                        Some(h) if h.qpn == w.src_qp && h.gid != [0; 16] => {
                            self.set_peer_gid(h.ip, Gid(h.gid));
                            Some((h.ip, h.qp_type))
                        }
                        _ => None,
                    },
                };
                let Some((src, req_qp_type)) = src else {
                    *bad += 1;
                    continue;
                };
                let mut b = Box::new([0u8; mad::MAD_SIZE]);
                b.copy_from_slice(&m[pre..]);
                out.push(Received {
                    dev: d,
                    src,
                    src_qp: w.src_qp,
                    req_qp_type,
                    bytes: b,
                });
            }
            if n < wc.len() {
                break;
            }
        }
    }

    fn teardown(self, p: &P) {
        let Gsi {
            qp,
            cq,
            pd,
            mr,
            buf,
            ahs,
            ..
        } = self;
        for (_, _, ah) in ahs {
            let _ = p.destroy_ah(ah);
        }
        // Teardown goes on whatever fails (there is no one to report to), but memory the
        // device may still use is never freed.
        let qp_gone = p.destroy_qp(qp).is_ok();
        // A failed dereg keeps (or leaks) the MR's own handle to the slots.
        let _ = p.dereg_mr(mr);
        let _ = p.destroy_cq(cq);
        let _ = p.dealloc_pd(pd);
        if qp_gone {
            drop(buf);
        } else {
            // The QP may still exist with receives posted into the slots (and sends reading
            // them): leak the memory rather than free it under the device.
            core::mem::forget(buf);
        }
    }

    /// Drains the CQ, discarding receives (the QP is being reset) but freeing send slots.
    fn drain(&mut self, p: &P) {
        let mut wc = [WorkCompletion::default(); 16];
        while let Ok(n) = p.poll_cq(&self.cq, &mut wc) {
            if n == 0 {
                break;
            }
        }
    }

    /// ERR → RESET → INIT → RTR → RTS, every receive buffer posted again, every send buffer
    /// free. Completions of the old incarnation are drained before and after the reset.
    fn reset(&mut self, p: &P) -> Result<(), Error> {
        qp_to_err(p, &mut self.qp);
        self.drain(p);
        let a = QpAttr {
            qp_state: QpState::Reset,
            ..QpAttr::default()
        };
        p.modify_qp(&mut self.qp, &a, QpAttrMask::STATE)?;
        self.drain(p);
        qp_init(
            p,
            &mut self.qp,
            self.framing.qp_type(),
            AccessFlags::empty(),
            self.framing.qkey(),
        )?;
        self.free_send = (0..self.send_slots).rev().collect();
        self.post_all_recvs(p)
    }

    /// Posts every receive slot, a batch of work requests per call (one doorbell each).
    fn post_all_recvs(&mut self, p: &P) -> Result<(), Error> {
        const BATCH: u16 = 32;
        let len = (self.framing.prefix() + mad::MAD_SIZE) as u32;
        let lkey = self.mr.lkey();
        let mut first = 0;
        while first < self.recv_slots {
            let n = BATCH.min(self.recv_slots - first);
            let sges: Vec<[Sge; 1]> = (first..first + n)
                .map(|s| {
                    [Sge {
                        addr: self.slot_addr(s as u32),
                        length: len,
                        lkey,
                    }]
                })
                .collect();
            let wrs: Vec<RecvWr<'_>> = sges
                .iter()
                .zip(first..)
                .map(|(sge, s)| RecvWr {
                    wr_id: s as u64,
                    sg_list: sge,
                })
                .collect();
            p.post_recv(&mut self.qp, &wrs)?;
            first += n;
        }
        Ok(())
    }
}

impl<P: Provider> Transport<P> for Gsi<P> {
    fn local_endpoint(&self) -> u32 {
        self.qp.qp_num()
    }

    fn peer_endpoint(&self) -> u32 {
        mad::GSI_QPN
    }

    fn can_send(&self) -> bool {
        !self.free_send.is_empty()
    }

    fn send(&mut self, p: &P, to: &Peer, msg: &MadBytes, req_qp_type: u8) -> bool {
        self.send_mad(p, to, msg, req_qp_type)
    }

    fn poll(&mut self, p: &P, dev: Key, out: &mut Vec<Received>, bad: &mut u64) {
        self.poll_cq(p, dev, out, bad)
    }

    fn recover(&mut self, p: &P) -> Option<bool> {
        if !self.broken {
            return None;
        }
        let ok = self.reset(p).is_ok();
        self.broken = !ok;
        Some(ok)
    }

    fn destroy(self, p: &P) {
        self.teardown(p)
    }
}

/// The source IPv4 address of a UD receive's 40-byte GRH area: RoCEv2 over IPv4 puts the
/// IPv4 header in its last 20 bytes; a real GRH (IP version 6) has the source GID at 8.
fn grh_source(g: &[u8]) -> Option<Ipv4Addr> {
    if g.len() < GRH {
        return None;
    }
    if g[20] >> 4 == 4 {
        return Some(Ipv4Addr::new(g[32], g[33], g[34], g[35]));
    }
    if g[0] >> 4 == 6 {
        let mut s = [0u8; 16];
        s.copy_from_slice(&g[8..24]);
        return Gid(s).ipv4().map(Ipv4Addr::from);
    }
    None
}

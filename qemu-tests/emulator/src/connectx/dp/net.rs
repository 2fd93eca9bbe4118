//! The device's one port (`docs/rocev2.md#encapsulation`, `docs/rocev2.md#gids`): its IPv4 address,
//! the fabric attachment, the internal loopback, frame encode/decode and dispatch to the
//! transports. Packets are built and parsed only here and in the transports through
//! `roce_wire::packet::Packet`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::{Arc, RwLock};

use roce_wire::fabric::{PayloadGone, Port, Received, Segment, SegmentPayload, SegmentShape};
use roce_wire::packet::{Packet, PacketView, Transport};

use crate::connectx::state::GID_TABLE_LEN;
use crate::{AddressSpace, Device, DeviceError, DmaFault};

use super::mkey::Sgl;

/// A clock: nanoseconds from an arbitrary origin, monotonic.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

/// Frames handled in one [`Device::poll`] before it returns (fairness between devices that
/// share a thread).
const RX_BUDGET: usize = 4096;
/// Loopback frames handled in one pass (a bound, not a limit anyone should reach).
const LOOP_BUDGET: usize = 1 << 20;
/// Received frame buffers kept for reuse by the next frames sent.
const POOL_MAX: usize = 64;

/// Counters of the device's port: what went out, what came in, what was dropped and why.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Frames sent (to the fabric or to the internal loopback).
    pub tx_frames: u64,
    /// Frames that could not be sent: no fabric attached and the destination is not this
    /// device, the fabric refused the frame, or the QP had no usable source address.
    pub tx_dropped: u64,
    /// Frames received (from the fabric or the internal loopback).
    pub rx_frames: u64,
    /// Received frames that did not decode (bad ICRC, bad headers).
    pub rx_malformed: u64,
    /// Decoded frames dropped: not addressed to this device, bad P_Key, no such QP, a
    /// transport the QP does not speak, a QP state that takes no packets, a source address
    /// that is not the QP's peer.
    pub rx_dropped: u64,
    /// UD packets dropped for a Q_Key mismatch.
    pub rx_qkey_mismatch: u64,
    /// UD (and UC) messages dropped because no receive WQE was posted.
    pub rx_no_wqe: u64,
    /// UD messages longer than the receive WQE's buffers (GRH area included), dropped
    /// without a completion by a QP without an SRQ.
    pub rx_too_long: u64,
    /// Duplicate requests seen by RC responders (re-ACKed, replayed or dropped).
    pub rx_duplicates: u64,
    /// PSN sequence error NAKs sent.
    pub seq_naks_sent: u64,
    /// RNR NAKs sent.
    pub rnr_naks_sent: u64,
    /// Go-back-N rewinds by RC requesters (timeouts, sequence NAKs, RNR retries, lost read
    /// responses).
    pub retransmits: u64,
    /// Retransmission timer expiries.
    pub timeouts: u64,
}

/// The port's state.
pub(crate) struct Net {
    pub port: Option<Box<dyn Port>>,
    pub loopq: VecDeque<Vec<u8>>,
    /// QPs with a coalesced ACK pending.
    pub acks: Vec<u32>,
    pub stats: PortStats,
    pub clock: Clock,
    /// Buffers of frames already taken in, reused for frames sent (no allocation per packet
    /// once the pool has filled).
    pub pool: Vec<Vec<u8>>,
    /// `(qpn, state)` of every QP, refilled by each poll (kept to reuse its allocation).
    pub scratch_qps: Vec<(u32, u8)>,
    /// `(cqn, doorbell record, arm word seen)` of every CQ, refilled by each poll.
    pub scratch_cqs: Vec<(u32, u64, u32)>,
    /// Payload buffer of packets cut from a segment.
    pub seg_buf: Vec<u8>,
}

impl Net {
    pub(crate) fn new() -> Net {
        let t0 = std::time::Instant::now();
        Net {
            port: None,
            loopq: VecDeque::new(),
            acks: Vec::new(),
            stats: PortStats::default(),
            pool: Vec::new(),
            scratch_qps: Vec::new(),
            scratch_cqs: Vec::new(),
            seg_buf: Vec::new(),
            clock: Arc::new(move || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)),
        }
    }
}

/// What a QP's segments in flight read their payload under: `true` while the QP still
/// stands behind the packets it sent. Dropping the lease (the QP flushed, reset or destroyed:
/// its WQEs complete and the application may reuse their buffers) turns it `false`, after any
/// read in progress has finished, so a segment still in flight is then lost rather than read
/// from memory that is no longer its data.
#[derive(Debug)]
pub(crate) struct TxLease(Arc<RwLock<bool>>);

impl TxLease {
    pub(crate) fn new() -> TxLease {
        TxLease(Arc::new(RwLock::new(true)))
    }
}

impl Drop for TxLease {
    fn drop(&mut self) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

/// A segment's payload: a range of the sender's memory (already translated from its lkey
/// and checked readable), read by DMA when the receiver takes the segment in.
struct DmaPayload {
    mem: Arc<dyn AddressSpace>,
    sgl: Sgl,
    lease: Arc<RwLock<bool>>,
}

impl SegmentPayload for DmaPayload {
    fn read(&self, off: u64, dst: &mut [u8]) -> Result<(), PayloadGone> {
        let live = self.lease.read().unwrap_or_else(|e| e.into_inner());
        if !*live {
            return Err(PayloadGone);
        }
        let mut at = 0usize;
        for c in self.sgl.range(off, dst.len() as u64) {
            let n = c.len as usize;
            self.mem
                .read(c.iova, &mut dst[at..at + n])
                .map_err(|_| PayloadGone)?;
            at += n;
        }
        if at == dst.len() {
            Ok(())
        } else {
            Err(PayloadGone)
        }
    }
}

/// What became of a segment's payload placed into memory ([`Device::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Placed {
    /// Every byte is in place.
    Done,
    /// The sender withdrew the payload (what was placed before stays).
    Gone,
    /// The target range faulted in this device's IOMMU (or is shorter than the payload).
    Fault,
}

impl Net {
    /// An empty frame buffer (from the pool when it has one).
    fn take_buf(&mut self) -> Vec<u8> {
        self.pool.pop().unwrap_or_default()
    }

    /// Returns a frame buffer that is no longer needed to the pool.
    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL_MAX && buf.capacity() > 0 {
            self.pool.push(buf);
        }
    }
}

impl core::fmt::Debug for Net {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Net")
            .field("port", &self.port.as_ref().map(|p| p.addr()))
            .field("loopq", &self.loopq.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Device {
    /// The current time of the device clock, in nanoseconds.
    pub fn now(&self) -> u64 {
        (self.net.clock)()
    }

    /// The IPv4 address in GID table entry `idx`, if it is an IPv4-mapped GID.
    pub(crate) fn gid_ipv4(&self, idx: usize) -> Option<Ipv4Addr> {
        let e = self.hca.gids.get(idx)?;
        let gid: [u8; 16] = e.get(..16)?.try_into().ok()?;
        roce_wire::ipv4_from_gid(&gid).filter(|a| !a.is_unspecified())
    }

    /// The source address of packets sent with source GID index `idx`: the fabric port's
    /// address when attached, else [`crate::Profile::ipv4`], else the GID's IPv4 address.
    pub(crate) fn src_ip(&self, idx: usize) -> Option<Ipv4Addr> {
        if let Some(p) = &self.net.port {
            return Some(p.addr());
        }
        if let Some(a) = self.profile.ipv4 {
            return Some(a);
        }
        self.gid_ipv4(idx)
    }

    /// Whether `ip` is one of this device's addresses (port, profile, GID table).
    pub(crate) fn is_local(&self, ip: Ipv4Addr) -> bool {
        self.net.port.as_ref().is_some_and(|p| p.addr() == ip)
            || self.profile.ipv4 == Some(ip)
            || (0..GID_TABLE_LEN).any(|i| self.gid_ipv4(i) == Some(ip))
    }

    /// Sends a packet: to the internal loopback when the destination is this device, else to
    /// the fabric.
    pub(crate) fn emit<P: AsRef<[u8]>>(&mut self, pkt: &Packet<P>) {
        let mut frame = self.net.take_buf();
        if pkt.encode_into(&mut frame).is_err() {
            self.net.stats.tx_dropped += 1;
            self.net.recycle(frame);
            return;
        }
        self.send_frame(pkt.dst_ip, frame);
    }

    /// Sends a packet (the headers of `pkt`; its `payload` is not used) whose payload is the
    /// `len` bytes at offset `off` of `sgl` (fewer if `sgl` ends first), read by DMA
    /// straight into the frame. A DMA fault sends nothing and is returned.
    pub(crate) fn emit_sgl<P>(
        &mut self,
        pkt: &Packet<P>,
        sgl: &Sgl,
        off: u64,
        len: usize,
    ) -> Result<(), DmaFault> {
        let avail: u64 = sgl.range(off, len as u64).map(|c| c.len).sum();
        let mut frame = self.net.take_buf();
        match pkt.encode_into_with(&mut frame, avail as usize, |dst| {
            self.sgl_read_into(sgl, off, dst)
        }) {
            Err(_) => {
                self.net.stats.tx_dropped += 1;
                self.net.recycle(frame);
                Ok(())
            }
            Ok(Err(fault)) => {
                self.net.recycle(frame);
                Err(fault)
            }
            Ok(Ok(())) => {
                self.send_frame(pkt.dst_ip, frame);
                Ok(())
            }
        }
    }

    /// Whether packets to `dst` may go as [segments](Segment): the fabric carries them whole
    /// (never the internal loopback).
    pub(crate) fn segments_to(&self, dst: Option<Ipv4Addr>) -> bool {
        match (&self.net.port, dst) {
            (Some(p), Some(d)) => p.takes_segments() && !self.is_local(d),
            _ => false,
        }
    }

    /// Sends the packets `shape` names (headers from `pkt`, whose BTH is the first packet's
    /// and whose `ext` holds every extension header of the run) as one segment, its payload
    /// the `shape.len` bytes at `off` of `sgl`, read when the receiver takes it in, under QP
    /// `qpn`'s [`TxLease`]. The range must be readable now: a DMA fault sends nothing and is
    /// returned (the WQE's error, as when reading into frames).
    pub(crate) fn emit_segment<P>(
        &mut self,
        qpn: u32,
        pkt: &Packet<P>,
        shape: SegmentShape,
        sgl: &Sgl,
        off: u64,
    ) -> Result<(), DmaFault> {
        let mut part = Sgl::default();
        if !self.dma_allowed() {
            let f = DmaFault {
                iova: sgl.range(off, shape.len).next().map_or(0, |c| c.iova),
                len: usize::try_from(shape.len).unwrap_or(usize::MAX),
                write: false,
            };
            self.error(DeviceError::DmaWhileDisabled(f));
            return Err(f);
        }
        for c in sgl.range(off, shape.len) {
            if let Err(f) = self.mem.readable(c.iova, c.len) {
                self.error(DeviceError::Dma(f));
                return Err(f);
            }
            part.push(c);
        }
        let n = u64::from(shape.count);
        let lease = match self.obj.qps.get_mut(qpn) {
            Some(qp) => Arc::clone(&qp.dp.lease.get_or_insert_with(TxLease::new).0),
            None => return Ok(()),
        };
        let payload = Arc::new(DmaPayload {
            mem: Arc::clone(&self.mem),
            sgl: part,
            lease,
        });
        let seg = Segment::new(pkt.with_payload(()), shape, payload);
        self.net.stats.tx_frames += n;
        let sent = match (seg, &self.net.port) {
            (Ok(seg), Some(p)) => p.send_segment(seg).is_ok(),
            _ => false,
        };
        if !sent {
            self.net.stats.tx_dropped += n;
        }
        Ok(())
    }

    /// Places a segment's whole payload at offset `off` of `sgl`, each piece copied once,
    /// from the sender's memory straight into ours.
    pub(crate) fn place(&self, seg: &Segment, sgl: &Sgl, off: u64) -> Placed {
        if !self.dma_allowed() {
            return Placed::Fault;
        }
        let mut at = 0u64;
        for c in sgl.range(off, seg.len()) {
            let base = at;
            match self.mem.write_with(c.iova, c.len as usize, &mut |o, dst| {
                seg.read(base + o as u64, dst).is_ok()
            }) {
                Ok(true) => at += c.len,
                Ok(false) => return Placed::Gone,
                Err(_) => return Placed::Fault,
            }
        }
        if at == seg.len() {
            Placed::Done
        } else {
            Placed::Fault
        }
    }

    /// Counts a segment whose payload could not be read as dropped (every packet of it is
    /// lost); `true`: the segment is dealt with.
    pub(crate) fn segment_lost(&mut self, seg: &Segment) -> bool {
        self.net.stats.rx_dropped += u64::from(seg.count());
        true
    }

    /// Sends an encoded frame to `dst`: the internal loopback or the fabric.
    fn send_frame(&mut self, dst: Ipv4Addr, frame: Vec<u8>) {
        self.net.stats.tx_frames += 1;
        if self.is_local(dst) {
            self.net.loopq.push_back(frame);
            return;
        }
        let sent = match &self.net.port {
            Some(p) => p.send(frame).is_ok(),
            None => false,
        };
        if !sent {
            self.net.stats.tx_dropped += 1;
        }
    }

    /// Takes in one frame.
    pub(crate) fn rx_frame(&mut self, frame: &[u8]) {
        self.net.stats.rx_frames += 1;
        let pkt = match PacketView::parse(frame) {
            Ok(p) => p,
            Err(_) => {
                self.net.stats.rx_malformed += 1;
                return;
            }
        };
        self.rx_packet(&pkt, frame.len());
    }

    /// Takes in one packet (decoded from a frame of `frame_len` bytes, or cut from a
    /// segment).
    fn rx_packet(&mut self, pkt: &PacketView<'_>, frame_len: usize) {
        if !self.addressed_here(pkt) {
            self.net.stats.rx_dropped += 1;
            return;
        }
        match pkt.bth.opcode.transport() {
            Transport::Rc => self.rc_rx(pkt),
            Transport::Uc => self.uc_rx(pkt),
            Transport::Ud => self.ud_rx(pkt, frame_len),
            Transport::Cnp => self.net.stats.rx_dropped += 1,
        }
    }

    /// Whether a packet is for this device: one of its addresses, and the default P_Key
    /// (full member, 0x7fff), the only one in the table.
    fn addressed_here<P>(&self, pkt: &Packet<P>) -> bool {
        self.is_local(pkt.dst_ip) && pkt.bth.pkey & 0x7fff == 0x7fff
    }

    /// Takes in a segment: whole when the transport can ([`Device::rc_segment`]), else its
    /// packets one by one, as if they had come as frames.
    fn rx_segment(&mut self, seg: &Segment) {
        let n = u64::from(seg.count());
        self.net.stats.rx_frames += n;
        if !self.addressed_here(seg.head()) {
            self.net.stats.rx_dropped += n;
            return;
        }
        if self.rc_segment(seg) {
            return;
        }
        // Packet by packet. A payload that cannot be read (the sender withdrew it) loses the
        // rest of the segment.
        let mut buf = std::mem::take(&mut self.net.seg_buf);
        for j in 0..seg.count() {
            match seg.packet(j, &mut buf) {
                Some(Ok(pkt)) => {
                    let len = pkt.frame_len();
                    self.rx_packet(&pkt, len);
                }
                _ => {
                    self.net.stats.rx_dropped += u64::from(seg.count() - j);
                    break;
                }
            }
        }
        self.net.seg_buf = buf;
    }

    /// Delivers looped-back frames (and the ACKs they cause) until none is left.
    pub(crate) fn pump(&mut self) -> bool {
        let mut did = false;
        for _ in 0..LOOP_BUDGET {
            match self.net.loopq.pop_front() {
                Some(f) => {
                    did = true;
                    self.rx_frame(&f);
                    self.net.recycle(f);
                }
                None => {
                    if !self.flush_acks() || self.net.loopq.is_empty() {
                        break;
                    }
                }
            }
        }
        did
    }

    /// Takes in what the fabric has for this device (up to a budget).
    pub(crate) fn drain_port(&mut self) -> bool {
        let mut did = false;
        for _ in 0..RX_BUDGET {
            let f = match &self.net.port {
                Some(p) => p.recv_any(),
                None => break,
            };
            match f {
                Ok(Some(Received::Frame(f))) => {
                    did = true;
                    self.rx_frame(&f);
                    self.net.recycle(f);
                }
                Ok(Some(Received::Segment(s))) => {
                    did = true;
                    self.rx_segment(&s);
                }
                _ => break,
            }
        }
        // ACKs for the whole batch, and whatever looped back meanwhile.
        self.flush_acks();
        self.pump();
        did
    }
}

//! The device's one port (spec rocev2 §1, §10): its IPv4 address, the fabric attachment, the
//! internal loopback, frame encode/decode and dispatch to the transports. Packets are built
//! and parsed only here and in the transports through `roce_wire::packet::Packet`.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::Arc;

use roce_wire::fabric::Port;
use roce_wire::packet::{Packet, PacketView, Transport};

use crate::state::GID_TABLE_LEN;
use crate::{Device, DmaFault};

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
            clock: Arc::new(move || u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX)),
        }
    }
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
        // P_Key: the default (full member, 0x7fff) is the only one in the table.
        if !self.is_local(pkt.dst_ip) || pkt.bth.pkey & 0x7fff != 0x7fff {
            self.net.stats.rx_dropped += 1;
            return;
        }
        match pkt.bth.opcode.transport() {
            Transport::Rc => self.rc_rx(&pkt),
            Transport::Uc => self.uc_rx(&pkt),
            Transport::Ud => self.ud_rx(&pkt, frame.len()),
            Transport::Cnp => self.net.stats.rx_dropped += 1,
        }
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
                Some(p) => p.recv(),
                None => break,
            };
            match f {
                Ok(Some(f)) => {
                    did = true;
                    self.rx_frame(&f);
                    self.net.recycle(f);
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

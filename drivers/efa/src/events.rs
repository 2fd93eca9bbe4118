//! Completion events (`docs/efa.md#completion-events`): completion channels, each an event
//! queue of its own (CREATE_EQ, 16-byte EQEs), CQs created on one with interrupts enabled,
//! arming a CQ through its doorbell (`req_notify_cq`), and waits that sleep on the EQ's
//! MSI-X vector.
//!
//! The rules, as the device has them:
//!
//! * a CQ created on a channel names the channel's EQ and has interrupts enabled; a CQ
//!   doorbell with the arm bit (the consumer counter, the low two bits of the CQ's event
//!   count as `cmd_sn`, bit 31) arms it for one event: its next completion writes one EQE
//!   `{COMPLETION, cqn}` into the EQ. Solicited-only arming does not exist (EOPNOTSUPP);
//! * the EQ raises its vector for an EQE only while armed (EQ_DB with the arm bit), then
//!   disarms. The driver arms it after CREATE_EQ and again whenever it finds the ring empty
//!   after consuming events, then looks at the ring once more, so an EQE written in between is
//!   not missed;
//! * each event consumed (`get_cq_event`) increments the CQ's event count.
//!
//! Channel `k` (counted from 0 in creation order) uses vector `1 + k % (n - 1)` when the
//! platform delivers `n > 1` vectors ([`Platform::interrupts`]), vector 1 otherwise (vector 0
//! is the admin queue's). A wait reads the vector's delivery count, checks the EQ (which arms
//! it when empty), and sleeps until the vector fires or [`WAIT_RECHECK_NS`] passed; without
//! interrupts it polls, calling [`Platform::relax`].

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use core::sync::atomic::AtomicU32;
use core::sync::atomic::Ordering::Relaxed;

use firmware_interface::efa::admin::{
    EQE_EVENT_COMPLETION, EQE_EVENT_TYPE_MASK, EQE_EVENT_TYPE_SHIFT, EQE_PHASE, EQE_SIZE,
};
use firmware_interface::efa::cmds::{create_eq_cmd, create_eq_resp, destroy_eq_cmd};
use firmware_interface::efa::opcode as op;
use firmware_interface::efa::regs as r;
use nic_hal::barrier::{dma_rmb, mmio_wmb};
use nic_hal::{Platform, RegisterIo};
use verbs::{CqEvent, DestroyError};

use crate::Error;
use crate::device::{Device, release_unless_unknown};
use crate::mem::Shared;
use crate::provider::Cq;

/// Entries of a channel's EQ (fewer when the device's `max_eq_depth` is smaller).
pub const CHANNEL_EQ_DEPTH: u32 = 256;
/// Longest sleep of a wait before it looks at the EQ again (an interrupt normally ends it
/// sooner).
pub const WAIT_RECHECK_NS: u64 = 10_000_000;

/// A CQ's event state, shared by the CQ and its channel.
#[derive(Debug)]
pub(crate) struct CqNotify {
    pub(crate) cq_context: u64,
    /// Events consumed; its low two bits are the `cmd_sn` of the CQ doorbell.
    pub(crate) events: AtomicU32,
}

impl CqNotify {
    pub(crate) fn new(cq_context: u64) -> Arc<CqNotify> {
        Arc::new(CqNotify {
            cq_context,
            events: AtomicU32::new(0),
        })
    }
}

/// What a channel's CQs see of it.
#[derive(Debug)]
pub(crate) struct ChannelShared {
    pub(crate) eqn: u16,
    /// Most CQs on the channel (each has at most one EQE outstanding per arm: the EQ cannot
    /// overflow).
    pub(crate) max_cqs: usize,
    pub(crate) cqs: spin::Mutex<BTreeMap<u16, Arc<CqNotify>>>,
}

/// A completion channel (`ibv_comp_channel`): an EQ of its own, which the caller polls
/// (`get_cq_event`) or waits on (`wait_cq_event`).
#[derive(Debug)]
pub struct CompChannel {
    shared: Arc<ChannelShared>,
    ring: Option<Shared>,
    depth: u32,
    vector: u16,
    /// Consumer counter of the EQ.
    cc: u32,
    /// An EQ_DB with the arm bit was written since the last EQE consumed.
    armed: bool,
    stray: u64,
    events: u64,
}

impl CompChannel {
    /// The EQ number.
    pub fn eqn(&self) -> u16 {
        self.shared.eqn
    }
    /// The MSI-X vector the EQ raises.
    pub fn vector(&self) -> u16 {
        self.vector
    }
    /// EQ entries.
    pub fn depth(&self) -> u32 {
        self.depth
    }
    /// CQs on the channel.
    pub fn cqs(&self) -> usize {
        self.shared.cqs.lock().len()
    }
    /// Completion events returned so far.
    pub fn events(&self) -> u64 {
        self.events
    }
    /// EQEs that named no CQ of the channel or were not completion events (dropped).
    pub fn stray_events(&self) -> u64 {
        self.stray
    }
    pub(crate) fn shared(&self) -> &Arc<ChannelShared> {
        &self.shared
    }
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a completion channel: an EQ of [`CHANNEL_EQ_DEPTH`] entries (at most the
    /// device's `max_eq_depth`) for completion events, on the next completion vector, armed.
    /// EOPNOTSUPP when the device has no EQs (no EVENT_QUEUE_ATTR, or no completion events).
    pub(crate) fn channel_create(&self) -> Result<CompChannel, Error> {
        let a = &self.attrs;
        if a.max_eq == 0 || a.event_bitmask & create_eq_cmd::EVENT_COMPLETION == 0 {
            return Err(Error::NotSupported);
        }
        let depth = if a.max_eq_depth >= CHANNEL_EQ_DEPTH {
            CHANNEL_EQ_DEPTH
        } else if a.max_eq_depth >= 2 {
            // The largest power of two the device allows.
            1 << (31 - a.max_eq_depth.leading_zeros())
        } else {
            return Err(Error::NotSupported);
        };
        let k = self.channels_made.fetch_add(1, Relaxed);
        let irq = self.platform.interrupts();
        let vector = match irq.map(|i| i.vectors()) {
            Some(n) if n > 1 => 1 + (k % u32::from(n - 1)) as u16,
            _ => 1,
        };
        let ring = Shared::new(&self.dma, depth as usize * EQE_SIZE, 4096)?;
        let mut c = [0u8; crate::device::ENTRY];
        use create_eq_cmd as m;
        m::DEPTH.set(&mut c, depth);
        m::MSIX_VEC.set(&mut c, vector.into());
        m::ENTRY_SIZE_WORDS.set(&mut c, (EQE_SIZE / 4) as u32);
        m::BA_LO.set(&mut c, ring.iova() as u32);
        m::BA_HI.set(&mut c, (ring.iova() >> 32) as u32);
        m::EVENT_BITMASK.set(&mut c, m::EVENT_COMPLETION);
        let out = match self.exec(op::CREATE_EQ, 0, &c) {
            Ok(o) => o,
            Err(e) => {
                release_unless_unknown(ring, &Err::<(), _>(e));
                return Err(e);
            }
        };
        let eqn = create_eq_resp::EQN.get(&out) as u16;
        if let Some(i) = irq {
            i.enable(vector).map_err(Error::Interrupt)?;
        }
        let ch = CompChannel {
            shared: Arc::new(ChannelShared {
                eqn,
                max_cqs: depth as usize,
                cqs: spin::Mutex::new(BTreeMap::new()),
            }),
            ring: Some(ring),
            depth,
            vector,
            cc: 0,
            armed: true,
            stray: 0,
            events: 0,
        };
        self.arm_eq(eqn);
        Ok(ch)
    }

    /// EQ_DB: arm EQ `eqn` for one interrupt.
    fn arm_eq(&self, eqn: u16) {
        mmio_wmb();
        self.regs.write32(
            r::EQ_DB,
            (r::eq_db::EQN.val(eqn.into()) | r::eq_db::ARM.val(1)) as u32,
        );
    }

    /// Destroys a completion channel (DESTROY_EQ); EBUSY (channel handed back) while CQs
    /// use it.
    pub(crate) fn channel_destroy(
        &self,
        mut ch: CompChannel,
    ) -> Result<(), DestroyError<CompChannel>> {
        if !ch.shared.cqs.lock().is_empty() {
            return Err(DestroyError::keep(verbs::Error::Busy, ch));
        }
        let mut c = [0u8; crate::device::ENTRY];
        destroy_eq_cmd::EQN.set(&mut c, ch.shared.eqn.into());
        match self.exec(op::DESTROY_EQ, 0, &c) {
            Ok(_) => {
                if let Some(r) = ch.ring.take() {
                    r.release();
                }
                Ok(())
            }
            Err(e @ (Error::Admin { .. } | Error::AdminDown)) => {
                Err(DestroyError::keep(e.into(), ch))
            }
            Err(e) => Err(DestroyError::lost(e.into())),
        }
    }

    /// Requests a completion event for `cq`'s next completion (`ibv_req_notify_cq`): the CQ
    /// doorbell with the arm bit. EINVAL for a CQ not on a channel; EOPNOTSUPP for
    /// `solicited_only` (EFA arms for any completion) and before the data BARs are attached.
    pub(crate) fn notify_cq(&self, cq: &Cq, solicited_only: bool) -> Result<(), Error> {
        if solicited_only {
            return Err(Error::NotSupported);
        }
        let Some(bars) = self.data.as_ref() else {
            return Err(Error::NotSupported);
        };
        let (Some(n), Some(db)) = (cq.notify(), cq.db_offset()) else {
            return Err(Error::InvalidArgument);
        };
        let cc = cq.shared().consumed();
        let sn = n.events.load(Relaxed) & 3;
        let v = (cc & 0xffff) | sn << 29 | 1 << 31;
        mmio_wmb();
        bars.db.write32(db as usize, v);
        Ok(())
    }

    /// The next completion event of the channel, if any (a non-blocking `ibv_get_cq_event`):
    /// the next EQE by its phase, checked (a completion event naming a CQ of the channel;
    /// anything else is dropped and counted in [`CompChannel::stray_events`]). The CQ's event
    /// count moves on. When the ring is empty the EQ is armed (if it was not) and looked at
    /// once more.
    pub(crate) fn cq_event(&self, ch: &mut CompChannel) -> Result<Option<CqEvent>, Error> {
        let Some(ring) = ch.ring.as_ref() else {
            return Err(Error::InvalidArgument);
        };
        let mask = ch.depth - 1;
        let shift = ch.depth.trailing_zeros();
        loop {
            let at = (ch.cc & mask) as usize * EQE_SIZE;
            let mut w = [0u8; 4];
            ring.read(at, &mut w)?;
            let common = u32::from_le_bytes(w);
            // The expected phase starts at 1 and flips on every wrap.
            let phase = ((ch.cc >> shift) & 1) ^ 1;
            if common & EQE_PHASE != phase {
                if ch.armed {
                    return Ok(None);
                }
                ch.armed = true;
                self.arm_eq(ch.shared.eqn);
                continue;
            }
            dma_rmb();
            let mut e = [0u8; EQE_SIZE];
            ring.read(at, &mut e)?;
            ch.cc = ch.cc.wrapping_add(1);
            ch.armed = false;
            let common = u32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let event = (common >> EQE_EVENT_TYPE_SHIFT) & EQE_EVENT_TYPE_MASK;
            let cqn = u16::from_le_bytes([e[8], e[9]]);
            let cqs = ch.shared.cqs.lock();
            match cqs.get(&cqn) {
                Some(n) if event == EQE_EVENT_COMPLETION => {
                    n.events.fetch_add(1, Relaxed);
                    ch.events += 1;
                    return Ok(Some(CqEvent {
                        cqn: cqn.into(),
                        cq_context: n.cq_context,
                    }));
                }
                _ => ch.stray += 1,
            }
        }
    }

    /// Waits up to `timeout_ns` nanoseconds (of [`Platform::now_ns`]) for the channel's next
    /// completion event (a blocking `ibv_get_cq_event`); `None` when the time ran out. Only
    /// armed CQs produce events. With interrupts the thread sleeps on the channel's vector
    /// between checks (at most [`WAIT_RECHECK_NS`] at a time; a check that finds the EQ empty
    /// arms it); [`Platform::relax`] runs between checks in both modes (on an emulated device
    /// it is what moves time and the device along). The loop is [`nic_hal::wait_for`].
    pub(crate) fn wait_event(
        &self,
        ch: &mut CompChannel,
        timeout_ns: u64,
    ) -> Result<Option<CqEvent>, Error> {
        nic_hal::wait_for(
            &self.platform,
            &[ch.vector],
            timeout_ns,
            WAIT_RECHECK_NS,
            || self.cq_event(ch),
        )
    }

    /// Waits up to `timeout_ns` nanoseconds for the next completion event of any of
    /// `channels`: the index of its channel and the event, `None` when the time ran out. The
    /// channels are looked at in order ([`nic_hal::wait_for_any`]). No channel: EINVAL.
    pub(crate) fn wait_events(
        &self,
        channels: &mut [&mut CompChannel],
        timeout_ns: u64,
    ) -> Result<Option<(usize, CqEvent)>, Error> {
        if channels.is_empty() {
            return Err(Error::InvalidArgument);
        }
        nic_hal::wait_for_any(
            &self.platform,
            channels,
            |c| c.vector,
            timeout_ns,
            WAIT_RECHECK_NS,
            |c| self.cq_event(c),
        )
    }
}

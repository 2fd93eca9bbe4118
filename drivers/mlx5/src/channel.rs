//! Completion channels and asynchronous events.
//!
//! A completion channel is an EQ of its own (subscribed to nothing but the completion events
//! of the CQs that name it) that the caller polls with [`Device::get_cq_event`]. Each event
//! increments the CQ's arm sequence number, as Linux's EQ handler does. Asynchronous events
//! (CQ errors, QP errors, port changes, fatal errors) arrive on the driver's own EQ and come
//! out of [`Device::get_async_event`].
//!
//! # Interrupts
//!
//! As Linux lays them out, the driver's own EQ (asynchronous events, command completions,
//! page requests) is on MSI-X vector 0 and each completion EQ on a vector of its own: channel
//! `k` (counted from 0 in creation order) gets vector `1 + k % (n - 1)` when the platform has
//! `n > 1` vectors ([`Platform::interrupts`]), vector 0 otherwise. Both kinds of events can
//! be waited for without spinning: [`Device::wait_cq_event`] and [`Device::wait_async_event`]
//! read the vector's delivery count, check the EQ (which leaves it armed), and sleep until the
//! vector fires, then check again. Without interrupts they poll (spinning on
//! [`Platform::relax`]) until the timeout.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::sync::Arc;
use core::sync::atomic::Ordering;

use firmware_interface::eqe;
use nic_hal::{Platform, RegisterIo};
use verbs::{AsyncElement, AsyncEvent, AsyncEventType, CqEvent};

use crate::cq::{Cq, CqCore};
use crate::device::Device;
use crate::eq::{Eq, Event};
use crate::error::Error;

/// log2 of a channel EQ's size.
const CHANNEL_LOG_EQ: u8 = 8;
/// Most CQs on one channel: each has at most one event outstanding per arm, and the EQ keeps
/// the same spare room as Linux's (128 entries).
pub const CHANNEL_MAX_CQS: usize = (1 << CHANNEL_LOG_EQ) - 128;

/// The part of a channel its CQs see.
pub(crate) struct ChannelShared {
    pub(crate) eqn: u32,
    pub(crate) cqs: spin::Mutex<BTreeMap<u32, Arc<CqCore>>>,
}

/// A completion channel (`ibv_comp_channel`): an EQ the caller polls.
pub struct CompChannel {
    eq: Option<Eq>,
    shared: Arc<ChannelShared>,
    pending: VecDeque<u32>,
    stray: u64,
}

impl core::fmt::Debug for CompChannel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("CompChannel")
            .field("eqn", &self.shared.eqn)
            .field("cqs", &self.shared.cqs.lock().len())
            .field("pending", &self.pending.len())
            .field("stray", &self.stray)
            .finish()
    }
}

impl CompChannel {
    /// The EQ number CQs on this channel name.
    pub fn eqn(&self) -> u32 {
        self.shared.eqn
    }

    /// The MSI-X vector the channel's EQ fires.
    pub fn vector(&self) -> u16 {
        self.eq.as_ref().map_or(0, Eq::vector)
    }

    /// Completion events that named a CQ not on this channel (destroyed since, or a device
    /// error); they were dropped.
    pub fn stray_events(&self) -> u64 {
        self.stray
    }

    /// Number of CQs on the channel.
    pub fn cqs(&self) -> usize {
        self.shared.cqs.lock().len()
    }
}

/// The verbs event of a driver-EQ event, if it is one a verbs user sees.
pub fn async_event(ev: &Event) -> Option<AsyncEvent> {
    use eqe::event as t;
    let (event_type, element) = match *ev {
        Event::CqError { cqn, .. } => (AsyncEventType::CqErr, AsyncElement::Cq(cqn)),
        Event::Qp {
            event_type, qpn, ..
        } => {
            let (ty, el) = match event_type {
                t::WQ_CATAS_ERROR => (AsyncEventType::QpFatal, AsyncElement::Qp(qpn)),
                t::WQ_INVAL_REQ_ERROR => (AsyncEventType::QpReqErr, AsyncElement::Qp(qpn)),
                t::WQ_ACCESS_ERROR => (AsyncEventType::QpAccessErr, AsyncElement::Qp(qpn)),
                t::COMM_EST => (AsyncEventType::CommEst, AsyncElement::Qp(qpn)),
                t::SQ_DRAINED => (AsyncEventType::SqDrained, AsyncElement::Qp(qpn)),
                t::PATH_MIG => (AsyncEventType::PathMig, AsyncElement::Qp(qpn)),
                t::PATH_MIG_FAILED => (AsyncEventType::PathMigErr, AsyncElement::Qp(qpn)),
                t::SRQ_LAST_WQE => (AsyncEventType::QpLastWqeReached, AsyncElement::Qp(qpn)),
                t::SRQ_CATAS_ERROR => (AsyncEventType::SrqErr, AsyncElement::Srq(qpn)),
                t::SRQ_RQ_LIMIT => (AsyncEventType::SrqLimitReached, AsyncElement::Srq(qpn)),
                _ => return None,
            };
            (ty, el)
        }
        Event::PortChange { port, sub_type } => {
            let ty = match sub_type {
                eqe::PORT_ACTIVE => AsyncEventType::PortActive,
                eqe::PORT_DOWN => AsyncEventType::PortErr,
                eqe::PORT_LID => AsyncEventType::LidChange,
                eqe::PORT_PKEY => AsyncEventType::PkeyChange,
                eqe::PORT_GUID => AsyncEventType::GidChange,
                eqe::PORT_CLIENT_REREG => AsyncEventType::ClientReregister,
                _ => return None,
            };
            (ty, AsyncElement::Port(port))
        }
        Event::Other {
            event_type: t::INTERNAL_ERROR,
            ..
        } => (AsyncEventType::DeviceFatal, AsyncElement::Device),
        _ => return None,
    };
    Some(AsyncEvent {
        event_type,
        element,
    })
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates a completion channel: an EQ of 256 entries taking completion events only. At
    /// most [`CHANNEL_MAX_CQS`] CQs may use it.
    pub fn create_comp_channel(&self) -> Result<CompChannel, Error> {
        let log = CHANNEL_LOG_EQ.min(self.caps.log_max_eq_sz);
        let k = self.channels_made.fetch_add(1, Ordering::Relaxed);
        let vector = match self.platform.interrupts().map(|i| i.vectors()) {
            Some(n) if n > 1 => 1 + (k % u32::from(n - 1)) as u16,
            _ => 0,
        };
        let eq = self.create_eq_on_vector(log, 0, vector)?;
        let nent = 1usize << log;
        Ok(CompChannel {
            shared: Arc::new(ChannelShared {
                eqn: eq.eqn(),
                cqs: spin::Mutex::new(BTreeMap::new()),
            }),
            eq: Some(eq),
            pending: VecDeque::with_capacity(nent),
            stray: 0,
        })
    }

    /// Destroys a completion channel; [`Error::Busy`] (channel handed back) while CQs use it.
    // Handing the object back by value is the point; destroy is not a hot path.
    #[allow(clippy::result_large_err)]
    pub fn destroy_comp_channel(
        &self,
        mut ch: CompChannel,
    ) -> Result<(), (Error, Option<CompChannel>)> {
        if !ch.shared.cqs.lock().is_empty() {
            return Err((Error::Busy, Some(ch)));
        }
        let Some(eq) = ch.eq.take() else {
            return Ok(());
        };
        self.destroy_eq(eq).map_err(|e| (e, None))
    }

    /// Creates a CQ of `2^log_size` entries whose completion events go to `channel` (or, with
    /// none, to the driver's EQ, where they are dropped), remembering `cq_context`.
    pub fn create_cq_on(
        &self,
        log_size: u8,
        cq_context: u64,
        channel: Option<&CompChannel>,
    ) -> Result<Cq, Error> {
        let eqn = match channel {
            Some(ch) => {
                if ch.shared.cqs.lock().len() >= CHANNEL_MAX_CQS {
                    return Err(Error::NoResources);
                }
                ch.shared.eqn
            }
            None => self.driver_eqn()?,
        };
        let mut cq = self.create_cq_with(log_size, eqn, cq_context)?;
        if let Some(ch) = channel {
            ch.shared.cqs.lock().insert(cq.cqn(), cq.core.clone());
            cq.channel = Some(ch.shared.clone());
        }
        Ok(cq)
    }

    /// The next completion event of the channel, if any: polls the channel's EQ when nothing
    /// is pending (and re-arms it), increments the CQ's arm sequence number, returns its CQN
    /// and context. Events naming a CQ not on the channel are dropped
    /// ([`CompChannel::stray_events`]).
    pub fn get_cq_event(&self, ch: &mut CompChannel) -> Result<Option<CqEvent>, Error> {
        let mut first_err = None;
        if ch.pending.is_empty()
            && let Some(eq) = ch.eq.as_mut()
        {
            let pending = &mut ch.pending;
            // At most one ring's worth per poll, and the queue holds a ring's worth: no
            // reallocation.
            if let Err(e) = self.poll_eq(eq, |ev| {
                if let Event::Completion { cqn } = ev {
                    pending.push_back(cqn);
                }
            }) {
                first_err = Some(e);
            }
        }
        while let Some(cqn) = ch.pending.pop_front() {
            let cqs = ch.shared.cqs.lock();
            match cqs.get(&cqn) {
                Some(core) => {
                    core.arm_sn.fetch_add(1, Ordering::Relaxed);
                    return Ok(Some(CqEvent {
                        cqn,
                        cq_context: core.cq_context,
                    }));
                }
                None => ch.stray += 1,
            }
        }
        first_err.map_or(Ok(None), Err)
    }

    /// Waits up to `timeout_ns` nanoseconds (of [`Platform::now_ns`]) for the channel's next
    /// completion event (a blocking `ibv_get_cq_event`); `None` when the time ran out. As with
    /// `ibv_get_cq_event`, only CQs armed with a notification request produce events.
    ///
    /// With interrupts the calling thread sleeps on the channel's vector between checks (at
    /// most [`Config::irq_recheck_ns`](crate::Config::irq_recheck_ns) at a time); without, it
    /// polls [`get_cq_event`](Self::get_cq_event), calling [`Platform::relax`] in between
    /// ([`nic_hal::wait_for`]). A check that finds the EQ empty leaves it armed (every poll
    /// that consumes an EQE re-arms it), so an event after the check raises the vector and
    /// ends the sleep.
    pub fn wait_cq_event(
        &self,
        ch: &mut CompChannel,
        timeout_ns: u64,
    ) -> Result<Option<CqEvent>, Error> {
        let recheck = self.config.irq_recheck_ns;
        nic_hal::wait_for(&self.platform, &[ch.vector()], timeout_ns, recheck, || {
            self.get_cq_event(ch)
        })
    }

    /// Waits up to `timeout_ns` nanoseconds for the next completion event of any of
    /// `channels` (as `poll(2)` on several channel descriptors, then `ibv_get_cq_event` on the
    /// ready one); returns the index of its channel and the event, `None` when the time ran
    /// out. The channels are looked at in order: the first one's events come first. With
    /// interrupts the thread sleeps on the channels' vectors ([`nic_hal::wait_for_any`]). No
    /// channel: [`Error::InvalidArgument`].
    pub fn wait_cq_events(
        &self,
        channels: &mut [&mut CompChannel],
        timeout_ns: u64,
    ) -> Result<Option<(usize, CqEvent)>, Error> {
        if channels.is_empty() {
            return Err(Error::InvalidArgument);
        }
        let recheck = self.config.irq_recheck_ns;
        nic_hal::wait_for_any(
            &self.platform,
            channels,
            |c| c.vector(),
            timeout_ns,
            recheck,
            |c| self.get_cq_event(c),
        )
    }

    /// Waits up to `timeout_ns` nanoseconds for the next asynchronous event (a blocking
    /// `ibv_get_async_event`, see [`get_async_event`](Self::get_async_event)); `None` when the
    /// time ran out. With interrupts the thread sleeps on vector 0, the driver EQ's.
    pub fn wait_async_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>, Error> {
        let recheck = self.config.irq_recheck_ns;
        nic_hal::wait_for(&self.platform, &[0], timeout_ns, recheck, || {
            self.get_async_event()
        })
    }

    /// The next asynchronous event (CQ error, QP error, port change, fatal error), if any.
    /// Drains the driver's EQ (one ring's worth); serves the firmware page requests queued at
    /// that point (bounded work: a request that brings another leaves it for the next call);
    /// completion and command events there are dropped. A malformed EQE is reported as an
    /// error once.
    pub fn get_async_event(&self) -> Result<Option<AsyncEvent>, Error> {
        self.drain_driver_eq();
        let budget = self.pending.lock().page_requests.len();
        let served = self.serve_page_requests(budget);
        let n = {
            let mut p = self.pending.lock();
            if let Some(e) = p.error.take() {
                return Err(e);
            }
            p.events.len()
        };
        served?;
        for _ in 0..n {
            let next = self.pending.lock().events.pop_front();
            let Some(ev) = next else { break };
            if let Some(a) = async_event(&ev) {
                return Ok(Some(a));
            }
        }
        Ok(None)
    }
}

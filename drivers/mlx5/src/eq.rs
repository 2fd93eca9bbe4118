//! Event queues (`docs/mlx5.md#eq-context`, `docs/mlx5.md#event-queue-entries`): creation, the
//! ownership rule, event parsing, doorbells, and the driver's own EQ (asynchronous events, command
//! completions, page requests).

use alloc::vec::Vec;

use firmware_interface::cmds::{create_eq_in, create_eq_out, destroy_eq_in};
use firmware_interface::ctx::eqc;
use firmware_interface::{eqe, opcode, uar};
use nic_hal::barrier::dma_rmb;
use nic_hal::{DmaBuf, Platform, RegisterIo};

use crate::caps::Caps;
use crate::device::{Device, PENDING_MAX, PageRequest, cmd_in};
use crate::error::{Error, OutputFault};
use crate::mem::{Shared, write_pas};

/// An event queue. Owns its ring (64-byte EQEs, every `owner` byte initialised to 1) and its
/// software consumer index; hand it to [`Device::poll_eq`] to consume events and to
/// [`Device::destroy_eq`] when done. Dropped without `destroy_eq`, its ring is leaked (the
/// device may still write it).
#[derive(Debug)]
pub struct Eq {
    eqn: u8,
    log_size: u8,
    vector: u16,
    ci: u32,
    uar: u32,
    event_mask: u64,
    buf: Shared,
}

impl Eq {
    /// EQ number.
    pub fn eqn(&self) -> u32 {
        self.eqn as u32
    }

    /// log2 of the number of entries.
    pub fn log_size(&self) -> u8 {
        self.log_size
    }

    /// The MSI-X vector the EQ fires when it is armed and gets an event (its context's
    /// `intr`).
    pub fn vector(&self) -> u16 {
        self.vector
    }

    /// Software consumer index (free running).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// The event types this EQ subscribed to (bit n = type n).
    pub fn event_mask(&self) -> u64 {
        self.event_mask
    }

    /// UAR index of the page holding this EQ's doorbell.
    pub fn uar(&self) -> u32 {
        self.uar
    }

    /// The ring.
    pub fn buffer(&self) -> &DmaBuf {
        &self.buf
    }
}

/// A validated event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// COMP (0x00): a completion on CQ `cqn`.
    Completion {
        /// CQ number.
        cqn: u32,
    },
    /// CMD (0x0a): command slots completed (bit n = slot n).
    Command {
        /// Bitmask of completed slots.
        vector: u32,
    },
    /// PAGE_REQUEST (0x0b): the firmware wants pages (`num_pages > 0`) or gives some back
    /// (`< 0`). [`Device::poll_events`] serves these itself.
    PageRequest {
        /// Function id to echo in MANAGE_PAGES.
        function_id: u16,
        /// Embedded-CPU function.
        ec_function: bool,
        /// Release all pages of the function.
        release_all: bool,
        /// Pages wanted (signed).
        num_pages: i32,
    },
    /// CQ_ERROR (0x04).
    CqError {
        /// CQ number.
        cqn: u32,
        /// Error syndrome.
        syndrome: u8,
    },
    /// A QP / SRQ event (PATH_MIG, COMM_EST, SQ_DRAINED, WQ_CATAS_ERROR, PATH_MIG_FAILED,
    /// WQ_INVAL_REQ_ERROR, WQ_ACCESS_ERROR, SRQ_*).
    Qp {
        /// EQE type.
        event_type: u8,
        /// Resource type (`eqe::RES_*`: 0 QP, 1 RQ, 2 SQ, 6 DCT).
        resource_type: u8,
        /// QP / SRQ number (24 bits).
        qpn: u32,
    },
    /// PORT_CHANGE (0x09).
    PortChange {
        /// Port number (1-based).
        port: u8,
        /// `sub_type` (`eqe::PORT_*`: 1 down, 4 active, ...).
        sub_type: u8,
    },
    /// Another known event type (its data as delivered).
    Other {
        /// EQE type.
        event_type: u8,
        /// EQE sub type.
        sub_type: u8,
        /// The 28 data bytes.
        data: [u8; 28],
    },
}

/// The largest value of the EQ context's 12-bit `intr`.
const fn eqc_intr_max() -> u16 {
    0xfff
}

/// Whether `t` is an event type of `device.h enum mlx5_event`.
fn known_event(t: u8) -> bool {
    use eqe::event::*;
    matches!(
        t,
        COMP | PATH_MIG
            | COMM_EST
            | SQ_DRAINED
            | CQ_ERROR
            | WQ_CATAS_ERROR
            | PATH_MIG_FAILED
            | INTERNAL_ERROR
            | PORT_CHANGE
            | CMD
            | PAGE_REQUEST
            | PAGE_FAULT
            | NIC_VPORT_CHANGE
            | ESW_FUNCTIONS_CHANGED
            | VHCA_STATE_CHANGE
            | WQ_INVAL_REQ_ERROR
            | WQ_ACCESS_ERROR
            | SRQ_CATAS_ERROR
            | SRQ_LAST_WQE
            | SRQ_RQ_LIMIT
            | GPIO
            | PORT_MODULE
            | TEMP_WARN
            | XRQ_ERROR
            | REMOTE_CONFIG
            | DB_BF_CONGESTION
            | STALL
            | DCT_DRAINED
            | DCT_KEY_VIOLATION
            | FPGA_ERROR
            | FPGA_QP_ERROR
            | GENERAL_EVENT
            | MONITOR_COUNTER
            | PPS
            | DEVICE_TRACER
            | OBJECT_CHANGE
    )
}

fn be32(e: &[u8; 64], off: usize) -> u32 {
    u32::from_be_bytes([e[off], e[off + 1], e[off + 2], e[off + 3]])
}

/// Parses and validates one EQE read from an EQ subscribed to `mask`.
fn parse_eqe(
    e: &[u8; 64],
    subscribed_mask: u64,
    caps: &Caps,
    cmd_slots: u8,
) -> Result<Event, OutputFault> {
    use eqe::event::*;
    let t = e[eqe::TYPE];
    let sub_type = e[eqe::SUB_TYPE];
    let subscribed = t == COMP || (t < 64 && subscribed_mask & (1u64 << t) != 0);
    if !known_event(t) || !subscribed {
        return Err(OutputFault::EventType { event_type: t });
    }
    let bad = OutputFault::EventData { event_type: t };
    Ok(match t {
        COMP => {
            let cqn = be32(e, eqe::COMP_CQN) & 0xff_ffff;
            if !Caps::fits(cqn, caps.log_max_cq) {
                return Err(bad);
            }
            Event::Completion { cqn }
        }
        CMD => {
            let vector = be32(e, eqe::CMD_VECTOR);
            if vector == 0 || (vector as u64) >> cmd_slots != 0 {
                return Err(bad);
            }
            Event::Command { vector }
        }
        PAGE_REQUEST => {
            let ecf = u16::from_be_bytes([
                e[eqe::PAGE_REQ_EC_FUNCTION],
                e[eqe::PAGE_REQ_EC_FUNCTION + 1],
            ]);
            Event::PageRequest {
                function_id: u16::from_be_bytes([
                    e[eqe::PAGE_REQ_FUNC_ID],
                    e[eqe::PAGE_REQ_FUNC_ID + 1],
                ]),
                ec_function: ecf & eqe::PAGE_REQ_EC_BIT != 0,
                release_all: ecf & eqe::PAGE_REQ_RELEASE_ALL_BIT != 0,
                num_pages: be32(e, eqe::PAGE_REQ_NUM_PAGES) as i32,
            }
        }
        CQ_ERROR => {
            let cqn = be32(e, eqe::CQ_ERR_CQN) & 0xff_ffff;
            if !Caps::fits(cqn, caps.log_max_cq) {
                return Err(bad);
            }
            Event::CqError {
                cqn,
                syndrome: e[eqe::CQ_ERR_SYNDROME],
            }
        }
        PATH_MIG | COMM_EST | SQ_DRAINED | WQ_CATAS_ERROR | PATH_MIG_FAILED
        | WQ_INVAL_REQ_ERROR | WQ_ACCESS_ERROR | SRQ_CATAS_ERROR | SRQ_LAST_WQE | SRQ_RQ_LIMIT => {
            let resource_type = e[eqe::QP_EVENT_TYPE];
            let qpn = be32(e, eqe::QP_EVENT_QPN) & 0xff_ffff;
            if resource_type == eqe::RES_QP && !Caps::fits(qpn, caps.log_max_qp) {
                return Err(bad);
            }
            Event::Qp {
                event_type: t,
                resource_type,
                qpn,
            }
        }
        PORT_CHANGE => {
            let port = e[eqe::PORT_CHANGE_PORT] >> eqe::PORT_CHANGE_PORT_SHIFT;
            if port == 0 || (caps.num_ports != 0 && port > caps.num_ports) {
                return Err(bad);
            }
            Event::PortChange { port, sub_type }
        }
        _ => {
            let mut data = [0u8; 28];
            data.copy_from_slice(&e[eqe::DATA..eqe::DATA + 28]);
            Event::Other {
                event_type: t,
                sub_type,
                data,
            }
        }
    })
}

impl<R: RegisterIo, P: Platform> Device<R, P> {
    /// Creates an EQ of `2^log_size` entries subscribed to the event types in `event_mask`
    /// (bit n = type n; completion events arrive on whatever EQ a CQ names), on MSI-X vector
    /// 0. Its doorbell is in the driver's UAR; it is armed before it is returned.
    pub fn create_eq(&self, log_size: u8, event_mask: u64) -> Result<Eq, Error> {
        self.create_eq_on_vector(log_size, event_mask, 0)
    }

    /// [`create_eq`](Self::create_eq) on MSI-X vector `vector` (the EQ context's `intr`):
    /// the device raises that vector when the armed EQ gets an event. With interrupts
    /// ([`Platform::interrupts`]) the vector must be one of the platform's
    /// ([`Error::InvalidArgument`] otherwise) and is enabled here.
    pub fn create_eq_on_vector(
        &self,
        log_size: u8,
        event_mask: u64,
        vector: u16,
    ) -> Result<Eq, Error> {
        if log_size > self.caps.log_max_eq_sz || log_size > 24 || vector > eqc_intr_max() {
            return Err(Error::InvalidArgument);
        }
        if let Some(irq) = self.platform.interrupts() {
            if vector >= irq.vectors() {
                return Err(Error::InvalidArgument);
            }
            irq.enable(vector).map_err(Error::Interrupt)?;
        }
        let uar_idx = self.driver_uar()?;
        let nent = 1usize << log_size;
        let bytes = (nent * eqe::SIZE).next_multiple_of(4096);
        let buf = Shared::new(&self.dma, bytes, 4096)?;
        for i in 0..nent {
            buf.write_u8(i * eqe::SIZE + eqe::OWNER, eqe::OWNER_INIT)?;
        }
        let npages = bytes / 4096;
        let mut inp = cmd_in(opcode::CREATE_EQ, 0, create_eq_in::SIZE + npages * 8);
        let ctx = create_eq_in::EQ_CONTEXT_ENTRY.byte_off();
        eqc::LOG_EQ_SIZE.at(ctx).set(&mut inp, log_size as u32);
        eqc::UAR_PAGE.at(ctx).set(&mut inp, uar_idx);
        eqc::INTR.at(ctx).set(&mut inp, u32::from(vector));
        eqc::LOG_PAGE_SIZE.at(ctx).set(&mut inp, 0);
        create_eq_in::EVENT_BITMASK_0.set64(&mut inp, event_mask);
        write_pas(&buf, &mut inp, create_eq_in::PAS.byte_off());
        let out = match self.cmd(&inp, 16) {
            Ok(out) => out,
            Err(e) => {
                if !crate::device_may_hold(&e) {
                    buf.release();
                }
                return Err(e);
            }
        };
        let raw = firmware_interface::Field::bytes(0x8, 4).get(&out);
        let eqn = create_eq_out::EQ_NUMBER.get(&out);
        if raw != eqn {
            // Bits outside the 8-bit eq_number are set: the buffer stays with the device.
            return Err(Error::BadOutput {
                opcode: opcode::CREATE_EQ,
                what: OutputFault::ObjectNumber { value: raw },
            });
        }
        let eq = Eq {
            eqn: eqn as u8,
            log_size,
            vector,
            ci: 0,
            uar: uar_idx,
            event_mask,
            buf,
        };
        self.eq_doorbell(&eq, true);
        Ok(eq)
    }

    /// Destroys an EQ and frees its ring. If the command fails the ring is leaked.
    pub fn destroy_eq(&self, eq: Eq) -> Result<(), Error> {
        let mut inp = cmd_in(opcode::DESTROY_EQ, 0, 16);
        destroy_eq_in::EQ_NUMBER.set(&mut inp, eq.eqn as u32);
        self.cmd(&inp, 16)?;
        eq.buf.release();
        Ok(())
    }

    /// Writes the EQ doorbell: `(eqn << 24) | ci` at UAR 0x40 (update and arm) or 0x48.
    fn eq_doorbell(&self, eq: &Eq, arm: bool) {
        let off = if arm {
            uar::EQ_DOORBELL_ARM
        } else {
            uar::EQ_DOORBELL_NOARM
        };
        let v = ((eq.eqn as u32) << uar::EQ_DB_EQN_SHIFT) | (eq.ci & uar::CI_MASK);
        self.regs
            .write32(eq.uar as usize * uar::PAGE_SIZE + off, v.to_be());
    }

    /// Consumes the EQEs the device has written (at most one ring's worth per call), calling
    /// `f` with each validated event, then updates and re-arms the EQ. An EQE that fails
    /// validation (unknown or unsubscribed type, impossible data) is consumed and skipped; the
    /// first such error is returned after the others were delivered. Returns the number of
    /// EQEs consumed.
    pub fn poll_eq(&self, eq: &mut Eq, mut f: impl FnMut(Event)) -> Result<usize, Error> {
        self.poll_eq_dyn(eq, &mut f)
    }

    fn poll_eq_dyn(&self, eq: &mut Eq, f: &mut dyn FnMut(Event)) -> Result<usize, Error> {
        let nent = 1u32 << eq.log_size;
        let mut count = 0usize;
        let mut first: Option<Error> = None;
        while (count as u64) < nent as u64 {
            let off = (eq.ci & (nent - 1)) as usize * eqe::SIZE;
            let owner = eq.buf.read_u8(off + eqe::OWNER)?;
            // Hardware writes owner = pass number & 1; 1 (the initial value) on pass 0 means
            // "not written yet".
            if (owner & 1) as u32 != (eq.ci >> eq.log_size) & 1 {
                break;
            }
            dma_rmb();
            let mut raw = [0u8; 64];
            eq.buf.read(off, &mut raw)?;
            eq.ci = eq.ci.wrapping_add(1);
            count += 1;
            match parse_eqe(&raw, eq.event_mask, &self.caps, self.cmdq.entries()) {
                Ok(ev) => f(ev),
                Err(what) => {
                    first.get_or_insert(Error::BadOutput { opcode: 0, what });
                }
            }
            if count.is_multiple_of(64) {
                self.eq_doorbell(eq, false);
            }
        }
        if count > 0 {
            self.eq_doorbell(eq, true);
        }
        first.map_or(Ok(count), Err)
    }

    /// The driver's EQ number (asynchronous events; may also be named by CQs).
    pub fn driver_eqn(&self) -> Result<u32, Error> {
        self.event_eq
            .lock()
            .as_ref()
            .map(Eq::eqn)
            .ok_or(Error::NotSupported)
    }

    /// Moves the driver EQ's events into the pending queues (page requests to their own;
    /// command completions are dropped). Reads at most one ring's worth. Does nothing if
    /// someone else is reading the EQ.
    pub(crate) fn drain_driver_eq(&self) {
        let Some(mut guard) = self.event_eq.try_lock() else {
            return;
        };
        let Some(eq) = guard.as_mut() else {
            return;
        };
        let mut got: Vec<Event> = Vec::new();
        let r = self.poll_eq_dyn(eq, &mut |ev| {
            if !matches!(ev, Event::Command { .. }) {
                got.push(ev);
            }
        });
        drop(guard);
        if got.is_empty() && r.is_ok() {
            return;
        }
        let mut p = self.pending.lock();
        for ev in got {
            let full = p.events.len() + p.page_requests.len() >= PENDING_MAX;
            if full {
                p.lost += 1;
                continue;
            }
            match ev {
                Event::PageRequest {
                    function_id,
                    ec_function,
                    release_all,
                    num_pages,
                } => p.page_requests.push_back(PageRequest {
                    function_id,
                    ec_function,
                    release_all,
                    num_pages,
                }),
                other => p.events.push_back(other),
            }
        }
        if let Err(e) = r {
            p.error.get_or_insert(e);
        }
    }

    /// Services the driver's EQ: serves firmware page requests (MANAGE_PAGES GIVE/TAKE on the
    /// page slot), drops command completions, and hands every other event to `f`. Returns the
    /// number of events handed to `f`, or the first error (a bad EQE, a failed page request),
    /// after everything pending was processed.
    ///
    /// One call does bounded work: it reads the EQ once (at most one ring's worth), serves the
    /// page requests queued at that point (each served request's command may bring the next
    /// one, which waits for the next call: a device that answers every page command with
    /// another request cannot keep a call busy) and delivers the events queued then.
    pub fn poll_events(&self, mut f: impl FnMut(Event)) -> Result<usize, Error> {
        self.drain_driver_eq();
        let (mut first, budget) = {
            let mut p = self.pending.lock();
            (p.error.take(), p.page_requests.len())
        };
        if let Err(e) = self.serve_page_requests(budget) {
            first.get_or_insert(e);
        }
        let n = self.pending.lock().events.len();
        let mut delivered = 0;
        for _ in 0..n {
            let next = self.pending.lock().events.pop_front();
            let Some(ev) = next else { break };
            f(ev);
            delivered += 1;
        }
        if let Some(e) = self.pending.lock().error.take() {
            first.get_or_insert(e);
        }
        first.map_or(Ok(delivered), Err)
    }

    /// Serves the firmware's page requests without taking any other event: reads the
    /// driver's EQ (at most one ring's worth; every other event stays queued for
    /// [`poll_events`](Self::poll_events) and `get_async_event`) and serves the page requests
    /// queued at that point (bounded work, as in `poll_events`). The firmware asks for the
    /// pages of destroyed objects back with such requests; they are otherwise served when
    /// events are next processed, or while a later command waits. Returns how many requests
    /// were served, or the first error after all of them were tried.
    pub fn serve_page_requests_now(&self) -> Result<usize, Error> {
        self.drain_driver_eq();
        let budget = self.pending.lock().page_requests.len();
        let served = self.serve_page_requests(budget);
        if let Some(e) = self.pending.lock().error.take() {
            return Err(e);
        }
        served
    }

    /// Firmware page requests read from the driver's EQ and not served yet.
    pub fn page_requests_pending(&self) -> usize {
        self.pending.lock().page_requests.len()
    }

    /// Events dropped because the pending queue was full (it holds 4096).
    pub fn events_lost(&self) -> u64 {
        self.pending.lock().lost
    }
}

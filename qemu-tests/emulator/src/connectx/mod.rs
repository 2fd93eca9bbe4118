//! The emulated ConnectX-class (mlx5) NIC: register file, command processor, objects and the
//! RoCEv2 data path (see the crate documentation). Its public items are re-exported at the
//! crate root.

use crate::mem;
use crate::{AddressSpace, BarMemory, DmaFault, VecBar};

mod cmdq;
mod commands;
mod dp;
mod eq;
mod faults;
mod objects;
mod pages;
mod poller;
mod profile;
mod regs;
mod state;
pub mod syndrome;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;

pub use dp::{Clock, PortStats};
pub use faults::{FailCommand, Faults, OutputHook};
pub use poller::{Polled, Poller, spawn_poller};
pub use profile::{PageRequests, Profile};

/// Live object counts: what the driver created and has not destroyed yet.
/// `Live::default()` means everything was released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Live {
    /// Allocated UAR pages.
    pub uars: u32,
    /// Allocated protection domains.
    pub pds: u32,
    /// Allocated transport domains.
    pub tds: u32,
    /// Event queues.
    pub eqs: u32,
    /// Completion queues.
    pub cqs: u32,
    /// Memory keys.
    pub mkeys: u32,
    /// Queue pairs.
    pub qps: u32,
    /// Shared receive queues.
    pub srqs: u32,
    /// Pages the driver gave with MANAGE_PAGES and did not take back.
    pub fw_pages: u32,
    /// ENABLE_HCA done and no DISABLE_HCA since.
    pub hca_enabled: bool,
    /// INIT_HCA done and no TEARDOWN_HCA since.
    pub hca_initialized: bool,
}

/// One completed command (the device's own log).
#[derive(Clone, Copy, Debug)]
pub struct CmdRecord {
    /// Command queue slot.
    pub slot: u8,
    /// Opcode from the input header.
    pub opcode: u16,
    /// `op_mod` from the input header.
    pub op_mod: u16,
    /// Delivery status written to `status_own` (0 = delivered).
    pub delivery: u8,
    /// Output `status` (0 when not delivered).
    pub status: u8,
    /// Output `syndrome`.
    pub syndrome: u32,
}

/// Device-side errors a test can see: driver mistakes that have no command status to carry
/// them (or that the device records in addition to one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceError {
    /// A DMA the IOMMU refused.
    Dma(DmaFault),
    /// A DMA the function refused because it is disabled (before ENABLE_HCA or after
    /// DISABLE_HCA): nothing reaches host memory then but the command interface.
    DmaWhileDisabled(DmaFault),
    /// A write to a UAR page that is not allocated, to an offset of a UAR page that is no
    /// doorbell, naming an object that does not exist or does not belong to that UAR, or a
    /// command doorbell with bits for slots beyond the queue.
    BadDoorbell {
        /// BAR0 offset of the write.
        offset: usize,
        /// The value written (big-endian bytes read as an integer, up to 8 bytes).
        value: u64,
    },
    /// A command doorbell before the command queue address was written.
    CmdqNotSet,
    /// A command doorbell while the `initializing` bit is still set (ignored).
    CmdWhileInitializing {
        /// The doorbell value.
        value: u32,
    },
    /// A command doorbell for an entry whose ownership bit is 0 (software-owned; ignored).
    CmdNotOwned {
        /// The slot.
        slot: u8,
    },
    /// A write to a read-only init-segment register (ignored).
    ReadOnlyRegister {
        /// BAR0 offset.
        offset: usize,
        /// The value written.
        value: u32,
    },
    /// An MMIO access of a size the device does not accept (4 or 8 bytes, or a 64-byte
    /// BlueFlame burst into a UAR page), or beyond the BAR.
    BadMmio {
        /// BAR0 offset.
        offset: usize,
        /// Access size in bytes.
        len: usize,
    },
    /// The driver let an EQ overflow (did not update its consumer index in time). Unless the
    /// EQ was created with `oi`, the device also raises health syndrome 0xc.
    EqOverrun {
        /// EQ number.
        eqn: u8,
    },
    /// An EQ doorbell with a consumer index beyond the producer index (ignored).
    EqConsumerAhead {
        /// EQ number.
        eqn: u8,
        /// Consumer index written.
        ci: u32,
        /// Device producer index (24 bits).
        pi: u32,
    },
    /// DISABLE_HCA while the device still held pages (the pages stay held until taken back).
    DisabledWithPagesHeld {
        /// Pages still held.
        pages: u32,
    },
    /// A force TEARDOWN_HCA freed objects the driver had not destroyed.
    ForcedTeardownFreed {
        /// The objects that were alive.
        live: Live,
    },
    /// A CQE would have overwritten an entry the driver has not consumed (consumer index in
    /// the CQ doorbell record): nothing was written, the CQ is in error and a CQ_ERROR event
    /// was posted.
    CqOverrun {
        /// CQ number.
        cqn: u32,
    },
    /// A CQ doorbell record holds a consumer index beyond the CQEs written (ignored).
    CqConsumerAhead {
        /// CQ number.
        cqn: u32,
        /// Consumer index in the record (24 bits).
        ci: u32,
        /// Device producer index (24 bits).
        pi: u32,
    },
    /// A send doorbell for a QP in RESET or without a send queue (ignored).
    SqDoorbellBadState {
        /// QP number.
        qpn: u32,
        /// The QP state (`qpc::STATE_*`).
        state: u8,
    },
    /// A send doorbell names a WQE the doorbell record (word 1) does not cover: the record
    /// was not updated before the doorbell.
    SqDoorbellBeyondRecord {
        /// QP number.
        qpn: u32,
        /// The WQE index in the doorbell.
        wqe_index: u16,
        /// The producer counter in the record.
        producer: u16,
    },
    /// A producer counter more than a ring ahead of the device's consumer counter: the QP
    /// had a catastrophic error (WQ_CATAS_ERROR event, QP in ERR).
    WqOverflow {
        /// QP number.
        qpn: u32,
        /// Send queue (else receive queue).
        sq: bool,
        /// Producer counter from the doorbell record.
        producer: u16,
        /// Device consumer counter.
        consumer: u16,
    },
    /// A malformed send WQE; it completed with LOCAL_QP_OP_ERR (LOCAL_LENGTH_ERR for a message
    /// over `log_msg_max`) and the QP went to ERR.
    BadWqe {
        /// QP number.
        qpn: u32,
        /// Expected WQE index (the SQ position, in WQEBBs).
        wqe_counter: u16,
        /// What is wrong.
        fault: WqeFault,
    },
}

/// What is wrong with a send WQE ([`DeviceError::BadWqe`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeFault {
    /// The control segment's WQE index is not the SQ position it sits at.
    BadIndex {
        /// The SQ position.
        expected: u16,
        /// The index in the control segment.
        found: u16,
    },
    /// `ds` is 0 or the WQE is larger than `max_wqe_sz_sq`, 16 WQEBBs or the SQ.
    BadDs(u8),
    /// The control segment names another QP.
    QpnMismatch(u32),
    /// An opcode this device does not execute for the QP's service type.
    BadOpcode(u8),
    /// The segments do not fit the opcode (missing remote address, atomic or datagram
    /// segment; inline data where none is allowed or mixed with pointers; an inline length
    /// running past the WQE).
    BadSegments,
    /// The message is longer than 2^`log_msg_max` bytes.
    TooLong(u64),
    /// The WQE is larger than what the doorbell record says was posted.
    BeyondProducer,
}

/// A write into a UAR page, as recorded (queue processing beyond EQ doorbells comes later).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UarWrite {
    /// UAR index.
    pub uar: u32,
    /// Offset inside the 4 KiB UAR page.
    pub offset: usize,
    /// The bytes written.
    pub data: Vec<u8>,
}

/// Where the device's MSI-X messages go ([`Device::set_interrupt_sink`]): called with the
/// vector number each time one is raised.
pub type InterruptSink = Arc<dyn Fn(u16) + Send + Sync>;

/// The emulated mlx5 device.
pub struct Device {
    pub(crate) profile: Profile,
    pub(crate) mem: Arc<dyn AddressSpace>,
    pub(crate) bar: Box<dyn BarMemory>,
    pub(crate) faults: Faults,
    pub(crate) regs: regs::Regs,
    pub(crate) hca: state::Hca,
    pub(crate) obj: objects::Objects,
    pub(crate) log: Vec<CmdRecord>,
    pub(crate) errors: Vec<DeviceError>,
    pub(crate) uar_log: Vec<UarWrite>,
    pub(crate) irqs: BTreeSet<u16>,
    pub(crate) irq_sink: Option<InterruptSink>,
    pub(crate) net: dp::net::Net,
}

impl core::fmt::Debug for Device {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Device")
            .field("profile", &self.profile)
            .field("live", &self.live())
            .field("errors", &self.errors)
            .finish_non_exhaustive()
    }
}

/// Most UAR writes kept by [`Device::uar_writes`] (older ones are dropped).
const UAR_LOG_MAX: usize = 4096;

impl Device {
    /// A device fresh out of reset with a [`VecBar`] of `profile.bar_size` bytes.
    pub fn new(profile: Profile, mem: Arc<dyn AddressSpace>) -> Device {
        let bar = Box::new(VecBar::new(profile.bar_size));
        Device::with_bar(profile, mem, bar)
    }

    /// A device fresh out of reset over the given BAR0 backing store (e.g. shared memory).
    pub fn with_bar(
        profile: Profile,
        mem: Arc<dyn AddressSpace>,
        bar: Box<dyn BarMemory>,
    ) -> Device {
        let regs = regs::Regs::new(&profile);
        let hca = state::Hca::new(&profile);
        let obj = objects::Objects::new(&profile, bar.len());
        let mut dev = Device {
            profile,
            mem,
            bar,
            faults: Faults::default(),
            regs,
            hca,
            obj,
            log: Vec::new(),
            errors: Vec::new(),
            uar_log: Vec::new(),
            irqs: BTreeSet::new(),
            irq_sink: None,
            net: dp::net::Net::new(),
        };
        dev.reset_bar();
        dev
    }

    /// A trapped BAR read (normally 4 or 8 bytes): updates what the read observes
    /// (`initializing`, `health_counter`, timer) and returns the bytes.
    pub fn mmio_read(&mut self, off: usize, buf: &mut [u8]) {
        self.reg_read(off, buf);
    }

    /// A trapped BAR write (4 or 8 bytes, or a 64-byte BlueFlame burst): stores it and runs
    /// whatever it triggers (command execution, EQ doorbells) before returning.
    pub fn mmio_write(&mut self, off: usize, data: &[u8]) {
        self.reg_write(off, data);
    }

    /// Look for work and do it; returns whether anything was done.
    ///
    /// Untrapped BAR: a nonzero command doorbell word, a changed queue address, EQ doorbells
    /// in UAR pages. Data path (trapped or not): frames from the fabric and the internal
    /// loopback, SQ doorbell records written without a doorbell (word 1), WQEs posted to QPs
    /// in ERR (flushed), retransmission and RNR timers, CQ arm requests in doorbell records
    /// (word 1). Also advances the health counter and the `initializing` countdown.
    pub fn poll(&mut self) -> bool {
        let bar = self.poll_bar();
        let dp = self.progress();
        self.regs.idle = !(bar || dp);
        bar || dp
    }

    /// Attaches the device's port to a fabric port (see [`roce_wire::fabric`]); returns the
    /// port it was attached to before. From then on the port's address is the device's
    /// source address and packets for other addresses go to the fabric; packets for the
    /// device's own addresses (the port's, [`Profile::ipv4`], its GIDs) still loop back
    /// inside the device.
    pub fn attach(
        &mut self,
        port: Box<dyn roce_wire::fabric::Port>,
    ) -> Option<Box<dyn roce_wire::fabric::Port>> {
        self.net.port.replace(port)
    }

    /// Attaches the device to `fabric` at `addr` (see [`Device::attach`]).
    pub fn attach_to(
        &mut self,
        fabric: &dyn roce_wire::fabric::Fabric,
        addr: std::net::Ipv4Addr,
    ) -> Result<(), roce_wire::fabric::FabricError> {
        let port = fabric.attach(addr)?;
        self.net.port = Some(port);
        Ok(())
    }

    /// Detaches the device from its fabric port and returns it.
    pub fn detach(&mut self) -> Option<Box<dyn roce_wire::fabric::Port>> {
        self.net.port.take()
    }

    /// The address of the attached fabric port.
    pub fn port_addr(&self) -> Option<std::net::Ipv4Addr> {
        self.net.port.as_ref().map(|p| p.addr())
    }

    /// Replaces the device clock (nanoseconds, monotonic) that drives the transport timers
    /// and CQE timestamps — e.g. the virtual clock of an in-process fabric, so that a test is
    /// reproducible. The default is the wall clock since the device was created.
    pub fn set_clock(&mut self, clock: Clock) {
        self.net.clock = clock;
    }

    /// The port counters.
    pub fn port_stats(&self) -> PortStats {
        self.net.stats
    }

    /// The test knobs.
    pub fn faults(&mut self) -> &mut Faults {
        &mut self.faults
    }

    /// Raises a fatal health syndrome as firmware would (`synd` and the `rfr` bit in the
    /// health buffer; the health counter stops). From then on every command completes with
    /// status INTERNAL_ERR, syndrome [`syndrome::HEALTH_FATAL`].
    pub fn raise_health(&mut self, synd: u8) {
        self.fatal(synd);
    }

    /// Live object counts (leak check: `Live::default()` after a full teardown).
    pub fn live(&self) -> Live {
        let o = &self.obj;
        Live {
            uars: o.uars.len(),
            pds: o.pds.len(),
            tds: o.tds.len(),
            eqs: o.eqs.len(),
            cqs: o.cqs.len(),
            mkeys: o.mkeys.len(),
            qps: o.qps.len(),
            srqs: o.srqs.len(),
            fw_pages: u32::try_from(self.hca.pages.len()).unwrap_or(u32::MAX),
            hca_enabled: self.hca.enabled,
            hca_initialized: self.hca.initialized,
        }
    }

    /// PAGE_REQUEST events the device raised at run time (asking for pages or offering them
    /// back; see [`PageRequests`] and [`Faults::page_storm`]).
    pub fn page_requests_raised(&self) -> u64 {
        self.hca.rt.posted
    }

    /// Command slots whose command waits for pages (a create the driver has not given the
    /// pages for yet), ascending.
    pub fn waiting_for_pages(&self) -> Vec<u8> {
        self.hca.rt.parked.keys().copied().collect()
    }

    /// Every command completed so far, in completion order.
    pub fn command_log(&self) -> &[CmdRecord] {
        &self.log
    }

    /// The profile the device was made with.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// Every device-side error so far, in order.
    pub fn errors(&self) -> &[DeviceError] {
        &self.errors
    }

    /// The state of QP `qpn` (`ctx::qpc::STATE_*` encoding), `None` if it does not exist.
    pub fn qp_state(&self, qpn: u32) -> Option<u8> {
        self.obj.qps.get(qpn).map(|q| q.state)
    }

    /// Test knob: moves QP `qpn` to ERR as an error the device detected would (a local
    /// error with the QP's catastrophic-error event), flushing its queues. False if there is
    /// no such QP.
    pub fn fail_qp(&mut self, qpn: u32) -> bool {
        if self.obj.qps.get(qpn).is_none() {
            return false;
        }
        self.qp_fatal(qpn);
        true
    }

    /// The most recent writes into allocated UAR pages (at most 4096 are kept).
    pub fn uar_writes(&self) -> &[UarWrite] {
        &self.uar_log
    }

    /// MSI-X vectors (EQ `intr` values) that fired since the last call, ascending. An EQ fires
    /// when it is armed (doorbell at UAR 0x40) and has an EQE the driver has not consumed.
    pub fn take_interrupts(&mut self) -> Vec<u16> {
        core::mem::take(&mut self.irqs).into_iter().collect()
    }

    /// Delivers MSI-X messages: from now on every vector the device raises is also handed to
    /// `sink` (the device's lock is held during the call: the sink must not reach back into
    /// the device). `None` stops delivery. [`take_interrupts`](Self::take_interrupts) still
    /// records them.
    pub fn set_interrupt_sink(&mut self, sink: Option<InterruptSink>) {
        self.irq_sink = sink;
    }

    /// Raises MSI-X vector `v` (an armed EQ fired).
    pub(crate) fn raise_interrupt(&mut self, v: u16) {
        self.irqs.insert(v);
        if let Some(sink) = &self.irq_sink {
            sink(v);
        }
    }

    pub(crate) fn error(&mut self, e: DeviceError) {
        self.errors.push(e);
    }

    pub(crate) fn record_uar_write(&mut self, w: UarWrite) {
        if self.uar_log.len() >= UAR_LOG_MAX {
            self.uar_log.drain(..UAR_LOG_MAX / 2);
        }
        self.uar_log.push(w);
    }

    /// Whether the function may reach host memory beyond its command queue: between
    /// ENABLE_HCA and DISABLE_HCA. A disabled function (never enabled, or disabled since)
    /// refuses every other DMA, so that nothing a peer sends can make it read or write host
    /// memory once the driver stopped it.
    pub(crate) fn dma_allowed(&self) -> bool {
        self.hca.enabled
    }

    /// A DMA the disabled function refuses: recorded, and a fault for the caller.
    fn dma_blocked(&mut self, iova: u64, len: usize, write: bool) -> DmaFault {
        let f = DmaFault { iova, len, write };
        self.error(DeviceError::DmaWhileDisabled(f));
        f
    }

    /// DMA read of the command interface (queue entries, mailboxes): allowed whether the
    /// function is enabled or not (ENABLE_HCA itself comes this way).
    pub(crate) fn cmd_dma_read(&mut self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        self.raw_dma_read(iova, buf)
    }

    /// DMA write of the command interface (see [`Device::cmd_dma_read`]).
    pub(crate) fn cmd_dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.raw_dma_write(iova, data)
    }

    /// DMA read through the IOMMU; a fault is recorded in [`Device::errors`]. Refused while
    /// the function is disabled ([`DeviceError::DmaWhileDisabled`]).
    pub(crate) fn dma_read(&mut self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        if !self.dma_allowed() {
            return Err(self.dma_blocked(iova, buf.len(), false));
        }
        self.raw_dma_read(iova, buf)
    }

    /// DMA write through the IOMMU; a fault is recorded in [`Device::errors`]. Refused while
    /// the function is disabled ([`DeviceError::DmaWhileDisabled`]).
    pub(crate) fn dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        if !self.dma_allowed() {
            return Err(self.dma_blocked(iova, data.len(), true));
        }
        self.raw_dma_write(iova, data)
    }

    fn raw_dma_read(&mut self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let r = mem::dma_read(&*self.mem, iova, buf);
        if let Err(f) = r {
            self.error(DeviceError::Dma(f));
        }
        r
    }

    fn raw_dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let r = mem::dma_write(&*self.mem, iova, data);
        if let Err(f) = r {
            self.error(DeviceError::Dma(f));
        }
        r
    }

    /// Checks that `len` bytes at `iova` are readable (reads them in chunks).
    pub(crate) fn probe(&mut self, iova: u64, len: u64) -> Result<(), DmaFault> {
        const CHUNK: u64 = 64 << 10;
        let mut buf = vec![0u8; CHUNK.min(len) as usize];
        let mut done = 0u64;
        while done < len {
            let n = CHUNK.min(len - done) as usize;
            let Some(a) = iova.checked_add(done) else {
                let f = DmaFault {
                    iova,
                    len: len as usize,
                    write: false,
                };
                self.error(DeviceError::Dma(f));
                return Err(f);
            };
            self.dma_read(a, &mut buf[..n])?;
            done += n as u64;
        }
        Ok(())
    }
}

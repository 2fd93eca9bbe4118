//! Attaches the EFA driver ([`efa::Device`]) to the in-process emulated EFA
//! ([`nic_emulator::efa::Device`]): the same pieces as the ConnectX testbed, applied to the
//! other device model.
//!
//! - [`EfaRegs`] implements [`RegisterIo`] for one BAR: a BAR0 access becomes a trapped
//!   access on the device, which runs what it triggers (a read-less response, a reset, admin
//!   commands) before the write returns; BAR2 (the low-latency send queues) and the doorbell
//!   BAR likewise ([`nic_emulator::efa::Device::bar_write`]: an SQ doorbell sends before it
//!   returns); with [`EfaTestbed::probe_mapped`], BAR2 is mapped memory instead
//!   ([`LlqMapping`]: the driver stores WQEs straight into it, as into a mapped
//!   write-combining BAR, and what changed reaches the device before the next doorbell);
//! - a device made by [`World::efa_at`] has a port on the world's in-process fabric at an
//!   address, the IPv4-mapped GID of that address, and the fabric's clock; the world polls
//!   it (frames in, SRD retransmissions);
//! - DMA memory comes from a [`HeapDma`], which is also the device's IOMMU ([`IommuView`]);
//! - the platform is [`EmuPlatform`] of a [`World`]: `relax` runs the world's devices (the
//!   EFA model executes inline, so it has nothing left to do) and moves the virtual clock, so
//!   driver timeouts expire without wall time; the device's MSI-X vectors reach the driver
//!   through [`IrqLines`] ([`EfaTestbed::interrupts`]), so a wait for a completion event
//!   sleeps until the device raises the EQ's vector.
//!
//! ```
//! use nic_testbed::efa::EfaTestbed;
//! use verbs::Provider;
//! let tb = EfaTestbed::new(Default::default());
//! let dev = tb.probe(Default::default()).unwrap();
//! let pd = dev.alloc_pd().unwrap();
//! assert_eq!(tb.live().pds, 1);
//! dev.dealloc_pd(pd).unwrap();
//! dev.shutdown().unwrap();
//! assert_eq!(tb.live(), Default::default());
//! ```

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use nic_emulator::efa::{Device, Live, Profile};
use nic_hal::{DmaAllocator, HeapDma, RegisterIo};

use crate::irq::IrqLines;
use crate::{EmuPlatform, IommuView, World, lock};

/// One BAR of the emulated EFA (0: registers, 2: low-latency queues, the profile's `db_bar`:
/// doorbells), as the driver's [`RegisterIo`]; with an [`LlqMapping`] BAR2 is mapped memory
/// and a doorbell first hands the device what changed there.
#[derive(Clone)]
pub struct EfaRegs(pub Arc<Mutex<Device>>, pub u8, pub Option<Arc<LlqMapping>>);

impl EfaRegs {
    /// Before a doorbell: the LLQ entries stored through the mapping reach the device.
    fn flush(&self) {
        if let Some(m) = &self.2
            && self.1 != 0
            && self.1 != nic_emulator::efa::MEM_BAR
        {
            m.flush(&self.0);
        }
    }
}

impl RegisterIo for EfaRegs {
    fn read32(&self, offset: usize) -> u32 {
        let mut b = [0xffu8; 4];
        if self.1 == 0 {
            lock(&self.0).mmio_read(offset, &mut b);
        }
        u32::from_ne_bytes(b)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.flush();
        lock(&self.0).bar_write(self.1, offset, &value.to_ne_bytes());
    }
    fn write64(&self, offset: usize, value: u64) {
        self.flush();
        // EFA registers are 32 bits: the device records an 8-byte access as a mistake.
        lock(&self.0).bar_write(self.1, offset, &value.to_ne_bytes());
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        self.flush();
        lock(&self.0).bar_write(self.1, offset, data);
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        match &self.2 {
            Some(m) if self.1 == nic_emulator::efa::MEM_BAR => m.mapped(offset, len),
            _ => None,
        }
    }
}

/// BAR2 (the low-latency queues) as mapped memory, as a program that mmaps the BAR sees it:
/// the driver's stores land here, and before each doorbell every 64-byte entry that changed
/// since the last one is written to the device, as write-combining buffers are flushed ahead
/// of the doorbell's uncached write.
pub struct LlqMapping {
    mem: Box<[AtomicU64]>,
    /// What the device was last given, word by word.
    sent: Mutex<Vec<u64>>,
}

impl LlqMapping {
    /// A mapping of `len` bytes (a multiple of 64).
    pub fn new(len: usize) -> Arc<LlqMapping> {
        let words = len / 8;
        Arc::new(LlqMapping {
            mem: (0..words).map(|_| AtomicU64::new(0)).collect(),
            sent: Mutex::new(vec![0; words]),
        })
    }

    fn mapped(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        if offset.checked_add(len)? > self.mem.len() * 8 {
            return None;
        }
        // In bounds (checked above) of memory that lives as long as the mapping, which the
        // driver's BAR handle keeps; every word is an atomic, so its volatile stores race
        // with nothing non-atomic.
        NonNull::new(
            self.mem
                .as_ptr()
                .cast::<u8>()
                .cast_mut()
                .wrapping_add(offset),
        )
    }

    /// Writes the entries that changed since the last flush to the device.
    fn flush(&self, dev: &Arc<Mutex<Device>>) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        for (i, (now, was)) in self.mem.chunks(8).zip(sent.chunks_mut(8)).enumerate() {
            let words: Vec<u64> = now.iter().map(|w| w.load(Ordering::Acquire)).collect();
            if words[..] != was[..] {
                was.copy_from_slice(&words);
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
                lock(dev).bar_write(nic_emulator::efa::MEM_BAR, i * 64, &bytes);
            }
        }
    }
}

/// The driver type as attached here.
pub type EfaDevice = efa::Device<EfaRegs, EmuPlatform>;

/// One emulated EFA with its host memory, ready for the driver to probe.
pub struct EfaTestbed {
    /// The device model (lock it to reach fault knobs, counters and logs).
    pub dev: Arc<Mutex<Device>>,
    /// Host DMA memory, which is also the device's IOMMU.
    pub dma: Arc<HeapDma>,
    world: Arc<World>,
    irq: Arc<IrqLines>,
}

impl World {
    /// Adds an emulated EFA with a port on the world's fabric at `ip` (a 127.0.0.0/8
    /// address by convention), the IPv4-mapped GID of `ip` as its address and the fabric's
    /// clock; the world polls it.
    pub fn efa_at(self: &Arc<Self>, ip: std::net::Ipv4Addr, profile: Profile) -> EfaTestbed {
        let tb = self.efa(Profile {
            gid: nic_emulator::roce_wire::gid_from_ipv4(ip),
            ..profile
        });
        {
            let mut d = tb.device();
            let fab = self.fabric().clone();
            d.set_clock(Arc::new(move || fab.now_ns()));
            let port = self
                .fabric()
                .attach_port(ip)
                .expect("attach the EFA to the in-process fabric");
            d.attach(Box::new(port));
        }
        self.efas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tb.dev.clone());
        tb
    }

    /// Adds an emulated EFA built from `profile` with no fabric port (its sends fail with
    /// "unreachable"; the control plane is all there is to test).
    pub fn efa(self: &Arc<Self>, profile: Profile) -> EfaTestbed {
        let dma = HeapDma::new(0x1_0000_0000);
        let irq = IrqLines::new(profile.msix_vectors);
        let mut dev = Device::new(profile, Arc::new(IommuView(dma.clone())));
        dev.set_interrupt_sink(Some(irq.sink()));
        EfaTestbed {
            dev: Arc::new(Mutex::new(dev)),
            dma,
            world: self.clone(),
            irq,
        }
    }
}

impl EfaTestbed {
    /// A device built from `profile`, alone in a world of its own.
    pub fn new(profile: Profile) -> EfaTestbed {
        World::new(0).efa(profile)
    }

    /// The world this device lives in.
    pub fn world(&self) -> &Arc<World> {
        &self.world
    }

    /// Locks the device model.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// The register backend (BAR0).
    pub fn regs(&self) -> EfaRegs {
        EfaRegs(self.dev.clone(), 0, None)
    }

    /// BAR `bar` of the device.
    pub fn bar(&self, bar: u8) -> EfaRegs {
        EfaRegs(self.dev.clone(), bar, None)
    }

    /// The platform backend (the world's clock, the device's interrupt lines).
    pub fn platform(&self) -> EmuPlatform {
        EmuPlatform {
            world: self.world.clone(),
            irq: Some(self.irq.clone()),
        }
    }

    /// The device's MSI-X vectors as the driver sees them.
    pub fn interrupts(&self) -> &Arc<IrqLines> {
        &self.irq
    }

    /// The DMA allocator handed to the driver.
    pub fn allocator(&self) -> Arc<dyn DmaAllocator> {
        self.dma.clone()
    }

    /// Runs the driver's bring-up against this device and gives it the data path's BARs
    /// (BAR2 and the doorbell BAR the device reported).
    pub fn probe(&self, config: efa::Config) -> Result<EfaDevice, efa::Error> {
        self.probe_with(config, None)
    }

    /// [`probe`](Self::probe) with BAR2 mapped as memory ([`LlqMapping`], as large as the
    /// profile's queues' LLQs): the driver's fast path stores WQEs straight into it.
    pub fn probe_mapped(&self, config: efa::Config) -> Result<EfaDevice, efa::Error> {
        let p = self.device().profile().clone();
        let len = p.max_qp as usize * p.max_llq_size as usize;
        self.probe_with(config, Some(LlqMapping::new(len)))
    }

    fn probe_with(
        &self,
        config: efa::Config,
        map: Option<Arc<LlqMapping>>,
    ) -> Result<EfaDevice, efa::Error> {
        let mut dev = efa::Device::probe(self.regs(), self.allocator(), self.platform(), config)?;
        let db = u8::try_from(dev.attributes().db_bar).unwrap_or(u8::MAX);
        dev.attach_data_bars(
            EfaRegs(self.dev.clone(), nic_emulator::efa::MEM_BAR, map.clone()),
            EfaRegs(self.dev.clone(), db, map),
        );
        Ok(dev)
    }

    /// The device's live-object counters.
    pub fn live(&self) -> Live {
        self.device().live()
    }
}

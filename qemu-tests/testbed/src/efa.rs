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
    /// Before a doorbell at `offset`: the LLQ entries stored through the mapping reach the
    /// device.
    fn flush(&self, offset: usize, value: u32) {
        if let Some(m) = &self.2
            && self.1 != 0
            && self.1 != nic_emulator::efa::MEM_BAR
        {
            m.flush(&self.0, offset, value);
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
        self.flush(offset, value);
        lock(&self.0).bar_write(self.1, offset, &value.to_ne_bytes());
    }
    fn write64(&self, offset: usize, value: u64) {
        self.flush(offset, value as u32);
        // EFA registers are 32 bits: the device records an 8-byte access as a mistake.
        lock(&self.0).bar_write(self.1, offset, &value.to_ne_bytes());
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        let value = data.first_chunk().map_or(0, |b| u32::from_ne_bytes(*b));
        self.flush(offset, value);
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
/// of the doorbell's uncached write. With [`LlqMapping::per_queue`], an SQ doorbell (QP
/// number `n` at `n * 8` of the doorbell BAR, below the CQ doorbells at `0x10000`, as the
/// emulated EFA lays them out) hands over only the WQEs it adds to QP `n`'s LLQ (`n * queue`
/// onwards), from the device's consumer counter to the doorbell's value, and the other
/// doorbells nothing: a doorbell costs what it posts, not a scan of the BAR.
pub struct LlqMapping {
    mem: Box<[AtomicU64]>,
    /// What the device was last given, word by word.
    sent: Mutex<Vec<u64>>,
    /// Bytes of one QP's LLQ (`None`: every doorbell flushes the whole mapping).
    queue: Option<usize>,
}

/// Where the emulated EFA's CQ doorbells start in the doorbell BAR (the SQ and RQ doorbells
/// are below).
const CQ_DB_BASE: usize = 0x1_0000;

impl LlqMapping {
    /// A mapping of `len` bytes (a multiple of 64).
    pub fn new(len: usize) -> Arc<LlqMapping> {
        let words = len / 8;
        Arc::new(LlqMapping {
            mem: (0..words).map(|_| AtomicU64::new(0)).collect(),
            sent: Mutex::new(vec![0; words]),
            queue: None,
        })
    }

    /// A mapping of `len` bytes holding LLQs of `queue` bytes each (the profile's
    /// `max_llq_size`, a multiple of 64), flushed per queue.
    pub fn per_queue(len: usize, queue: usize) -> Arc<LlqMapping> {
        let words = len / 8;
        Arc::new(LlqMapping {
            mem: (0..words).map(|_| AtomicU64::new(0)).collect(),
            sent: Mutex::new(vec![0; words]),
            queue: Some(queue).filter(|&q| q > 0 && q.is_multiple_of(64)),
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

    /// Before a write at `offset` of the doorbell BAR: hands the device what the driver
    /// stored. Per queue, an SQ doorbell (value `pc`) hands over the WQE slots of QP `n`'s
    /// LLQ from the device's consumer counter up to `pc` (what the doorbell adds; the
    /// device checks each one's phase); otherwise every 64-byte entry that changed since the
    /// last flush.
    fn flush(&self, dev: &Arc<Mutex<Device>>, offset: usize, value: u32) {
        let Some(q) = self.queue else {
            return self.flush_changed(dev, 0..self.mem.len());
        };
        if offset >= CQ_DB_BASE || !offset.is_multiple_of(8) {
            return;
        }
        let qpn = offset / 8;
        let Some((cc, depth, size)) = u16::try_from(qpn).ok().and_then(|n| {
            let d = lock(dev);
            let (cc, depth) = d.sq_position(n)?;
            Some((cc, depth, d.sq_wqe_size(n)?))
        }) else {
            return;
        };
        let depth = depth as usize;
        // Entries of 64 or 128 bytes (the QP's LLQ entry size).
        if depth == 0 || !matches!(size, 64 | 128) || depth * size > q {
            return;
        }
        let words = size / 8;
        let base = qpn * q / 8;
        let new = usize::from((value as u16).wrapping_sub(cc)).min(depth);
        for k in 0..new {
            let slot = (usize::from(cc) + k) % depth;
            let at = base + slot * words;
            let Some(now) = self.mem.get(at..at + words) else {
                return;
            };
            let mut bytes = [0u8; 128];
            for (b, a) in bytes.chunks_mut(8).zip(now) {
                b.copy_from_slice(&a.load(Ordering::Acquire).to_ne_bytes());
            }
            lock(dev).bar_write(nic_emulator::efa::MEM_BAR, at * 8, &bytes[..size]);
        }
    }

    /// Writes the entries of `words` that changed since the last flush to the device.
    fn flush_changed(&self, dev: &Arc<Mutex<Device>>, words: std::ops::Range<usize>) {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        let first = words.start / 8;
        let (now, was) = (&self.mem[words.clone()], &mut sent[words]);
        for (i, (now, was)) in now.chunks(8).zip(was.chunks_mut(8)).enumerate() {
            let mut w = [0u64; 8];
            for (x, a) in w.iter_mut().zip(now) {
                *x = a.load(Ordering::Acquire);
            }
            if w[..] != was[..] {
                was.copy_from_slice(&w);
                let mut bytes = [0u8; 64];
                for (b, x) in bytes.chunks_mut(8).zip(w) {
                    b.copy_from_slice(&x.to_ne_bytes());
                }
                lock(dev).bar_write(nic_emulator::efa::MEM_BAR, (first + i) * 64, &bytes);
            }
        }
    }
}

/// Probes the EFA driver on `dev` with `platform` and gives it the data path's BARs (BAR2,
/// mapped through `map` when given, and the doorbell BAR the device reported).
fn probe_efa<P: nic_hal::Platform>(
    dev: &Arc<Mutex<Device>>,
    dma: Arc<dyn DmaAllocator>,
    platform: P,
    config: efa::Config,
    map: Option<Arc<LlqMapping>>,
) -> Result<efa::Device<EfaRegs, P>, efa::Error> {
    let mut drv = efa::Device::probe(EfaRegs(dev.clone(), 0, None), dma, platform, config)?;
    let db = u8::try_from(drv.attributes().db_bar).unwrap_or(u8::MAX);
    drv.attach_data_bars(
        EfaRegs(dev.clone(), nic_emulator::efa::MEM_BAR, map.clone()),
        EfaRegs(dev.clone(), db, map),
    );
    Ok(drv)
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
        // QP numbers start at 1: the LLQ of QP `max_qp` ends at `(max_qp + 1) * max_llq_size`.
        let len = (p.max_qp as usize + 1) * p.max_llq_size as usize;
        let map = LlqMapping::per_queue(len, p.max_llq_size as usize);
        self.probe_with(config, Some(map))
    }

    fn probe_with(
        &self,
        config: efa::Config,
        map: Option<Arc<LlqMapping>>,
    ) -> Result<EfaDevice, efa::Error> {
        probe_efa(&self.dev, self.allocator(), self.platform(), config, map)
    }

    /// The device's live-object counters.
    pub fn live(&self) -> Live {
        self.device().live()
    }
}

/// The driver type of an [`EfaPortNic`] on the UDP fabric.
pub type EfaUdpDevice = efa::Device<EfaRegs, crate::RealTime>;

/// The driver type of an [`EfaPortNic`] on an Ethernet link.
pub type EfaEthDevice = efa::Device<EfaRegs, crate::YieldingTime>;

/// An emulated EFA in real time with a port on a fabric shared with other processes (the UDP
/// fabric, or an Ethernet link in QEMU's socket-netdev format): the EFA counterpart of
/// [`UdpNic`](crate::UdpNic) and [`EthLinkNic`](crate::EthLinkNic). Its device runs on a
/// poller thread of its own (frames in, SRD retransmissions); its GID is the IPv4-mapped GID
/// of its address and its node GUID the EUI-64 of its MAC ([`EfaPortNic::mac`]).
///
/// Dropping it stops the poller: shut the driver down first.
///
/// ```
/// use std::net::Ipv4Addr;
/// use nic_testbed::efa::EfaPortNic;
/// use verbs::{Gid, Provider};
///
/// let ip = Ipv4Addr::new(127, 0, 0, 31);
/// let nic = EfaPortNic::udp(ip, 47_913, Default::default()).unwrap();
/// let dev = nic.probe_udp().unwrap();
/// assert_eq!(dev.query_gid(1, 0).unwrap(), Gid::from_ipv4(ip.octets()));
/// dev.shutdown().unwrap();
/// assert_eq!(nic.live(), Default::default());
/// ```
pub struct EfaPortNic {
    /// The device model (the poller thread takes the same lock for each poll).
    pub dev: Arc<Mutex<Device>>,
    /// Host DMA memory, which is also the device's IOMMU.
    pub dma: Arc<HeapDma>,
    ip: std::net::Ipv4Addr,
    mac: [u8; 6],
    eth: Option<nic_emulator::roce_wire::fabric::EthHandle>,
    poller: Option<nic_emulator::Poller>,
}

/// The EUI-64 node GUID of `mac` (`ff:fe` in the middle, the universal/local bit flipped).
pub fn guid_from_mac(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 2,
        mac[1],
        mac[2],
        0xff,
        0xfe,
        mac[3],
        mac[4],
        mac[5],
    ])
}

impl EfaPortNic {
    /// An EFA built from `profile` whose port is a UDP socket bound to `ip:udp_port` (`ip`
    /// in 127.0.0.0/8; MAC `02:00` and the address, the UDP fabric's rule).
    ///
    /// Fails if the address is not loopback or is already bound.
    pub fn udp(
        ip: std::net::Ipv4Addr,
        udp_port: u16,
        profile: Profile,
    ) -> Result<EfaPortNic, nic_emulator::roce_wire::fabric::FabricError> {
        let port = nic_emulator::roce_wire::fabric::UdpFabric::new(udp_port).bind(ip)?;
        let mac = crate::udp::UdpResolver::mac_for(ip);
        Ok(Self::build(Box::new(port), ip, mac, None, profile))
    }

    /// An EFA built from `profile` on the Ethernet link `link` at `ip` (MAC `link.mac`; the
    /// port answers ARP and resolves its destinations by ARP).
    ///
    /// Fails if the link's sockets are not on 127.0.0.0/8, the MAC is multicast or zero, or
    /// the local socket is taken.
    pub fn eth(
        link: nic_emulator::roce_wire::fabric::EthLink,
        ip: std::net::Ipv4Addr,
        profile: Profile,
    ) -> Result<EfaPortNic, nic_emulator::roce_wire::fabric::FabricError> {
        let mac = link.mac;
        let port = link.bind(ip)?;
        let eth = port.handle();
        Ok(Self::build(Box::new(port), ip, mac, Some(eth), profile))
    }

    fn build(
        port: Box<dyn nic_emulator::roce_wire::fabric::Port>,
        ip: std::net::Ipv4Addr,
        mac: [u8; 6],
        eth: Option<nic_emulator::roce_wire::fabric::EthHandle>,
        profile: Profile,
    ) -> EfaPortNic {
        let dma = HeapDma::new(0x1_0000_0000);
        let mut dev = Device::new(
            Profile {
                gid: nic_emulator::roce_wire::gid_from_ipv4(ip),
                guid: guid_from_mac(mac),
                ..profile
            },
            Arc::new(IommuView(dma.clone())),
        );
        let epoch = std::time::Instant::now();
        dev.set_clock(Arc::new(move || {
            u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
        }));
        dev.attach(port);
        let dev = Arc::new(Mutex::new(dev));
        let poller = Some(nic_emulator::spawn_poller(dev.clone()));
        EfaPortNic {
            dev,
            dma,
            ip,
            mac,
            eth,
            poller,
        }
    }

    /// The port's IPv4 address.
    pub fn ip(&self) -> std::net::Ipv4Addr {
        self.ip
    }

    /// The port's MAC (an Ethernet link's; on the UDP fabric, the fabric's rule).
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// The Ethernet port, on an Ethernet link.
    pub fn eth_handle(&self) -> Option<&nic_emulator::roce_wire::fabric::EthHandle> {
        self.eth.as_ref()
    }

    /// The port's ARP as a connection manager's address resolution, on an Ethernet link.
    pub fn resolver(&self) -> Option<crate::EthResolver> {
        self.eth.clone().map(crate::EthResolver)
    }

    /// Locks the device model.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// The device's live-object counters.
    pub fn live(&self) -> Live {
        self.device().live()
    }

    /// The PCI device id of the emulated function.
    pub fn device_id(&self) -> u16 {
        self.device().profile().device_id
    }

    /// Probes the EFA driver with `platform` as its clock and relax hook, BAR2 mapped as
    /// memory ([`LlqMapping`]) and the doorbell BAR attached.
    pub fn probe_with<P: nic_hal::Platform>(
        &self,
        platform: P,
        config: efa::Config,
    ) -> Result<efa::Device<EfaRegs, P>, efa::Error> {
        let p = self.device().profile().clone();
        // QP numbers start at 1: the LLQ of QP `max_qp` ends at `(max_qp + 1) * max_llq_size`.
        let len = (p.max_qp as usize + 1) * p.max_llq_size as usize;
        let config = efa::Config {
            device_id: if config.device_id == 0 {
                p.device_id
            } else {
                config.device_id
            },
            ..config
        };
        probe_efa(
            &self.dev,
            self.dma.clone(),
            platform,
            config,
            Some(LlqMapping::per_queue(len, p.max_llq_size as usize)),
        )
    }

    /// [`probe_with`](Self::probe_with) on real time (a spin hint as relax): the driver of a
    /// NIC on the UDP fabric.
    pub fn probe_udp(&self) -> Result<EfaUdpDevice, efa::Error> {
        self.probe_with(crate::RealTime::new(), efa::Config::default())
    }

    /// [`probe_with`](Self::probe_with) on real time that yields the CPU as relax: the
    /// driver of a NIC on an Ethernet link to a QEMU guest.
    pub fn probe_eth(&self) -> Result<EfaEthDevice, efa::Error> {
        self.probe_with(crate::YieldingTime::new(), efa::Config::default())
    }

    /// Stops the device's poller (after the driver's shutdown; dropping does it too).
    pub fn stop_poller(&mut self) {
        if let Some(p) = self.poller.take() {
            p.stop();
        }
    }
}

impl Drop for EfaPortNic {
    fn drop(&mut self) {
        self.stop_poller();
    }
}

/// A window of a shared BAR mapping as one BAR of the driver: what a guest driver does with
/// the shared memory BAR of `nic-emud --family efa` ([`nic_emulator::efa::ShmHeader`] says
/// where each window is).
pub struct ShmWindow {
    bar: nic_hal::MmioBar,
    _map: Arc<nic_emulator::host::SharedMapping>,
}

impl ShmWindow {
    /// The `len` bytes at `off` of `map`; `None` when they are not inside it.
    pub fn new(
        map: &Arc<nic_emulator::host::SharedMapping>,
        off: usize,
        len: usize,
    ) -> Option<ShmWindow> {
        if off.checked_add(len)? > map.len() || len == 0 {
            return None;
        }
        // In bounds (checked above).
        let base = NonNull::new(map.as_ptr().as_ptr().wrapping_add(off))?;
        // SAFETY: `base..base+len` lies inside the shared mapping (checked above), which the
        // window keeps alive (`_map`); the mapping is accessed through raw pointers only.
        let bar = unsafe { nic_hal::MmioBar::new(base, len) };
        Some(ShmWindow {
            bar,
            _map: map.clone(),
        })
    }
}

impl RegisterIo for ShmWindow {
    fn read32(&self, offset: usize) -> u32 {
        self.bar.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.bar.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.bar.write64(offset, value)
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        self.bar.write_block(offset, data)
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<NonNull<u8>> {
        self.bar.mapped(offset, len)
    }
}

/// The driver type of an [`EfaShmNic`] (its waits yield the CPU: the device is a thread
/// that must get to run within the driver's read-less timeout on a loaded machine).
pub type EfaShmDevice = efa::Device<ShmWindow, crate::YieldingTime>;

/// An emulated EFA untrapped on a shared BAR file, as `nic-emud --family efa` runs it behind
/// a QEMU guest: the device polls the file for the driver's writes on a thread of its own,
/// and the driver (here, in-process) maps the file a second time and takes the windows the
/// identity page names as its BARs. Its port is a UDP socket on the UDP fabric. DMA memory
/// is a [`HeapDma`] (as for the other in-process attachments).
pub struct EfaShmNic {
    /// The device model.
    pub dev: Arc<Mutex<Device>>,
    /// Host DMA memory, which is also the device's IOMMU.
    pub dma: Arc<HeapDma>,
    /// The driver's mapping of the BAR file.
    pub guest: Arc<nic_emulator::host::SharedMapping>,
    poller: Option<nic_emulator::Poller>,
}

impl EfaShmNic {
    /// A device of `profile` (GID the IPv4-mapped GID of `ip`) on the BAR file `path`
    /// (created, sized to the layout's BAR), its port at `ip:udp_port` on the UDP fabric.
    pub fn new(
        path: &std::path::Path,
        ip: std::net::Ipv4Addr,
        udp_port: u16,
        profile: Profile,
    ) -> Result<EfaShmNic, String> {
        let profile = Profile {
            gid: nic_emulator::roce_wire::gid_from_ipv4(ip),
            guid: guid_from_mac(crate::udp::UdpResolver::mac_for(ip)),
            ..profile
        };
        let layout = nic_emulator::efa::ShmLayout::for_profile(&profile);
        let map = nic_emulator::host::SharedMapping::open(path, Some(layout.len as u64), true)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let port = nic_emulator::roce_wire::fabric::UdpFabric::new(udp_port)
            .bind(ip)
            .map_err(|e| format!("{ip}:{udp_port}: {e}"))?;
        let dma = HeapDma::new(0x1_0000_0000);
        let mut dev = Device::with_shared_bar(
            profile,
            Arc::new(IommuView(dma.clone())),
            Box::new(nic_emulator::host::ShmBar::from_mapping(map)),
        )?;
        dev.attach(Box::new(port));
        let guest = nic_emulator::host::SharedMapping::open(path, None, false)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let dev = Arc::new(Mutex::new(dev));
        let poller = Some(nic_emulator::spawn_poller(dev.clone()));
        Ok(EfaShmNic {
            dev,
            dma,
            guest: Arc::new(guest),
            poller,
        })
    }

    /// The identity page as the driver's mapping shows it.
    pub fn header(&self) -> Option<nic_emulator::efa::ShmHeader> {
        let mut b = [0u8; nic_emulator::efa::HEADER_LEN];
        self.guest.read(nic_emulator::efa::HEADER_OFF, &mut b);
        nic_emulator::efa::ShmHeader::parse(&b)
    }

    /// Probes the EFA driver through the windows the identity page names (as a guest driver
    /// would: nothing but the shared BAR), with BAR2 and the doorbell BAR attached.
    pub fn probe(&self) -> Result<EfaShmDevice, String> {
        let h = self
            .header()
            .ok_or("no EFA identity page in the shared BAR")?;
        let win = |off: u32, len: u32| {
            ShmWindow::new(&self.guest, off as usize, len as usize)
                .ok_or_else(|| format!("window {off:#x}+{len:#x} outside the shared BAR"))
        };
        let config = efa::Config {
            device_id: h.device,
            ..Default::default()
        };
        let mut drv = efa::Device::probe(
            win(h.regs.0, h.regs.1)?,
            self.dma.clone(),
            crate::YieldingTime::new(),
            config,
        )
        .map_err(|e| format!("probe: {e:?}"))?;
        if u32::from(drv.attributes().db_bar) != h.doorbells.0 {
            let _ = drv.shutdown();
            return Err("the doorbell BAR differs from the identity page's".into());
        }
        let mem = win(h.llq.0, h.llq.1);
        let db = win(h.doorbells.1, h.doorbells.2);
        match (mem, db) {
            (Ok(m), Ok(d)) => drv.attach_data_bars(m, d),
            (Err(e), _) | (_, Err(e)) => {
                let _ = drv.shutdown();
                return Err(e);
            }
        }
        Ok(drv)
    }

    /// Locks the device model.
    pub fn device(&self) -> MutexGuard<'_, Device> {
        lock(&self.dev)
    }

    /// Stops the device's poller (after the driver's shutdown; dropping does it too).
    pub fn stop_poller(&mut self) {
        if let Some(p) = self.poller.take() {
            p.stop();
        }
    }
}

impl Drop for EfaShmNic {
    fn drop(&mut self) {
        self.stop_poller();
    }
}

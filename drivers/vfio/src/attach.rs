//! Attaching a PCI function through vfio-pci: checks in sysfs, container and group through
//! `vfio-ioctls`, BAR mmap, config space, reset.

use std::fmt;
use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use nic_hal::{MmioBar, RegisterIo};
use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_BAR5_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE, VFIO_TYPE,
    vfio_device_info,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioRegionInfoCap, VfioRegionSparseMmapArea};

use crate::dma::{DmaMapper, DmaOptions, VfioDma, VfioDmaError};
use crate::error::{AttachError, Context, Stage, from_errno, from_vfio_error};
use crate::irq::{MsixError, VfioInterrupts};
use crate::pci::{
    PCI_COMMAND, PCI_COMMAND_MASTER, PCI_COMMAND_MEMORY, PCI_DEVICE_ID, PCI_VENDOR_ID, PciAddress,
};
use crate::sys;

/// `_IO(VFIO_TYPE, VFIO_BASE + 7)`: `VFIO_DEVICE_GET_INFO` (linux/vfio.h).
const VFIO_DEVICE_GET_INFO: u32 = ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + 7);
/// `_IO(VFIO_TYPE, VFIO_BASE + 11)`: `VFIO_DEVICE_RESET` (linux/vfio.h).
const VFIO_DEVICE_RESET: u32 = ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + 11);

/// What [`attach`] does besides mapping the BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttachOptions {
    /// The BAR to map (0..=5); ConnectX registers are in BAR0.
    pub bar: u32,
    /// Reset the function with `VFIO_DEVICE_RESET` if it offers a reset.
    pub reset: bool,
    /// Set the bus-master bit (the memory-space bit is always set: without it an access to
    /// the mapped BAR faults).
    pub bus_master: bool,
}

impl Default for AttachOptions {
    fn default() -> Self {
        AttachOptions {
            bar: 0,
            reset: true,
            bus_master: true,
        }
    }
}

/// Where sysfs and the VFIO nodes are (tests point these at a fake tree).
#[derive(Clone, Debug)]
pub(crate) struct SysPaths {
    pub sysfs: PathBuf,
    pub dev_vfio: PathBuf,
}

impl Default for SysPaths {
    fn default() -> Self {
        SysPaths {
            sysfs: "/sys".into(),
            dev_vfio: "/dev/vfio".into(),
        }
    }
}

/// Whether `driver` is vfio-pci or one of its vendor variants (`mlx5_vfio_pci`, ...), which
/// offer the same VFIO device interface.
pub fn is_vfio_driver(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("_vfio_pci")
}

fn link_name(path: &Path) -> std::io::Result<String> {
    let target = path.read_link()?;
    Ok(target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default())
}

/// The checks that need no VFIO node: address, `/dev/vfio/vfio`, device, driver, IOMMU group.
pub(crate) fn preflight(
    paths: &SysPaths,
    bdf: &str,
    opts: &AttachOptions,
) -> Result<(PciAddress, Context), AttachError> {
    let addr: PciAddress = bdf.parse()?;
    let bdf = addr.to_string();
    let container = paths.dev_vfio.join("vfio");
    // The most basic fact first: without the container node nothing below can work, and
    // the message says how to get it.
    if let Err(e) = container.symlink_metadata()
        && e.kind() == ErrorKind::NotFound
    {
        return Err(AttachError::NoVfio { path: container });
    }
    let sysfs_dev = paths.sysfs.join("bus/pci/devices").join(&bdf);
    if sysfs_dev.metadata().is_err() {
        return Err(AttachError::NoSuchDevice { bdf });
    }
    let driver = match link_name(&sysfs_dev.join("driver")) {
        Ok(d) => d,
        Err(e) if e.kind() == ErrorKind::NotFound => return Err(AttachError::NotBound { bdf }),
        Err(e) => {
            return Err(AttachError::Vfio {
                stage: Stage::OpenGroup,
                errno: e.raw_os_error(),
                detail: format!("reading {}", sysfs_dev.join("driver").display()),
            });
        }
    };
    if !is_vfio_driver(&driver) {
        return Err(AttachError::BoundToOtherDriver { bdf, driver });
    }
    let group = link_name(&sysfs_dev.join("iommu_group"))
        .ok()
        .and_then(|g| g.parse::<u32>().ok())
        .ok_or_else(|| AttachError::NoIommuGroup { bdf: bdf.clone() })?;
    // Other members of the group bound to a host driver make it non-viable; list them for the
    // message in case the kernel says so (it decides, not us).
    let mut blockers = Vec::new();
    let members = paths
        .sysfs
        .join("kernel/iommu_groups")
        .join(group.to_string())
        .join("devices");
    if let Ok(rd) = std::fs::read_dir(&members) {
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == bdf {
                continue;
            }
            if let Ok(drv) = link_name(&entry.path().join("driver"))
                && !is_vfio_driver(&drv)
                && drv != "pci-stub"
            {
                blockers.push((name, drv));
            }
        }
    }
    blockers.sort();
    let group_node = paths.dev_vfio.join(group.to_string());
    Ok((
        addr,
        Context {
            bdf,
            container,
            group_node,
            group,
            sysfs_dev,
            blockers,
            bar: opts.bar,
        },
    ))
}

/// Attaches the PCI function `bdf` (`DDDD:BB:DD.F`), which must be bound to vfio-pci: opens
/// the container and its IOMMU group (type1v2 IOMMU), gets the device, resets it if it offers
/// a reset (and `opts.reset`), enables memory space and bus mastering in the command register
/// and maps the BAR.
///
/// The checks run from the most basic up (VFIO present, device present, bound to vfio-pci,
/// in an IOMMU group), so the error names the first thing to fix.
pub fn attach(bdf: &str, opts: &AttachOptions) -> Result<Attached, AttachError> {
    attach_at(&SysPaths::default(), bdf, opts)
}

pub(crate) fn attach_at(
    paths: &SysPaths,
    bdf: &str,
    opts: &AttachOptions,
) -> Result<Attached, AttachError> {
    let (addr, ctx) = preflight(paths, bdf, opts)?;
    if opts.bar > VFIO_PCI_BAR5_REGION_INDEX {
        return Err(AttachError::NoSuchBar { bar: opts.bar });
    }
    let container = Arc::new(VfioContainer::new(None).map_err(|e| from_vfio_error(&e, &ctx))?);
    let device = VfioDevice::new(&ctx.sysfs_dev, container.clone(), false)
        .map_err(|e| from_vfio_error(&e, &ctx))?;
    let device = Arc::new(device);
    let fd = device.as_raw_fd();
    let info = device_info(fd).map_err(|e| from_errno(Stage::DeviceInfo, e, &ctx))?;
    let config = ConfigSpace {
        fd,
        offset: device.get_region_offset(VFIO_PCI_CONFIG_REGION_INDEX),
        size: device.get_region_size(VFIO_PCI_CONFIG_REGION_INDEX),
    };
    let vendor_id = config.read16(PCI_VENDOR_ID)?;
    let device_id = config.read16(PCI_DEVICE_ID)?;
    if vendor_id == 0xffff {
        return Err(AttachError::ConfigSpace {
            what: "read of the vendor ID returned 0xffff: the function does not respond".into(),
            errno: None,
        });
    }
    let reset = opts.reset && info.flags & VFIO_DEVICE_FLAGS_RESET != 0;
    if reset {
        device_reset(fd).map_err(|e| from_errno(Stage::Reset, e, &ctx))?;
    }
    // After a reset the command register is clear; vfio-pci makes BAR accesses fault while
    // memory space is disabled, so enable it before the BAR is touched.
    let command = enable_command(&config, opts.bus_master)?;
    let bar = map_bar(&device, opts.bar, &ctx)?;
    Ok(Attached {
        bar: Arc::new(bar),
        config,
        device,
        container,
        addr,
        group: ctx.group,
        ctx,
        vendor_id,
        device_id,
        reset,
        command,
    })
}

fn device_info(fd: RawFd) -> Result<vfio_device_info, i32> {
    let mut info = vfio_device_info {
        argsz: std::mem::size_of::<vfio_device_info>() as u32,
        ..Default::default()
    };
    // SAFETY: VFIO_DEVICE_GET_INFO writes at most `argsz` bytes into the struct we pass, which
    // is a live, exclusively borrowed vfio_device_info of that size.
    let r = unsafe { libc::ioctl(fd, VFIO_DEVICE_GET_INFO as libc::Ioctl, &mut info) };
    if r < 0 { Err(sys::errno()) } else { Ok(info) }
}

fn device_reset(fd: RawFd) -> Result<(), i32> {
    // SAFETY: VFIO_DEVICE_RESET takes no argument and touches no memory of ours.
    let r = unsafe { libc::ioctl(fd, VFIO_DEVICE_RESET as libc::Ioctl) };
    if r < 0 { Err(sys::errno()) } else { Ok(()) }
}

/// The config-space region of a VFIO device fd (little-endian registers).
#[derive(Debug)]
pub(crate) struct ConfigSpace {
    pub fd: RawFd,
    pub offset: u64,
    pub size: u64,
}

impl ConfigSpace {
    fn check(&self, off: u64, n: usize, what: &str) -> Result<u64, AttachError> {
        match off.checked_add(n as u64) {
            Some(end) if end <= self.size => Ok(self.offset + off),
            _ => Err(AttachError::ConfigSpace {
                what: format!(
                    "{what} of {n} bytes at {off:#x} is outside the {:#x}-byte config space",
                    self.size
                ),
                errno: None,
            }),
        }
    }

    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<(), AttachError> {
        let at = self.check(off, buf.len(), "read")?;
        sys::pread_exact(self.fd, buf, at).map_err(|e| AttachError::ConfigSpace {
            what: format!("read at {off:#x}"),
            errno: Some(e),
        })
    }

    pub fn write(&self, off: u64, buf: &[u8]) -> Result<(), AttachError> {
        let at = self.check(off, buf.len(), "write")?;
        sys::pwrite_all(self.fd, buf, at).map_err(|e| AttachError::ConfigSpace {
            what: format!("write at {off:#x}"),
            errno: Some(e),
        })
    }

    pub fn read16(&self, off: u64) -> Result<u16, AttachError> {
        let mut b = [0u8; 2];
        self.read(off, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    pub fn write16(&self, off: u64, v: u16) -> Result<(), AttachError> {
        self.write(off, &v.to_le_bytes())
    }
}

/// Sets memory space (and bus master) in the command register, read-modify-write, and checks
/// that the bits stuck. Returns the new command value.
pub(crate) fn enable_command(cfg: &ConfigSpace, bus_master: bool) -> Result<u16, AttachError> {
    let want = PCI_COMMAND_MEMORY | if bus_master { PCI_COMMAND_MASTER } else { 0 };
    let cmd = cfg.read16(PCI_COMMAND)?;
    if cmd & want != want {
        cfg.write16(PCI_COMMAND, cmd | want)?;
    }
    let now = cfg.read16(PCI_COMMAND)?;
    if now & want != want {
        return Err(AttachError::ConfigSpace {
            what: format!(
                "command register: wrote {:#06x}, read back {now:#06x} (memory space / bus \
                 master did not stick)",
                cmd | want
            ),
            errno: None,
        });
    }
    Ok(now)
}

/// Whether the sparse-mmap areas cover `[0, size)` completely.
pub(crate) fn sparse_covers(areas: &[VfioRegionSparseMmapArea], size: u64) -> bool {
    let mut areas: Vec<_> = areas.iter().map(|a| (a.offset, a.size)).collect();
    areas.sort();
    let mut covered = 0u64;
    for (off, len) in areas {
        if off > covered {
            return false;
        }
        covered = covered.max(off.saturating_add(len));
    }
    covered >= size
}

fn map_bar(device: &Arc<VfioDevice>, bar: u32, ctx: &Context) -> Result<VfioBar, AttachError> {
    let size = device.get_region_size(bar);
    if size == 0 {
        return Err(AttachError::NoSuchBar { bar });
    }
    let flags = device.get_region_flags(bar);
    let not_mappable = |reason: String| AttachError::BarNotMappable { bar, reason };
    if flags & VFIO_REGION_INFO_FLAG_MMAP == 0 {
        return Err(not_mappable(
            "the kernel does not offer mmap for it (VFIO_REGION_INFO_FLAG_MMAP is clear: an \
             I/O-port BAR, or a BAR smaller than a page)"
                .into(),
        ));
    }
    let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
    if flags & rw != rw {
        return Err(not_mappable(format!(
            "the region is not readable and writable (flags {flags:#x})"
        )));
    }
    for cap in device.get_region_caps(bar) {
        if let VfioRegionInfoCap::SparseMmap(s) = cap
            && !sparse_covers(&s.areas, size)
        {
            return Err(not_mappable(format!(
                "only parts of it may be mapped (sparse mmap areas {:x?}): the MSI-X table is \
                 inside it and this kernel does not report it mappable; use a kernel with \
                 VFIO_REGION_INFO_CAP_MSIX_MAPPABLE (4.16+ with interrupt remapping)",
                s.areas
                    .iter()
                    .map(|a| (a.offset, a.size))
                    .collect::<Vec<_>>()
            )));
        }
    }
    let len = usize::try_from(size).map_err(|_| not_mappable(format!("size {size:#x}")))?;
    let offset = libc::off_t::try_from(device.get_region_offset(bar))
        .map_err(|_| not_mappable("region offset does not fit off_t".into()))?;
    // SAFETY: a new shared mapping of the device fd at the kernel's choice of address; it
    // overlaps nothing of ours. The result is checked before use.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            device.as_raw_fd(),
            offset,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(from_errno(Stage::MapBar, sys::errno(), ctx));
    }
    let base = NonNull::new(p.cast::<u8>()).expect("mmap never returns 0 on success");
    // SAFETY: [base, base + len) is the BAR mapping just made; VfioBar owns it (unmaps it on
    // drop, after the MmioBar inside it is gone) and never forms a reference to it.
    let mmio = unsafe { MmioBar::new(base, len) };
    Ok(VfioBar {
        mmio,
        addr: p as usize,
        len,
        index: bar,
        _device: device.clone(),
    })
}

/// A BAR mapped through the VFIO device fd: a [`RegisterIo`] by offset (volatile accesses in
/// native CPU order, as [`MmioBar`] does). Unmapped when dropped.
pub struct VfioBar {
    mmio: MmioBar,
    addr: usize,
    len: usize,
    index: u32,
    _device: Arc<VfioDevice>,
}

impl VfioBar {
    /// The BAR index.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Length of the mapping.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never, for a mapped BAR).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The mapping as the hal's [`MmioBar`].
    pub fn mmio(&self) -> &MmioBar {
        &self.mmio
    }
}

impl fmt::Debug for VfioBar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioBar")
            .field("index", &self.index)
            .field("len", &format_args!("{:#x}", self.len))
            .finish()
    }
}

impl RegisterIo for VfioBar {
    fn read32(&self, offset: usize) -> u32 {
        self.mmio.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.mmio.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.mmio.write64(offset, value)
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        self.mmio.write_block(offset, data)
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<core::ptr::NonNull<u8>> {
        self.mmio.mapped(offset, len)
    }
}

impl Drop for VfioBar {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `map_bar` and is owned by this value; the MmioBar
        // that points into it is a field of this value and is never used after this.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

/// The container as a [`DmaMapper`], holding the device so the group stays attached.
struct DeviceMapper {
    container: Arc<VfioContainer>,
    _device: Arc<VfioDevice>,
}

impl DmaMapper for DeviceMapper {
    unsafe fn map(&self, iova: u64, len: usize, va: *mut u8) -> std::io::Result<()> {
        // SAFETY: the caller upholds `DmaMapper::map`'s contract, which is passed on unchanged.
        unsafe { DmaMapper::map(&*self.container, iova, len, va) }
    }

    fn unmap(&self, iova: u64, len: usize) -> std::io::Result<()> {
        DmaMapper::unmap(&*self.container, iova, len)
    }
}

/// An attached PCI function: its mapped BAR, config space, and the VFIO container that DMA
/// memory is mapped through.
pub struct Attached {
    bar: Arc<VfioBar>,
    config: ConfigSpace,
    device: Arc<VfioDevice>,
    container: Arc<VfioContainer>,
    addr: PciAddress,
    group: u32,
    /// What error messages of later mappings name.
    ctx: Context,
    vendor_id: u16,
    device_id: u16,
    reset: bool,
    command: u16,
}

impl fmt::Debug for Attached {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attached")
            .field("address", &format_args!("{}", self.addr))
            .field("iommu_group", &self.group)
            .field("vendor_id", &format_args!("{:#06x}", self.vendor_id))
            .field("device_id", &format_args!("{:#06x}", self.device_id))
            .field("bar", &self.bar)
            .field("reset", &self.reset)
            .field("command", &format_args!("{:#06x}", self.command))
            .finish()
    }
}

impl Attached {
    /// The function's address.
    pub fn address(&self) -> PciAddress {
        self.addr
    }

    /// The IOMMU group number.
    pub fn iommu_group(&self) -> u32 {
        self.group
    }

    /// The PCI vendor ID (0x15b3 for Mellanox/NVIDIA).
    pub fn vendor_id(&self) -> u16 {
        self.vendor_id
    }

    /// The PCI device ID.
    pub fn device_id(&self) -> u16 {
        self.device_id
    }

    /// Whether attach reset the function.
    pub fn was_reset(&self) -> bool {
        self.reset
    }

    /// The command register after attach.
    pub fn command(&self) -> u16 {
        self.command
    }

    /// The mapped BAR, for the driver (`mlx5::Device::probe(bar, ...)`).
    pub fn bar(&self) -> Arc<VfioBar> {
        self.bar.clone()
    }

    /// Maps another BAR of the function (a device whose registers and queues are in
    /// several BARs, as EFA's BAR0, BAR2 and doorbell BAR), with the same checks as
    /// [`attach`]'s. Each call makes a new mapping.
    pub fn map_bar(&self, bar: u32) -> Result<Arc<VfioBar>, AttachError> {
        if bar > VFIO_PCI_BAR5_REGION_INDEX {
            return Err(AttachError::NoSuchBar { bar });
        }
        let ctx = Context {
            bar,
            ..self.ctx.clone()
        };
        map_bar(&self.device, bar, &ctx).map(Arc::new)
    }

    /// Reads config space at `offset`.
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), AttachError> {
        self.config.read(offset, buf)
    }

    /// Writes config space at `offset`.
    pub fn config_write(&self, offset: u64, buf: &[u8]) -> Result<(), AttachError> {
        self.config.write(offset, buf)
    }

    /// A DMA allocator whose blocks are mapped into this function's IOMMU container.
    ///
    /// The allocator keeps the device (and so its group's place in the container) alive: the
    /// kernel drops every mapping of a container when its last group leaves it, and the
    /// allocator's unmaps at drop must find them.
    pub fn dma(&self, opts: DmaOptions) -> Result<Arc<VfioDma>, VfioDmaError> {
        let mapper = DeviceMapper {
            container: self.container.clone(),
            _device: self.device.clone(),
        };
        VfioDma::new(Arc::new(mapper), opts)
    }

    /// The `vfio-ioctls` device (interrupts: `enable_msix` and friends).
    pub fn device(&self) -> &Arc<VfioDevice> {
        &self.device
    }

    /// Enables the function's MSI-X vectors, each signalling an eventfd of its own, as the
    /// hal's [`Interrupts`](nic_hal::Interrupts) (hand them to the driver through
    /// [`Platform::interrupts`](nic_hal::Platform::interrupts)). MSI-X stays on until the
    /// returned value drops. Bus mastering must be on ([`AttachOptions::bus_master`]): the
    /// function's messages are memory writes.
    pub fn interrupts(&self) -> Result<VfioInterrupts, MsixError> {
        VfioInterrupts::new(self.device.clone())
    }

    /// The `vfio-ioctls` container.
    pub fn container(&self) -> &Arc<VfioContainer> {
        &self.container
    }
}

#[cfg(test)]
mod tests;

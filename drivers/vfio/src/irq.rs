//! MSI-X through VFIO: one eventfd per vector, signalled by the kernel's interrupt handler,
//! as the hal's [`Interrupts`].
//!
//! `VFIO_DEVICE_GET_IRQ_INFO` (index `VFIO_PCI_MSIX_IRQ_INDEX`) says how many vectors the
//! function's MSI-X table has; `VFIO_DEVICE_SET_IRQS` with `DATA_EVENTFD | ACTION_TRIGGER`
//! hands the kernel one eventfd per vector, after which vfio-pci enables MSI-X, programs the
//! table and, for every message of vector `n`, adds one to eventfd `n`. A waiter sleeps in
//! `poll(2)` on the eventfds of the vectors it watches, with a timeout; reading an eventfd
//! returns the number of messages since the last read, which goes into the vector's count.

use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use nic_hal::{Interrupts, IrqError, IrqWatch};
use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_TYPE, vfio_irq_info,
};
use vfio_ioctls::VfioDevice;

use crate::sys;

/// `_IO(VFIO_TYPE, VFIO_BASE + 9)`: `VFIO_DEVICE_GET_IRQ_INFO` (linux/vfio.h).
const VFIO_DEVICE_GET_IRQ_INFO: u32 = ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + 9);
/// `_IO(VFIO_TYPE, VFIO_BASE + 10)`: `VFIO_DEVICE_SET_IRQS` (linux/vfio.h).
const VFIO_DEVICE_SET_IRQS: u32 = ((VFIO_TYPE as u32) << 8) | (VFIO_BASE + 10);
/// Bytes of `struct vfio_irq_set` before its data: argsz, flags, index, start, count.
const IRQ_SET_HEADER: usize = 20;

/// Why MSI-X could not be set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MsixError {
    /// The function has no MSI-X vectors (or the kernel cannot signal them by eventfd).
    NoMsix,
    /// A system call failed.
    Sys {
        /// What was being done.
        what: &'static str,
        /// The errno it failed with.
        errno: i32,
    },
}

impl fmt::Display for MsixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsixError::NoMsix => f.write_str(
                "the function has no MSI-X vectors that VFIO can signal by eventfd (for QEMU's \
                 ivshmem, use ivshmem-doorbell with vectors=N, not ivshmem-plain)",
            ),
            MsixError::Sys { what, errno } => write!(
                f,
                "{what} failed: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for MsixError {}

/// The MSI-X vectors of a VFIO device as [`Interrupts`]: all of them enabled with an eventfd
/// each from creation until drop (which disables MSI-X again).
pub struct VfioInterrupts {
    /// The device whose MSI-X is on (`None` only in unit tests over bare eventfds).
    device: Option<Arc<VfioDevice>>,
    fds: Vec<OwnedFd>,
    counts: Vec<AtomicU64>,
}

impl fmt::Debug for VfioInterrupts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("VfioInterrupts")
            .field("vectors", &self.fds.len())
            .finish()
    }
}

/// `VFIO_DEVICE_GET_IRQ_INFO` for MSI-X: (count, flags).
fn msix_info(fd: RawFd) -> Result<(u32, u32), MsixError> {
    let mut info = vfio_irq_info {
        argsz: std::mem::size_of::<vfio_irq_info>() as u32,
        index: VFIO_PCI_MSIX_IRQ_INDEX,
        ..Default::default()
    };
    // SAFETY: the ioctl writes at most `argsz` bytes into `info`, a live exclusively borrowed
    // vfio_irq_info of that size.
    let r = unsafe { libc::ioctl(fd, VFIO_DEVICE_GET_IRQ_INFO as libc::Ioctl, &mut info) };
    if r < 0 {
        return Err(MsixError::Sys {
            what: "VFIO_DEVICE_GET_IRQ_INFO (MSI-X)",
            errno: sys::errno(),
        });
    }
    Ok((info.count, info.flags))
}

/// `VFIO_DEVICE_SET_IRQS` on the MSI-X index: `fds` as the triggers of vectors 0.., or (with
/// none) MSI-X off.
fn set_msix(fd: RawFd, fds: &[RawFd]) -> Result<(), i32> {
    let flags = VFIO_IRQ_SET_ACTION_TRIGGER
        | if fds.is_empty() {
            VFIO_IRQ_SET_DATA_NONE
        } else {
            VFIO_IRQ_SET_DATA_EVENTFD
        };
    let argsz = IRQ_SET_HEADER + 4 * fds.len();
    let mut buf: Vec<u32> = Vec::with_capacity(argsz / 4);
    buf.extend_from_slice(&[
        argsz as u32,
        flags,
        VFIO_PCI_MSIX_IRQ_INDEX,
        0,
        fds.len() as u32,
    ]);
    buf.extend(fds.iter().map(|&f| f as u32));
    // SAFETY: `buf` is a vfio_irq_set header followed by `count` 32-bit descriptors, `argsz`
    // bytes in all, live and 4-aligned for the call; the kernel only reads it.
    let r = unsafe { libc::ioctl(fd, VFIO_DEVICE_SET_IRQS as libc::Ioctl, buf.as_ptr()) };
    if r < 0 { Err(sys::errno()) } else { Ok(()) }
}

impl VfioInterrupts {
    /// Enables every MSI-X vector of `device` with an eventfd of its own.
    pub fn new(device: Arc<VfioDevice>) -> Result<VfioInterrupts, MsixError> {
        let fd = device.as_raw_fd();
        let (count, flags) = msix_info(fd)?;
        if count == 0 || flags & VFIO_IRQ_INFO_EVENTFD == 0 {
            return Err(MsixError::NoMsix);
        }
        let n = count.min(u32::from(u16::MAX)) as usize;
        let mut fds = Vec::with_capacity(n);
        for _ in 0..n {
            // SAFETY: eventfd takes no pointers; the result is checked.
            let e = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if e < 0 {
                return Err(MsixError::Sys {
                    what: "eventfd",
                    errno: sys::errno(),
                });
            }
            // SAFETY: a fresh descriptor nothing else owns.
            fds.push(unsafe { OwnedFd::from_raw_fd(e) });
        }
        let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
        set_msix(fd, &raw).map_err(|errno| MsixError::Sys {
            what: "VFIO_DEVICE_SET_IRQS (MSI-X eventfds)",
            errno,
        })?;
        Ok(VfioInterrupts {
            device: Some(device),
            counts: (0..n).map(|_| AtomicU64::new(0)).collect(),
            fds,
        })
    }

    /// Moves what eventfd `v` has counted since the last read into the vector's count.
    fn drain(&self, v: usize) {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local buffer from a descriptor we own; the
        // eventfd is non-blocking, so an empty one returns EAGAIN at once.
        let n = unsafe { libc::read(self.fds[v].as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        if n == 8 {
            self.counts[v].fetch_add(u64::from_ne_bytes(b), Ordering::AcqRel);
        }
    }
}

impl Drop for VfioInterrupts {
    fn drop(&mut self) {
        // MSI-X off before the eventfds close. A failure leaves vfio-pci signalling eventfds
        // nobody reads, which is harmless; it releases them with the device.
        if let Some(d) = &self.device {
            let _ = set_msix(d.as_raw_fd(), &[]);
        }
    }
}

impl Interrupts for VfioInterrupts {
    fn vectors(&self) -> u16 {
        self.fds.len() as u16
    }

    fn enable(&self, vector: u16) -> Result<(), IrqError> {
        // Every vector got its eventfd at setup: nothing is masked.
        if usize::from(vector) < self.fds.len() {
            Ok(())
        } else {
            Err(IrqError::NoSuchVector)
        }
    }

    fn count(&self, vector: u16) -> u64 {
        let v = usize::from(vector);
        if v >= self.fds.len() {
            return 0;
        }
        self.drain(v);
        self.counts[v].load(Ordering::Acquire)
    }

    fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError> {
        if watch
            .iter()
            .any(|w| usize::from(w.vector) >= self.fds.len())
        {
            return Err(IrqError::NoSuchVector);
        }
        let start = Instant::now();
        let timeout = Duration::from_nanos(timeout_ns);
        let mut pfds: Vec<libc::pollfd> = watch
            .iter()
            .map(|w| libc::pollfd {
                fd: self.fds[usize::from(w.vector)].as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        loop {
            if watch.iter().any(|w| self.count(w.vector) != w.seen) {
                return Ok(true);
            }
            let left = match timeout.checked_sub(start.elapsed()) {
                Some(d) if !d.is_zero() => d,
                _ => return Ok(false),
            };
            // Whole milliseconds, rounded up so a short remainder still sleeps.
            let ms = left.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as i32;
            // SAFETY: `pfds` is a live array of `pfds.len()` pollfd entries for the call.
            let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
            if r < 0 && sys::errno() != libc::EINTR {
                return Err(IrqError::Backend);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` vectors over bare eventfds (what vfio-pci would signal).
    fn bare(n: usize) -> VfioInterrupts {
        let fds = (0..n)
            .map(|_| {
                // SAFETY: eventfd takes no pointers; checked below.
                let e = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
                assert!(e >= 0);
                // SAFETY: a fresh descriptor nothing else owns.
                unsafe { OwnedFd::from_raw_fd(e) }
            })
            .collect();
        VfioInterrupts {
            device: None,
            counts: (0..n).map(|_| AtomicU64::new(0)).collect(),
            fds,
        }
    }

    fn signal(i: &VfioInterrupts, v: usize, times: u64) {
        let b = times.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd the value owns.
        let n = unsafe { libc::write(i.fds[v].as_raw_fd(), b.as_ptr().cast(), 8) };
        assert_eq!(n, 8);
    }

    #[test]
    fn counts_add_up_what_the_eventfds_counted() {
        let i = bare(3);
        assert_eq!(i.vectors(), 3);
        assert_eq!(i.enable(2), Ok(()));
        assert_eq!(i.enable(3), Err(IrqError::NoSuchVector));
        assert_eq!(i.count(1), 0);
        signal(&i, 1, 2);
        signal(&i, 1, 1);
        assert_eq!(i.count(1), 3);
        assert_eq!(i.count(1), 3, "a read drains the eventfd once");
        assert_eq!((i.count(0), i.count(7)), (0, 0));
        // nothing new on 0 and 2: the wait times out; a stale `seen` returns at once
        let w = [
            IrqWatch { vector: 0, seen: 0 },
            IrqWatch { vector: 2, seen: 0 },
        ];
        assert_eq!(i.wait(&w, 20_000_000), Ok(false));
        assert_eq!(i.wait(&[IrqWatch { vector: 1, seen: 0 }], 0), Ok(true));
        assert_eq!(
            i.wait(&[IrqWatch { vector: 3, seen: 0 }], 0),
            Err(IrqError::NoSuchVector)
        );
    }

    #[test]
    fn a_signal_from_another_thread_ends_the_wait() {
        let i = Arc::new(bare(2));
        let seen = i.count(1);
        let other = i.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signal(&other, 1, 1);
        });
        // A minute: only the signal ends this wait within the test's lifetime.
        assert_eq!(
            i.wait(&[IrqWatch { vector: 1, seen }], 60_000_000_000),
            Ok(true)
        );
        t.join().unwrap();
        assert_eq!(i.count(1), seen + 1);
    }
}

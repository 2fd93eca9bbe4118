//! A thread that runs a device model's poll in a loop (benchmarks, QEMU backends, drivers that
//! do not poll the device themselves): the ConnectX model's [`Device::poll`] or the EFA
//! model's [`crate::efa::Device::poll`], through [`Polled`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::Device;

/// How long the poller sleeps when a poll found nothing to do.
const IDLE_SLEEP: Duration = Duration::from_micros(20);

/// A device model a [`Poller`] drives: one round of its background work (frames in from the
/// port, transport timers, untrapped doorbells), and whether it made progress.
pub trait Polled: Send + 'static {
    /// One poll.
    fn poll_once(&mut self) -> bool;
}

impl Polled for Device {
    fn poll_once(&mut self) -> bool {
        self.poll()
    }
}

impl Polled for crate::efa::Device {
    fn poll_once(&mut self) -> bool {
        self.poll()
    }
}

/// A running poller thread; stopped (and joined) by [`Poller::stop`] or on drop.
#[derive(Debug)]
pub struct Poller {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// Starts a thread that polls `dev` until the returned [`Poller`] is stopped or dropped. The
/// device lock is taken for one [`Polled::poll_once`] at a time, so other threads (the driver's
/// MMIO, a test) interleave with it. When a poll finds nothing to do the thread sleeps a few
/// microseconds.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// # use nic_emulator::{AddressSpace, DmaFault};
/// # struct NoMemory;
/// # impl AddressSpace for NoMemory {
/// #     fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
/// #         Err(DmaFault { iova, len: buf.len(), write: false })
/// #     }
/// #     fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
/// #         Err(DmaFault { iova, len: data.len(), write: true })
/// #     }
/// # }
/// let dev = Arc::new(Mutex::new(nic_emulator::Device::new(
///     nic_emulator::Profile::default(),
///     Arc::new(NoMemory),
/// )));
/// let poller = nic_emulator::spawn_poller(dev.clone());
/// poller.stop();
/// ```
pub fn spawn_poller<D: Polled>(dev: Arc<Mutex<D>>) -> Poller {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let handle = std::thread::Builder::new()
        .name("nic-emulator-poller".into())
        .spawn(move || {
            while !flag.load(Ordering::Acquire) {
                let did = match dev.lock() {
                    Ok(mut d) => d.poll_once(),
                    // A panic elsewhere while holding the lock: the device is gone.
                    Err(_) => return,
                };
                if !did {
                    std::thread::sleep(IDLE_SLEEP);
                }
            }
        })
        .ok();
    Poller { stop, handle }
}

impl Poller {
    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    /// Whether the thread is still running.
    pub fn is_running(&self) -> bool {
        self.handle.as_ref().is_some_and(|h| !h.is_finished())
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shutdown();
    }
}

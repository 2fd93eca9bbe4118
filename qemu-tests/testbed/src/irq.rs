//! MSI-X delivery between an emulated device and a driver in the same process.
//!
//! [`IrqLines`] stands where the PCI bus, the interrupt controller and the kernel's interrupt
//! handler stand on a machine: the device raises a vector through the
//! [sink](IrqLines::sink) installed with
//! [`Device::set_interrupt_sink`](nic_emulator::Device::set_interrupt_sink), and the driver
//! sleeps on it through [`nic_hal::Interrupts`] (a mutex and a condition variable: the waiting
//! thread is descheduled, it does not spin). A vector raised while masked is remembered (the
//! MSI-X pending bit) and delivered when the driver enables it.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nic_emulator::InterruptSink;
use nic_hal::{Interrupts, IrqError, IrqWatch};

#[derive(Debug)]
struct Lines {
    enabled: Vec<bool>,
    pending: Vec<bool>,
    count: Vec<u64>,
    /// Raises naming a vector beyond the table.
    stray: u64,
}

/// The MSI-X vectors of one emulated function, as a condition variable per process.
#[derive(Debug)]
pub struct IrqLines {
    lines: Mutex<Lines>,
    cv: Condvar,
}

impl IrqLines {
    /// `vectors` vectors, all masked.
    pub fn new(vectors: u16) -> Arc<IrqLines> {
        let n = usize::from(vectors);
        Arc::new(IrqLines {
            lines: Mutex::new(Lines {
                enabled: vec![false; n],
                pending: vec![false; n],
                count: vec![0; n],
                stray: 0,
            }),
            cv: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Lines> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The device raises `vector`: delivered (its count moves, waiters wake) if enabled,
    /// remembered as pending if masked.
    pub fn raise(&self, vector: u16) {
        let mut l = self.lock();
        let v = usize::from(vector);
        if v >= l.count.len() {
            l.stray += 1;
            return;
        }
        if l.enabled[v] {
            l.count[v] += 1;
            drop(l);
            self.cv.notify_all();
        } else {
            l.pending[v] = true;
        }
    }

    /// What to hand to [`Device::set_interrupt_sink`](nic_emulator::Device::set_interrupt_sink).
    pub fn sink(self: &Arc<Self>) -> InterruptSink {
        let me = self.clone();
        Arc::new(move |v| me.raise(v))
    }

    /// Raises that named no vector of the table.
    pub fn stray(&self) -> u64 {
        self.lock().stray
    }

    /// Whether `vector` is enabled.
    pub fn is_enabled(&self, vector: u16) -> bool {
        self.lock()
            .enabled
            .get(usize::from(vector))
            .copied()
            .unwrap_or(false)
    }
}

impl Interrupts for IrqLines {
    fn vectors(&self) -> u16 {
        u16::try_from(self.lock().count.len()).unwrap_or(u16::MAX)
    }

    fn enable(&self, vector: u16) -> Result<(), IrqError> {
        let mut l = self.lock();
        let v = usize::from(vector);
        if v >= l.count.len() {
            return Err(IrqError::NoSuchVector);
        }
        l.enabled[v] = true;
        if std::mem::take(&mut l.pending[v]) {
            l.count[v] += 1;
            drop(l);
            self.cv.notify_all();
        }
        Ok(())
    }

    fn count(&self, vector: u16) -> u64 {
        self.lock()
            .count
            .get(usize::from(vector))
            .copied()
            .unwrap_or(0)
    }

    fn wait(&self, watch: &[IrqWatch], timeout_ns: u64) -> Result<bool, IrqError> {
        let start = Instant::now();
        let timeout = Duration::from_nanos(timeout_ns);
        let mut l = self.lock();
        if watch.iter().any(|w| usize::from(w.vector) >= l.count.len()) {
            return Err(IrqError::NoSuchVector);
        }
        loop {
            if watch
                .iter()
                .any(|w| l.count[usize::from(w.vector)] != w.seen)
            {
                return Ok(true);
            }
            let left = match timeout.checked_sub(start.elapsed()) {
                Some(d) if !d.is_zero() => d,
                _ => return Ok(false),
            };
            l = self
                .cv
                .wait_timeout(l, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masked_vectors_are_pending_until_enabled() {
        let irq = IrqLines::new(2);
        irq.raise(1);
        assert_eq!(irq.count(1), 0);
        let w = [IrqWatch { vector: 1, seen: 0 }];
        assert_eq!(irq.wait(&w, 1_000), Ok(false));
        irq.enable(1).unwrap();
        assert_eq!(irq.count(1), 1, "the pending raise is delivered on enable");
        assert_eq!(irq.wait(&w, 0), Ok(true));
        irq.raise(7);
        assert_eq!(irq.stray(), 1);
        assert_eq!(irq.enable(2), Err(IrqError::NoSuchVector));
        assert_eq!(
            irq.wait(&[IrqWatch { vector: 2, seen: 0 }], 0),
            Err(IrqError::NoSuchVector)
        );
    }

    #[test]
    fn a_raise_from_another_thread_ends_the_wait() {
        let irq = IrqLines::new(1);
        irq.enable(0).unwrap();
        let seen = irq.count(0);
        let other = irq.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.raise(0);
        });
        // A minute: only the raise ends this wait within the test's lifetime.
        assert_eq!(
            irq.wait(&[IrqWatch { vector: 0, seen }], 60_000_000_000),
            Ok(true)
        );
        t.join().unwrap();
        assert_eq!(irq.count(0), seen + 1);
    }
}

//! Instruction counts of the EFA fast path, for callgrind (`scripts/fastpath-cost.sh efa`
//! builds and runs it and prints the figures; by hand:
//!
//! ```text
//! cargo build --release -p efa --example efa_fastpath_cost
//! valgrind --tool=callgrind --toggle-collect='*post_batch*' target/release/examples/efa_fastpath_cost
//! ```
//!
//! and the callgrind file's `totals:`). The driver is brought up against the emulated EFA;
//! then its data BARs are replaced by stubs, so that only the driver's work is counted:
//! `post_batch` posts 16 SRD SENDs (one SGE each) through the low-latency queue (the stub
//! maps its memory as `nic_hal::MmioBar` maps a BAR, so a 64-byte WQE is eight 8-byte
//! volatile stores into the LLQ slot, what a write-combining BAR costs in instructions) with
//! one doorbell; `poll_batch` polls 16 send completions that the program
//! wrote into the CQ ring as the device would. Each runs `ROUNDS` times; the counts are per
//! WQE and per CQE, validation, bookkeeping, barriers and the doorbell included. The program
//! prints the completions it saw, and the rounds and batch size the script divides by.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nic_emulator::efa::{Device as Emu, Profile};
use nic_emulator::{AddressSpace, DmaFault};
use nic_hal::{HeapDma, Platform, RegisterIo};
use verbs::{
    AccessFlags, AhAttr, Gid, MemoryRegion, Provider, QpType, SendWr, Sge, UdDest, WorkCompletion,
};

const ROUNDS: u32 = 1000;
const BATCH: usize = 16;

/// The emulated EFA's view of host memory: the allocator's live buffers.
struct Iommu(Arc<HeapDma>);

impl AddressSpace for Iommu {
    fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: buf.len(),
            write: false,
        };
        let p = self.0.translate(iova, buf.len().max(1)).ok_or(fault)?;
        // SAFETY: `translate` checked the range lies in one live allocation; `buf` is not in it.
        unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
    fn write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: data.len(),
            write: true,
        };
        let p = self.0.translate(iova, data.len().max(1)).ok_or(fault)?;
        // SAFETY: as in `read`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), p.as_ptr(), data.len()) };
        Ok(())
    }
}

/// A stub BAR: stores land in a few words, or, through its mapping, in `MAPPED` bytes of
/// memory standing in for the mapped BAR (as `nic_hal::MmioBar` maps a real one).
struct Sink {
    words: [AtomicU64; 8],
    db: AtomicU32,
    mem: Box<[AtomicU64]>,
}

/// Bytes of the stub's mapping (the measured QP's LLQ lies inside it).
const MAPPED: usize = 1 << 20;

impl Default for Sink {
    fn default() -> Self {
        Sink {
            words: Default::default(),
            db: AtomicU32::new(0),
            mem: (0..MAPPED / 8).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// A BAR: the emulated device's (bring-up) or a stub (the measured data path).
#[derive(Clone)]
enum Bar {
    Emu(Arc<Mutex<Emu>>, u8),
    Sink(Arc<Sink>),
}

impl RegisterIo for Bar {
    fn read32(&self, offset: usize) -> u32 {
        match self {
            Bar::Emu(d, _) => {
                let mut b = [0u8; 4];
                d.lock().unwrap().mmio_read(offset, &mut b);
                u32::from_le_bytes(b)
            }
            Bar::Sink(_) => u32::MAX,
        }
    }
    fn write32(&self, offset: usize, value: u32) {
        match self {
            Bar::Emu(d, bar) => d
                .lock()
                .unwrap()
                .bar_write(*bar, offset, &value.to_le_bytes()),
            Bar::Sink(s) => s.db.store(value, Ordering::Relaxed),
        }
    }
    fn write64(&self, offset: usize, value: u64) {
        match self {
            Bar::Emu(d, bar) => d
                .lock()
                .unwrap()
                .bar_write(*bar, offset, &value.to_le_bytes()),
            Bar::Sink(s) => s.words[0].store(value, Ordering::Relaxed),
        }
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        match self {
            Bar::Emu(d, bar) => emu_write(d, *bar, offset, data),
            Bar::Sink(s) => {
                // Eight 8-byte stores: what a 64-byte WQE into a write-combining BAR costs.
                if data.len() == 64 {
                    // SAFETY: 64 readable bytes; an unaligned read of eight words.
                    let v = unsafe { std::ptr::read_unaligned(data.as_ptr().cast::<[u64; 8]>()) };
                    for (w, x) in s.words.iter().zip(v) {
                        w.store(x, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
        match self {
            Bar::Emu(..) => None,
            Bar::Sink(s) => Bar::sink_mapped(s, offset, len),
        }
    }
}

impl Bar {
    /// The mapping of the stub.
    fn sink_mapped(s: &Sink, offset: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
        if offset.checked_add(len)? > MAPPED {
            return None;
        }
        // `offset + len <= MAPPED`: inside the stub's memory, which lives as long as the Bar.
        std::ptr::NonNull::new(s.mem.as_ptr().cast::<u8>().cast_mut().wrapping_add(offset))
    }
}

/// A write to the emulated device (bring-up only; out of line so that the stub's path stays
/// as short as a mapped BAR's).
#[cold]
#[inline(never)]
fn emu_write(d: &Mutex<Emu>, bar: u8, offset: usize, data: &[u8]) {
    d.lock().unwrap().bar_write(bar, offset, data);
}

/// Wall time; nothing waits in the measured part.
struct Clock(std::time::Instant);

impl Platform for Clock {
    fn relax(&self) {
        std::hint::spin_loop();
    }
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

type Dev = efa::Device<Bar, Clock>;

#[inline(never)]
fn post_batch(dev: &Dev, qp: &mut efa::Qp, wrs: &[SendWr<'_, efa::Ah>]) {
    Provider::post_send(dev, qp, wrs).expect("post");
}

#[inline(never)]
fn poll_batch(dev: &Dev, cq: &efa::Cq, wc: &mut [WorkCompletion]) -> usize {
    Provider::poll_cq(dev, cq, wc).expect("poll")
}

fn main() {
    let dma = HeapDma::new(0x1_0000_0000);
    let emu = Arc::new(Mutex::new(Emu::new(
        Profile::default(),
        Arc::new(Iommu(dma.clone())),
    )));
    let mut dev = efa::Device::probe(
        Bar::Emu(emu.clone(), 0),
        dma.clone(),
        Clock(std::time::Instant::now()),
        efa::Config::default(),
    )
    .expect("bring-up");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, 0, None).unwrap();
    let mut qp = efa::loopback::datagram_qp(&dev, &pd, &cq, QpType::Srd, 0x11, 32)
        .expect("an SRD QP in RTS");
    let ah = dev
        .create_ah(
            &pd,
            &AhAttr {
                dgid: Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 2]),
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let mem = dev.alloc_buf(BATCH * 1024).unwrap();
    let mr = dev.reg_mr(&pd, mem, AccessFlags::LOCAL_WRITE).unwrap();
    // From here on the data BARs are stubs.
    dev.attach_data_bars(
        Bar::Sink(Arc::new(Sink::default())),
        Bar::Sink(Arc::new(Sink::default())),
    );
    let sge: [Sge; BATCH] = std::array::from_fn(|i| Sge {
        addr: mr.addr() + i as u64 * 1024,
        length: 1024,
        lkey: mr.lkey(),
    });
    let qpn = verbs::QueuePair::qp_num(&qp) as u16;
    let wrs: [SendWr<'_, efa::Ah>; BATCH] = std::array::from_fn(|i| SendWr {
        wr_id: i as u64,
        sg_list: std::slice::from_ref(&sge[i]),
        dest: Some(UdDest {
            ah: &ah,
            remote_qpn: 1,
            remote_qkey: 0x11,
        }),
        ..SendWr::default()
    });
    let depth = cq.depth();
    let ring = dma
        .translate(cq.ring_addr(), (depth * cq.entry_size()) as usize)
        .expect("the CQ ring");
    let sq_depth = 32u32;
    let mut wc = [WorkCompletion::default(); BATCH];
    let mut pi = 0u32;
    let mut posted = 0u32;
    let mut total = 0usize;
    for _ in 0..ROUNDS {
        post_batch(&dev, &mut qp, &wrs);
        for _ in 0..BATCH {
            // A send completion for the WQE's id (the pool hands ids out in order here).
            let id = (posted % sq_depth) as u16;
            posted += 1;
            let mut e = [0u8; 16];
            e[0..2].copy_from_slice(&id.to_le_bytes());
            e[3] = 1 << 1 | (((pi / depth) & 1) ^ 1) as u8;
            e[4..6].copy_from_slice(&qpn.to_le_bytes());
            let at = ((pi % depth) * cq.entry_size()) as usize;
            // SAFETY: inside the CQ ring (`at + 16 <= depth * entry_size`); nothing polls now.
            unsafe {
                std::ptr::copy_nonoverlapping(e.as_ptr(), ring.as_ptr().add(at), 16);
            }
            pi += 1;
        }
        let n = poll_batch(&dev, &cq, &mut wc);
        assert_eq!(n, BATCH);
        total += n;
    }
    println!("{total} completions; rounds: {ROUNDS}, per batch: {BATCH}");
}

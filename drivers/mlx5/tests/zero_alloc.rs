//! The fast path does not allocate: a counting global allocator watches a loop of
//! `post_recv` + `post_send` (16 work requests per doorbell) + `poll_cq` + `req_notify_cq`
//! through the verbs provider, against the fake device, with the test writing the CQEs the
//! device would.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use firmware_interface::cqe::{Cqe64, opcode as cop};
use firmware_interface::wqe::opcode as wop;
use firmware_interface::{Be16, Be32};
use mlx5::fake::{Clock, FakeRegs, bench, test_config};
use nic_hal::{DmaAllocator, RegisterIo};
use verbs::{
    AccessFlags, AhAttr, Gid, MemoryRegion, Provider, QpCap, QpInitAttr, QpType, RecvWr, RemoteOp,
    SendFlags, SendWr, Sge, WcStatus, WorkCompletion, WrOpcode,
};

thread_local! {
    /// Count allocations made by this thread.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
}
static ALLOCS: AtomicU64 = AtomicU64::new(0);

struct Counting;

fn note() {
    if COUNTING.with(|c| c.get()) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; counting has no effect on
// the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc` is passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: `ptr` came from this allocator, i.e. from `System`, with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The fake's registers, except that doorbell writes to the UAR pages (64-bit and BlueFlame)
/// are counted instead of being recorded by the fake (its recording allocates).
#[derive(Clone)]
struct Quiet {
    inner: FakeRegs,
    doorbells: Arc<AtomicU64>,
}

impl RegisterIo for Quiet {
    fn read32(&self, offset: usize) -> u32 {
        self.inner.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.inner.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        if offset >= 0x2000 {
            self.doorbells.fetch_add(1, Ordering::Relaxed);
        } else {
            self.inner.write64(offset, value)
        }
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        if offset >= 0x2000 {
            self.doorbells.fetch_add(1, Ordering::Relaxed);
        } else {
            self.inner.write_block(offset, data)
        }
    }
}

/// The device's side: writes CQEs with the owner bit of their pass.
struct CqWriter {
    pi: u32,
    log: u8,
}

impl CqWriter {
    fn put(&mut self, cq: &mlx5::Cq, mut c: Cqe64) {
        let idx = self.pi & ((1 << self.log) - 1);
        c.op_own |= ((self.pi >> self.log) & 1) as u8;
        // SAFETY: the test polls the CQ from this thread only, and not during this write.
        let ring = unsafe { cq.buffer() };
        ring.write(idx as usize * 64, &c.to_bytes())
            .expect("CQE write");
        self.pi += 1;
    }
}

fn cqe(opcode: u8, sop: u8, qpn: u32, counter: u16, byte_cnt: u32) -> Cqe64 {
    Cqe64 {
        sop_drop_qpn: Be32::new(((sop as u32) << 24) | qpn),
        wqe_counter: Be16::new(counter),
        byte_cnt: Be32::new(byte_cnt),
        op_own: opcode << 4,
        ..Cqe64::zeroed()
    }
}

#[test]
fn post_send_post_recv_poll_cq_do_not_allocate() {
    let b = bench();
    let doorbells = Arc::new(AtomicU64::new(0));
    let regs = Quiet {
        inner: b.regs.clone(),
        doorbells: doorbells.clone(),
    };
    let heap: Arc<dyn DmaAllocator> = b.heap.clone();
    let dev = mlx5::Device::<Quiet, Clock>::probe(regs, heap, b.clock.clone(), test_config())
        .expect("probe");

    let pd = Provider::alloc_pd(&dev).unwrap();
    let mem = Provider::alloc_buf(&dev, 64 * 1024).unwrap();
    let mr = dev
        .reg_mr(
            &pd,
            mem.clone(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        )
        .unwrap();
    let cq = Provider::create_cq(&dev, 255, 0, None).unwrap();
    let (mut qp, _) = Provider::create_qp(
        &dev,
        &pd,
        &QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 32,
            },
            sq_sig_all: false,
        },
    )
    .unwrap();
    let rc = verbs::rc::RcParams {
        access: AccessFlags::REMOTE_WRITE,
        dest_qp_num: qp.qpn(),
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4([127, 0, 0, 1]),
            is_global: true,
            port_num: 1,
            dmac: [2, 0, 0, 0, 0, 7],
            ..AhAttr::default()
        },
        ..verbs::rc::RcParams::default()
    };
    verbs::rc::connect(&dev, &mut qp, &rc).unwrap();

    let qpn = qp.qpn();
    let lkey = mr.lkey();
    let sge: [Sge; 16] = std::array::from_fn(|i| Sge {
        addr: mem.addr() + i as u64 * 1024,
        length: 1024,
        lkey,
    });
    let mut sends: [SendWr<'_, mlx5::Ah>; 16] = std::array::from_fn(|i| SendWr {
        wr_id: i as u64,
        opcode: WrOpcode::RdmaWrite,
        sg_list: std::slice::from_ref(&sge[i]),
        remote: RemoteOp::Rdma {
            remote_addr: mem.addr(),
            rkey: mr.rkey(),
        },
        ..SendWr::default()
    });
    // selective signalling: the last of each batch asks for the completion; one inline send
    let payload = [0x5au8; 32];
    sends[7] = SendWr {
        opcode: WrOpcode::Send,
        flags: SendFlags::INLINE,
        inline_data: &payload,
        sg_list: &[],
        remote: RemoteOp::None,
        ..sends[7]
    };
    sends[15].flags = SendFlags::SIGNALED;
    let recvs: [RecvWr<'_>; 16] = std::array::from_fn(|i| RecvWr {
        wr_id: 100 + i as u64,
        sg_list: std::slice::from_ref(&sge[i]),
    });
    let mut wc = [WorkCompletion::default(); 32];
    let mut dev_cq = CqWriter {
        pi: 0,
        log: cq.log_size(),
    };
    let before = doorbells.load(Ordering::Relaxed);

    const ROUNDS: u32 = 200;
    COUNTING.with(|c| c.set(true));
    let mut completed = 0u64;
    for round in 0..ROUNDS {
        Provider::post_recv(&dev, &mut qp, &recvs).unwrap();
        Provider::post_send(&dev, &mut qp, &sends).unwrap();
        // the device: one CQE for the signalled WQE, one per receive
        let last = qp.sq_producer().wrapping_sub(1) as u16;
        dev_cq.put(&cq, cqe(cop::REQ, wop::RDMA_WRITE, qpn, last, 0));
        for i in 0..16u32 {
            let counter = (round * 16 + i) as u16;
            dev_cq.put(&cq, cqe(cop::RESP_SEND, 0, qpn, counter, 512));
        }
        let mut got = 0;
        while got < 17 {
            let n = Provider::poll_cq(&dev, &cq, &mut wc[..8]).unwrap();
            assert!(n > 0, "round {round}: lost completions");
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success);
            }
            got += n;
        }
        completed += got as u64;
        Provider::req_notify_cq(&dev, &cq, false).unwrap();
    }
    COUNTING.with(|c| c.set(false));

    let allocs = ALLOCS.load(Ordering::Relaxed);
    assert_eq!(allocs, 0, "heap allocations in the fast path");
    assert_eq!(completed, ROUNDS as u64 * 17);
    // one send doorbell per batch and one arm per round
    assert_eq!(
        doorbells.load(Ordering::Relaxed) - before,
        2 * ROUNDS as u64
    );
    assert_eq!(qp.sq_consumer(), qp.sq_producer());
    assert_eq!(qp.rq_consumer(), 16 * ROUNDS);
}

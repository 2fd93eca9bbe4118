//! Instruction counts of the fast path, for callgrind (DESIGN: hot-path costs are counted in
//! instructions, not timed). `scripts/fastpath-cost.sh` builds and runs it and prints the
//! figures; by hand:
//!
//! ```text
//! cargo build --release -p mlx5 --features fake --example fastpath_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/examples/fastpath_cost
//! callgrind_annotate --inclusive=yes cg.out | grep -E 'post_batch|poll_batch'
//! ```
//!
//! (or `--toggle-collect='*post_batch*'` and the file's `totals:`). `post_batch` posts 16 RDMA
//! writes (one SGE each) with one doorbell; `poll_batch` polls 16 CQEs; each runs `ROUNDS`
//! times; the counts are per WQE and per CQE over all rounds. Measured on x86-64 (rustc 1.95,
//! release): about 60.0 instructions per WQE posted and 40 per CQE polled, validation,
//! bookkeeping, the doorbell and the CQ lock included (before the fast paths: 159 and 132).
//! Doorbell MMIO writes go to a register stub that does one volatile store (what a mapped BAR
//! costs in instructions). The program prints the completions it saw so the work cannot be
//! optimised away, and the rounds and batch size the script divides by.

use std::sync::Arc;

use firmware_interface::cqe::{Cqe64, opcode as cop};
use firmware_interface::wqe::opcode as wop;
use firmware_interface::{Be16, Be32};
use mlx5::fake::{Clock, FakeRegs, bench, test_config};
use nic_hal::{DmaAllocator, DmaBuf, RegisterIo};
use verbs::{
    AccessFlags, AhAttr, Gid, MemRegion, MemoryRegion, Provider, QpAttr, QpAttrMask as M, QpCap,
    QpInitAttr, QpState, QpType, RemoteOp, SendWr, Sge, WorkCompletion, WrOpcode,
};

const ROUNDS: u32 = 1000;

/// Bring-up through the fake; doorbells to a stub.
#[derive(Clone)]
struct Regs {
    inner: FakeRegs,
    sink: Arc<[u64; 512]>,
}

impl RegisterIo for Regs {
    fn read32(&self, offset: usize) -> u32 {
        self.inner.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.inner.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        if offset >= 0x2000 {
            let p = self.sink.as_ptr() as *mut u64;
            // SAFETY: index masked into the 512-word sink, which lives as long as `self`; the
            // store stands for an MMIO store and nothing reads the sink.
            unsafe { p.add((offset / 8) & 511).write_volatile(value) };
        } else {
            self.inner.write64(offset, value)
        }
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        for (i, c) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write64(offset + i * 8, u64::from_ne_bytes(w));
        }
    }
}

type Dev = mlx5::Device<Regs, Clock>;

#[inline(never)]
fn post_batch(dev: &Dev, qp: &mut mlx5::Qp, wrs: &[SendWr<'_, mlx5::Ah>]) {
    Provider::post_send(dev, qp, wrs).expect("post");
}

#[inline(never)]
fn poll_batch(dev: &Dev, cq: &mlx5::Cq, wc: &mut [WorkCompletion]) -> usize {
    Provider::poll_cq(dev, cq, wc).expect("poll")
}

fn main() {
    let b = bench();
    let regs = Regs {
        inner: b.regs.clone(),
        sink: Arc::new([0; 512]),
    };
    let heap: Arc<dyn DmaAllocator> = b.heap.clone();
    let config = mlx5::Config {
        blueflame: false,
        ..test_config()
    };
    let dev = Dev::probe(regs, heap, b.clock.clone(), config).expect("probe");
    let pd = Provider::alloc_pd(&dev).unwrap();
    let mem = DmaBuf::new(dev.dma(), 16 * 1024, 4096).unwrap();
    let mr = dev
        .reg_mr(
            &pd,
            &MemRegion {
                addr: mem.iova(),
                length: 16 * 1024,
                pages: &[],
            },
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
            cap: QpCap {
                max_send_wr: 64,
                max_recv_wr: 16,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
        },
    )
    .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    Provider::modify_qp(
        &dev,
        &mut qp,
        &a,
        M::STATE | M::PORT | M::PKEY_INDEX | M::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.ah_attr = AhAttr {
        dgid: Gid::from_ipv4([127, 0, 0, 1]),
        is_global: true,
        port_num: 1,
        dmac: [2, 0, 0, 0, 0, 7],
        ..AhAttr::default()
    };
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    Provider::modify_qp(&dev, &mut qp, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    let rts = M::STATE | M::SQ_PSN | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
    Provider::modify_qp(&dev, &mut qp, &a, rts).unwrap();

    let qpn = qp.qpn();
    let sge: [Sge; 16] = std::array::from_fn(|i| Sge {
        addr: mem.iova() + i as u64 * 1024,
        length: 1024,
        lkey: mr.lkey(),
    });
    let wrs: [SendWr<'_, mlx5::Ah>; 16] = std::array::from_fn(|i| SendWr {
        wr_id: i as u64,
        opcode: WrOpcode::RdmaWrite,
        sg_list: std::slice::from_ref(&sge[i]),
        remote: RemoteOp::Rdma {
            remote_addr: 0x1000,
            rkey: 0x42,
        },
        ..SendWr::default()
    });
    let mut wc = [WorkCompletion::default(); 16];
    let mut pi = 0u32;
    let log = cq.log_size();
    let mut total = 0usize;
    for _ in 0..ROUNDS {
        let start = qp.sq_producer();
        post_batch(&dev, &mut qp, &wrs);
        for i in 0..16u32 {
            let c = Cqe64 {
                sop_drop_qpn: Be32::new(((wop::RDMA_WRITE as u32) << 24) | qpn),
                wqe_counter: Be16::new(start.wrapping_add(i) as u16),
                op_own: (cop::REQ << 4) | ((pi >> log) & 1) as u8,
                ..Cqe64::zeroed()
            };
            let idx = pi & ((1 << log) - 1);
            cq.buffer().write(idx as usize * 64, &c.to_bytes()).unwrap();
            pi += 1;
        }
        let n = poll_batch(&dev, &cq, &mut wc);
        assert_eq!(n, 16);
        total += n;
    }
    println!("{total} completions; rounds: {ROUNDS}, per batch: 16");
}

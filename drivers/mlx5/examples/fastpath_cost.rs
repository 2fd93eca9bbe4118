//! Instruction counts of the fast path, for callgrind (hot-path costs are counted in
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
//! times; the counts are per WQE and per CQE over all rounds, validation, bookkeeping, the
//! doorbell and the CQ lock included (the figures and their history: `docs/bench.md`).
//! Doorbell MMIO writes go to a register stub that does one relaxed atomic store, a plain store
//! instruction (what a mapped BAR
//! costs in instructions). The program prints the completions it saw so the work cannot be
//! optimised away, and the rounds and batch size the script divides by.

use firmware_interface::cqe::{Cqe64, opcode as cop};
use firmware_interface::wqe::opcode as wop;
use firmware_interface::{Be16, Be32};
use mlx5::fake::{FastPathRig, SinkDevice};
use verbs::{MemoryRegion, Provider, RemoteOp, SendWr, Sge, WorkCompletion, WrOpcode};

const ROUNDS: u32 = 1000;

type Dev = SinkDevice;

#[inline(never)]
fn post_batch(dev: &Dev, qp: &mut mlx5::Qp, wrs: &[SendWr<'_, mlx5::Ah>]) {
    Provider::post_send(dev, qp, wrs).expect("post");
}

#[inline(never)]
fn poll_batch(dev: &Dev, cq: &mlx5::Cq, wc: &mut [WorkCompletion]) -> usize {
    Provider::poll_cq(dev, cq, wc).expect("poll")
}

fn main() {
    let FastPathRig {
        dev,
        pd: _pd,
        mem,
        mr,
        cq,
        mut qp,
    } = FastPathRig::new();
    let qpn = qp.qpn();
    let sge: [Sge; 16] = std::array::from_fn(|i| Sge {
        addr: mem.addr() + i as u64 * 1024,
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
            // SAFETY: this thread is the only one polling the CQ, and it does not poll now.
            let ring = unsafe { cq.buffer() };
            ring.write(idx as usize * 64, &c.to_bytes()).unwrap();
            pi += 1;
        }
        let n = poll_batch(&dev, &cq, &mut wc);
        assert_eq!(n, 16);
        total += n;
    }
    println!("{total} completions; rounds: {ROUNDS}, per batch: 16");
}

//! Wall-clock cost of the data path on the fake device (criterion): `post_send` of RDMA writes
//! one per doorbell and 16 per doorbell, and `poll_cq` of 16 requester CQEs.
//!
//! ```text
//! cargo bench -p mlx5 --bench post_poll
//! ```
//!
//! Only the driver's side is timed: completing the posted work (the CQEs the device would
//! write) happens between the timed parts. Doorbell MMIO writes go to a register stub that
//! does one volatile store, as a mapped BAR would. Timings on a shared machine are noisy; the
//! instruction counts (`examples/fastpath_cost.rs`, `scripts/fastpath-cost.sh`) are the
//! stable figure.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use firmware_interface::cqe::{Cqe64, opcode as cop};
use firmware_interface::wqe::opcode as wop;
use firmware_interface::{Be16, Be32};
use mlx5::fake::{FastPathRig, SinkDevice};
use verbs::Buffer;
use verbs::{Provider, RemoteOp, SendFlags, SendWr, Sge, WorkCompletion, WrOpcode};

type Dev = SinkDevice;

/// A device, an RC QP in RTS and its CQ.
struct Rig {
    dev: Dev,
    cq: mlx5::Cq,
    qp: mlx5::Qp,
    _mem: Buffer,
    /// Device-side CQ producer position.
    pi: u32,
}

/// 16 signalled RDMA writes, one SGE each.
fn wrs(sge: &[Sge; 16]) -> [SendWr<'_, mlx5::Ah>; 16] {
    std::array::from_fn(|i| SendWr {
        wr_id: i as u64,
        opcode: WrOpcode::RdmaWrite,
        flags: SendFlags::SIGNALED,
        sg_list: std::slice::from_ref(&sge[i]),
        remote: RemoteOp::Rdma {
            remote_addr: 0x1000,
            rkey: 0x42,
        },
        ..SendWr::default()
    })
}

impl Rig {
    /// The rig and 16 SGEs of 1 KiB in a registered region.
    fn new() -> (Rig, [Sge; 16]) {
        let r = FastPathRig::new();
        let sge = r.sges();
        (
            Rig {
                dev: r.dev,
                cq: r.cq,
                qp: r.qp,
                _mem: r.mem,
                pi: 0,
            },
            sge,
        )
    }

    /// The device's side: a successful CQE for each of the `n` WQEs posted before `end`.
    fn complete(&mut self, end: u32, n: u32) {
        let log = self.cq.log_size();
        let qpn = self.qp.qpn();
        for i in 0..n {
            let c = Cqe64 {
                sop_drop_qpn: Be32::new(((wop::RDMA_WRITE as u32) << 24) | qpn),
                wqe_counter: Be16::new(end.wrapping_sub(n - i) as u16),
                op_own: (cop::REQ << 4) | ((self.pi >> log) & 1) as u8,
                ..Cqe64::zeroed()
            };
            let idx = self.pi & ((1 << log) - 1);
            // SAFETY: this thread is the only one polling the CQ, and it does not poll now.
            let ring = unsafe { self.cq.buffer() };
            ring.write(idx as usize * 64, &c.to_bytes()).unwrap();
            self.pi += 1;
        }
    }

    /// Polls `n` completions (all there).
    fn drain(&self, n: usize) {
        let mut wc = [WorkCompletion::default(); 16];
        let got = Provider::poll_cq(&self.dev, &self.cq, &mut wc[..n]).unwrap();
        assert_eq!(got, n);
    }
}

fn post_poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("mlx5-fake");
    g.throughput(Throughput::Elements(16));

    let (mut r, sge) = Rig::new();
    g.bench_function("post_send 16 WQEs, 1 per doorbell", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let wrs = wrs(&sge);
                let start = Instant::now();
                for wr in &wrs {
                    Provider::post_send(&r.dev, &mut r.qp, black_box(std::slice::from_ref(wr)))
                        .unwrap();
                }
                t += start.elapsed();
                let end = r.qp.sq_producer();
                r.complete(end, 16);
                r.drain(16);
            }
            t
        })
    });

    let (mut r, sge) = Rig::new();
    g.bench_function("post_send 16 WQEs, 16 per doorbell", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                let wrs = wrs(&sge);
                let start = Instant::now();
                Provider::post_send(&r.dev, &mut r.qp, black_box(&wrs)).unwrap();
                t += start.elapsed();
                let end = r.qp.sq_producer();
                r.complete(end, 16);
                r.drain(16);
            }
            t
        })
    });

    let (mut r, sge) = Rig::new();
    g.bench_function("poll_cq 16 CQEs", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            let mut wc = [WorkCompletion::default(); 16];
            for _ in 0..iters {
                let wrs = wrs(&sge);
                Provider::post_send(&r.dev, &mut r.qp, &wrs).unwrap();
                let end = r.qp.sq_producer();
                r.complete(end, 16);
                let start = Instant::now();
                let n = Provider::poll_cq(&r.dev, &r.cq, black_box(&mut wc)).unwrap();
                t += start.elapsed();
                assert_eq!(n, 16);
            }
            t
        })
    });
    g.finish();
}

criterion_group!(benches, post_poll);
criterion_main!(benches);

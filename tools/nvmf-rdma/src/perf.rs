//! The benchmark behind `nvmf-perf`: a host session (admin queue, I/O queues) and fio-like
//! workloads on it, each I/O queue driven by a thread of its own with `depth` commands in
//! flight.
//!
//! Verification: block `lba` always holds the same pattern (a function of the LBA and the
//! run's seed), so concurrent writes of one block agree. A read workload with verification
//! first writes its range sequentially, then checks every block it reads; a write workload
//! with verification reads back every block it wrote after the timed phase.

use std::net::SocketAddr;
use std::sync::Arc;

use device_open::Device;
use nvmf::capsule::{Cqe, Sqe};
use nvmf::host::{ConnectParams, HostQueueState, cmd};
use nvmf::io::opcode;

use crate::host::{HostConn, QueueConfig, RdmaHostQueue, XferError, connect_queue};
use crate::net::Endpoint;

/// The access pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Sequential reads.
    Read,
    /// Sequential writes.
    Write,
    /// Uniformly random reads.
    RandRead,
    /// Uniformly random writes.
    RandWrite,
}

impl Pattern {
    /// fio's name.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Read => "read",
            Pattern::Write => "write",
            Pattern::RandRead => "randread",
            Pattern::RandWrite => "randwrite",
        }
    }

    /// Writes, not reads.
    pub fn is_write(self) -> bool {
        matches!(self, Pattern::Write | Pattern::RandWrite)
    }

    fn is_random(self) -> bool {
        matches!(self, Pattern::RandRead | Pattern::RandWrite)
    }
}

impl std::str::FromStr for Pattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Pattern, String> {
        Ok(match s {
            "read" => Pattern::Read,
            "write" => Pattern::Write,
            "randread" => Pattern::RandRead,
            "randwrite" => Pattern::RandWrite,
            _ => return Err(format!("'{s}': one of read, write, randread, randwrite")),
        })
    }
}

/// A workload.
#[derive(Clone, Debug)]
pub struct Job {
    /// Access pattern.
    pub pattern: Pattern,
    /// Bytes per I/O (a multiple of the namespace's block size).
    pub bs: usize,
    /// Commands in flight per queue.
    pub depth: u16,
    /// I/O queues.
    pub queues: u16,
    /// Total I/Os (split between the queues); `None`: run for `time_ms`.
    pub count: Option<u64>,
    /// Run time (wall clock), when no count is given.
    pub time_ms: u64,
    /// Check the data.
    pub verify: bool,
    /// Namespace (0: the first active one).
    pub nsid: u32,
    /// Blocks of the namespace to use from LBA 0 (0: all of it).
    pub range_blocks: u64,
    /// Pattern and random seed.
    pub seed: u64,
}

impl Default for Job {
    fn default() -> Job {
        Job {
            pattern: Pattern::RandRead,
            bs: 4096,
            depth: 16,
            queues: 2,
            count: Some(2000),
            time_ms: 0,
            verify: true,
            nsid: 0,
            range_blocks: 0,
            seed: 0x6e76_6d66,
        }
    }
}

/// The data block `lba` holds (`bs` bytes): 8-byte words of the LBA, the offset and the seed.
pub fn fill_block(buf: &mut [u8], lba: u64, seed: u64) {
    for (i, w) in buf.chunks_mut(8).enumerate() {
        let v = (lba.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed ^ (i as u64) << 3)
            .wrapping_add(0x5851_F42D_4C95_7F2D);
        w.copy_from_slice(&v.to_le_bytes()[..w.len()]);
    }
}

/// The namespace the session uses.
#[derive(Clone, Copy, Debug)]
pub struct NsInfo {
    /// NSID.
    pub nsid: u32,
    /// Block size.
    pub block_size: u32,
    /// Blocks.
    pub blocks: u64,
}

/// An admin queue, the controller and its I/O queues.
pub struct Session<D: Device> {
    /// The admin queue.
    pub admin: RdmaHostQueue<D>,
    /// The controller id.
    pub cntlid: u16,
    /// I/O queues (qid 1..).
    pub io: Vec<HostConn<D>>,
    /// The namespace.
    pub ns: NsInfo,
    /// In-capsule data size of the I/O queues.
    pub inline: usize,
    /// The keep-alive timeout of the controller (ms; 0: none): while a workload runs, the
    /// admin queue sends Keep Alive every half of it.
    pub kato_ms: u32,
    /// Keep Alive commands sent.
    pub keep_alives: u64,
}

fn herr<E: std::fmt::Debug>(what: &str) -> impl FnOnce(E) -> String + '_ {
    move |e| format!("{what}: {e:?}")
}

/// Connects the admin queue, enables the controller, identifies the namespace, asks for
/// `queues` I/O queues and connects them with `depth` entries and `slot` bytes per command.
pub fn open_session<D: Device>(
    ep: &Endpoint<D>,
    dst: SocketAddr,
    params: &ConnectParams,
    nsid: u32,
    queues: u16,
    depth: u16,
    slot: usize,
) -> Result<Session<D>, String> {
    let mut admin = connect_queue(
        ep,
        dst,
        QueueConfig {
            qid: 0,
            depth: nvmf::rdma::ADMIN_QUEUE_DEPTH,
            slot_size: 4096,
            inline: 0,
        },
    )
    .map_err(|e| format!("admin queue: {e}"))?;
    let cntlid = admin.connect_admin(params).map_err(herr("admin Connect"))?;
    admin.enable(100).map_err(herr("enable"))?;
    let ctrl = admin
        .identify_controller()
        .map_err(herr("Identify Controller"))?;
    let inline = (ctrl.ioccsz as usize * 16).saturating_sub(64);
    let nsid = if nsid == 0 {
        *admin
            .active_namespaces(0)
            .map_err(herr("active namespaces"))?
            .first()
            .ok_or("the subsystem has no namespace")?
    } else {
        nsid
    };
    let id = admin
        .identify_namespace(nsid)
        .map_err(herr("Identify Namespace"))?;
    if id.ncap == 0 || !(9..=12).contains(&id.lbads) {
        return Err(format!("namespace {nsid}: not usable ({id:?})"));
    }
    let ns = NsInfo {
        nsid,
        block_size: 1 << id.lbads,
        blocks: id.nsze,
    };
    let n = admin
        .set_num_queues(queues)
        .map_err(herr("Set Features Number of Queues"))?;
    let mut io = Vec::new();
    for qid in 1..=n {
        let mut q = connect_queue(
            ep,
            dst,
            QueueConfig {
                qid,
                depth,
                slot_size: slot,
                inline,
            },
        )
        .map_err(|e| format!("I/O queue {qid}: {e}"))?;
        q.connect(params, cntlid)
            .map_err(herr("I/O queue Connect"))?;
        io.push(q.transport);
    }
    Ok(Session {
        admin,
        cntlid,
        io,
        ns,
        inline,
        kato_ms: params.kato,
        keep_alives: 0,
    })
}

impl<D: Device> Session<D> {
    /// Disconnects the I/O queues, shuts the controller down and disconnects the admin
    /// queue.
    pub fn close(mut self) {
        for q in self.io.drain(..) {
            q.close();
        }
        let _ = self.admin.shutdown();
        self.admin.transport.close();
    }
}

/// What a run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Workload.
    pub pattern: String,
    /// Bytes per I/O.
    pub bs: usize,
    /// Depth per queue.
    pub depth: u16,
    /// Queues used.
    pub queues: usize,
    /// I/Os completed in the timed phase.
    pub ios: u64,
    /// Bytes moved in the timed phase.
    pub bytes: u64,
    /// Its duration in ns (wall clock).
    pub elapsed_ns: u64,
    /// Latency percentiles (ns): 50, 90, 99, 99.9, and min, mean, max.
    pub lat: Latency,
    /// Keep Alive commands the admin queue sent during the run.
    pub keep_alives: u64,
    /// Blocks whose data was checked.
    pub verified_blocks: u64,
    /// Blocks whose data did not match.
    pub mismatches: u64,
    /// Commands that completed with an error status.
    pub errors: u64,
}

/// Latency statistics in ns.
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency {
    /// Fastest.
    pub min: u64,
    /// Mean.
    pub mean: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Slowest.
    pub max: u64,
}

impl Latency {
    fn of(mut v: Vec<u64>) -> Latency {
        if v.is_empty() {
            return Latency::default();
        }
        v.sort_unstable();
        let pct = |p: f64| v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1];
        Latency {
            min: v[0],
            mean: v.iter().sum::<u64>() / v.len() as u64,
            p50: pct(0.5),
            p90: pct(0.9),
            p99: pct(0.99),
            p999: pct(0.999),
            max: v[v.len() - 1],
        }
    }
}

impl Report {
    /// I/Os per second.
    pub fn iops(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.ios as f64 * 1e9 / self.elapsed_ns as f64
    }

    /// MB/s (10^6 bytes).
    pub fn mbps(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.bytes as f64 * 1e3 / self.elapsed_ns as f64
    }

    /// The report as one JSON object.
    pub fn to_json(&self) -> String {
        let l = &self.lat;
        format!(
            "{{\"pattern\":\"{}\",\"bs\":{},\"depth\":{},\"queues\":{},\"ios\":{},\"bytes\":{},\
             \"elapsed_ns\":{},\"iops\":{:.1},\"mbps\":{:.3},\"lat_ns\":{{\"min\":{},\"mean\":{},\
             \"p50\":{},\"p90\":{},\"p99\":{},\"p99.9\":{},\"max\":{}}},\"verified_blocks\":{},\
             \"mismatches\":{},\"errors\":{},\"keep_alives\":{}}}",
            self.pattern,
            self.bs,
            self.depth,
            self.queues,
            self.ios,
            self.bytes,
            self.elapsed_ns,
            self.iops(),
            self.mbps(),
            l.min,
            l.mean,
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            self.verified_blocks,
            self.mismatches,
            self.errors,
            self.keep_alives
        )
    }

    /// The report as text (fio-like).
    pub fn to_text(&self) -> String {
        let l = &self.lat;
        let us = |ns: u64| ns as f64 / 1e3;
        format!(
            "{}: bs={} depth={} queues={}\n  ios={} in {:.3} ms: IOPS={:.0}, BW={:.2} MB/s\n  \
             lat (us): min={:.1} mean={:.1} max={:.1}\n  percentiles (us): 50th={:.1} \
             90th={:.1} 99th={:.1} 99.9th={:.1}\n  verified blocks={} mismatches={} \
             errors={}",
            self.pattern,
            self.bs,
            self.depth,
            self.queues,
            self.ios,
            self.elapsed_ns as f64 / 1e6,
            self.iops(),
            self.mbps(),
            us(l.min),
            us(l.mean),
            us(l.max),
            us(l.p50),
            us(l.p90),
            us(l.p99),
            us(l.p999),
            self.verified_blocks,
            self.mismatches,
            self.errors
        )
    }
}

/// One queue's share of the work.
#[derive(Clone, Copy)]
struct Share {
    first_lba: u64,
    units: u64,
    count: Option<u64>,
    deadline_ns: u64,
}

#[derive(Default)]
struct QueueResult {
    ios: u64,
    lat: Vec<u64>,
    verified: u64,
    mismatches: u64,
    errors: u64,
    written: Vec<bool>,
}

/// Wall-clock ns since the first call (measurements are in real time in every mode: the
/// embedded fabric's virtual clock runs ahead whenever its threads wait).
fn now() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    u64::try_from(
        EPOCH
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_nanos(),
    )
    .unwrap_or(u64::MAX)
}

/// xorshift64*.
fn next_rand(s: &mut u64) -> u64 {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    s.wrapping_mul(0x2545_F491_4F6C_DD1D)
}

/// Runs `units` I/Os of `job`'s pattern (or until the deadline) on `q`; `mode_write`
/// overrides the pattern's direction, `sequential` its order (for fill and read-back).
#[allow(clippy::too_many_arguments)]
fn drive<D: Device>(
    q: &mut HostConn<D>,
    ns: NsInfo,
    job: &Job,
    share: Share,
    write: bool,
    sequential: bool,
    verify: bool,
    only: Option<&[bool]>,
) -> Result<QueueResult, String> {
    let bs = job.bs;
    let unit_blocks = (bs / ns.block_size as usize) as u64;
    let mut st = HostQueueState::new(q.config().qid, q.config().depth);
    let depth = job.depth.clamp(1, q.config().depth);
    let mut res = QueueResult {
        written: vec![false; share.units as usize],
        ..QueueResult::default()
    };
    let mut rng = job.seed ^ u64::from(q.config().qid).wrapping_mul(0x1234_5678_9ABC_DEF1) | 1;
    let mut next_seq = 0u64;
    // per tag: (unit, submit time)
    let mut inflight: Vec<Option<(u64, u64)>> = vec![None; usize::from(q.config().depth)];
    let mut issued = 0u64;
    let mut block = vec![0u8; bs];
    let mut want = vec![0u8; ns.block_size as usize];
    let mut cqes: Vec<Cqe> = Vec::new();
    let done_issuing = |issued: u64, t: u64| match share.count {
        Some(c) => issued >= c,
        None => t >= share.deadline_ns,
    };
    loop {
        // Fill the queue.
        while st.cids.in_flight() < usize::from(depth) && !done_issuing(issued, now()) {
            let unit = if sequential || !job.pattern.is_random() {
                let u = next_seq % share.units;
                next_seq += 1;
                u
            } else {
                next_rand(&mut rng) % share.units
            };
            if let Some(o) = only
                && !o[unit as usize]
            {
                issued += 1;
                continue;
            }
            let lba = share.first_lba + unit * unit_blocks;
            let mut sqe: Sqe = cmd::rw(
                if write { opcode::WRITE } else { opcode::READ },
                ns.nsid,
                lba,
                unit_blocks as u32,
            );
            let Some(cid) = st.start(&mut sqe) else { break };
            let tag = usize::from(cid & 0xFFF);
            if write {
                for (i, b) in block.chunks_mut(ns.block_size as usize).enumerate() {
                    fill_block(b, lba + i as u64, job.seed);
                }
                let slot = q.slot(tag).ok_or("no data slot")?;
                slot.write(0, &block).map_err(herr("slot write"))?;
            }
            inflight[tag] = Some((unit, now()));
            q.submit(&mut sqe, bs, write)
                .map_err(|e: XferError| format!("queue {}: submit: {e:?}", q.config().qid))?;
            issued += 1;
        }
        if st.cids.in_flight() == 0 {
            if done_issuing(issued, now()) {
                return Ok(res);
            }
            continue;
        }
        cqes.clear();
        q.wait(&mut cqes)
            .map_err(|e| format!("queue {}: {e:?}", q.config().qid))?;
        let t = now();
        for c in &cqes {
            let tag = usize::from(c.cid & 0xFFF);
            if !st.finish(c) {
                return Err(format!(
                    "queue {}: unexpected completion {c:?}",
                    q.config().qid
                ));
            }
            let Some((unit, t0)) = inflight.get_mut(tag).and_then(Option::take) else {
                return Err(format!(
                    "queue {}: completion of an idle tag",
                    q.config().qid
                ));
            };
            res.ios += 1;
            res.lat.push(t.saturating_sub(t0));
            if !c.status.is_success() {
                res.errors += 1;
                continue;
            }
            let lba = share.first_lba + unit * unit_blocks;
            if write {
                res.written[unit as usize] = true;
            } else if verify {
                let slot = q.slot(tag).ok_or("no data slot")?;
                slot.read(0, &mut block).map_err(herr("slot read"))?;
                for (i, b) in block.chunks(ns.block_size as usize).enumerate() {
                    fill_block(&mut want, lba + i as u64, job.seed);
                    res.verified += 1;
                    if b != &want[..] {
                        res.mismatches += 1;
                    }
                }
            }
        }
    }
}

/// Runs `job` on the session: fill (reads with verification), the timed phase on every I/O
/// queue at once, read-back (writes with verification).
pub fn run<D: Device>(s: &mut Session<D>, job: &Job) -> Result<Report, String> {
    let ns = s.ns;
    let bsz = ns.block_size as usize;
    if job.bs == 0 || !job.bs.is_multiple_of(bsz) {
        return Err(format!(
            "block size {} is not a multiple of the namespace's {bsz}",
            job.bs
        ));
    }
    if s.io.is_empty() {
        return Err("no I/O queue".into());
    }
    let unit_blocks = (job.bs / bsz) as u64;
    let range = if job.range_blocks == 0 {
        ns.blocks
    } else {
        job.range_blocks.min(ns.blocks)
    };
    let nq = s.io.len() as u64;
    let units_per_q = range / unit_blocks / nq;
    if units_per_q == 0 {
        return Err(format!(
            "{range} blocks do not give each of {nq} queues one {}-byte I/O",
            job.bs
        ));
    }
    let per_count = job.count.map(|c| c.div_ceil(nq));
    let shares: Vec<Share> = (0..nq)
        .map(|i| Share {
            first_lba: i * units_per_q * unit_blocks,
            units: units_per_q,
            count: per_count,
            deadline_ns: 0,
        })
        .collect();
    let phase = |s: &mut Session<D>,
                 counts: Option<u64>,
                 deadline: u64,
                 write: bool,
                 seq: bool,
                 verify: bool,
                 only: Option<&Vec<Vec<bool>>>|
     -> Result<Vec<QueueResult>, String> {
        let kato = s.kato_ms;
        let admin = &mut s.admin;
        let keep_alives = &mut s.keep_alives;
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|sc| {
            let ka = sc.spawn(|| keep_alive(admin, kato, &done, keep_alives));
            let hs: Vec<_> =
                s.io.iter_mut()
                    .zip(&shares)
                    .enumerate()
                    .map(|(i, (q, sh))| {
                        let sh = Share {
                            count: counts.or(sh.count),
                            deadline_ns: deadline,
                            ..*sh
                        };
                        let only = only.map(|o| &o[i][..]);
                        sc.spawn(move || drive(q, ns, job, sh, write, seq, verify, only))
                    })
                    .collect();
            let r: Result<Vec<QueueResult>, String> = hs
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("queue thread panicked".into()))
                })
                .collect();
            done.store(true, std::sync::atomic::Ordering::Relaxed);
            let k = ka
                .join()
                .unwrap_or_else(|_| Err("keep-alive thread panicked".into()));
            let r = r?;
            k?;
            Ok(r)
        })
    };
    let keep_alives = s.keep_alives;
    if !job.pattern.is_write() && job.verify {
        phase(s, Some(units_per_q), 0, true, true, false, None)?;
    }
    let t0 = now();
    let deadline = t0 + job.time_ms * 1_000_000;
    let main = phase(
        s,
        None,
        deadline,
        job.pattern.is_write(),
        false,
        job.verify && !job.pattern.is_write(),
        None,
    )?;
    let elapsed = now() - t0;
    let mut r = Report {
        pattern: job.pattern.name().into(),
        bs: job.bs,
        depth: job.depth,
        queues: s.io.len(),
        elapsed_ns: elapsed,
        ..Report::default()
    };
    let mut lat = Vec::new();
    for q in &main {
        r.ios += q.ios;
        r.errors += q.errors;
        r.verified_blocks += q.verified;
        r.mismatches += q.mismatches;
        lat.extend_from_slice(&q.lat);
    }
    r.bytes = (r.ios - r.errors) * job.bs as u64;
    r.lat = Latency::of(lat);
    if job.pattern.is_write() && job.verify {
        let written: Vec<Vec<bool>> = main.into_iter().map(|q| q.written).collect();
        let back = phase(s, Some(units_per_q), 0, false, true, true, Some(&written))?;
        for q in &back {
            r.verified_blocks += q.verified;
            r.mismatches += q.mismatches;
            r.errors += q.errors;
        }
    }
    r.keep_alives = s.keep_alives - keep_alives;
    Ok(r)
}

/// Sends Keep Alive on `admin` every `kato_ms / 2` of its device's clock (looked at every
/// millisecond of real time) until `done`
/// (nothing when `kato_ms` is 0), counting them in `sent`.
fn keep_alive<D: Device>(
    admin: &mut RdmaHostQueue<D>,
    kato_ms: u32,
    done: &std::sync::atomic::AtomicBool,
    sent: &mut u64,
) -> Result<(), String> {
    if kato_ms == 0 {
        return Ok(());
    }
    let clock = admin.transport.clock().clone();
    let period = u64::from(kato_ms) * 1_000_000 / 2;
    let mut last = nic_hal::Platform::now_ns(&clock);
    while !done.load(std::sync::atomic::Ordering::Relaxed) {
        let t = nic_hal::Platform::now_ns(&clock);
        if t.saturating_sub(last) >= period {
            admin
                .keep_alive()
                .map_err(|e| format!("Keep Alive: {e:?}"))?;
            *sent += 1;
            last = t;
        }
        // Not a spin: this thread shares the cores with the queues'.
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    Ok(())
}

/// Shared handle type for the target in the tools.
pub type SharedTarget = Arc<nvmf::target::Target>;

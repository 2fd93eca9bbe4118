//! `nvmf-perf`: a fio-like benchmark of an NVMe-oF/RDMA target.
//!
//! Without `--addr` it runs host and target in this process on two emulated NICs of one
//! in-process fabric (virtual time: the numbers measure the stack's work, not a wire), the
//! target serving a 64 MiB RAM namespace. With `--addr IP` it connects to an `nvmf-target`
//! there, from an emulated NIC at `--src` on the UDP fabric or a device from `--device`.
//!
//! ```text
//! nvmf-perf                                        # embedded, randread 4 KiB, qd 16, 2 queues
//! nvmf-perf --rw randwrite --bs 8192 --qd 32 --queues 4 --count 100000 --json
//! nvmf-perf --addr 127.0.0.2 --src 127.0.0.1 --rw read --time 5
//! ```
//!
//! Exit status: 0 run complete with no error status and no data mismatch, 1 otherwise, 2 bad
//! command line.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use device_open::{Device, Family, Opened, WithDevice, open_remote};
use nvmf::host::ConnectParams;
use nvmf::namespace::RamNamespace;
use nvmf::target::{Subsystem, Target, TargetConfig};
use nvmf_rdma::net::{EMBEDDED_TARGET_IP, Embedded, Endpoint};
use nvmf_rdma::perf::{self, Job, Report};
use nvmf_rdma::target::{ListenerStats, run_listener};

const USAGE: &str = "usage: nvmf-perf [--addr IP [--src IP] [--fabric-port PORT] \
[--device emu|vfio:BDF]] [--port PORT] [--nqn NQN] [--rw read|write|randread|randwrite] \
[--bs BYTES] [--qd N] [--queues N] [--count N | --time SECONDS] [--no-verify] [--nsid N] \
[--range BLOCKS] [--kato MS] [--json]";

const DEFAULT_NQN: &str = "nqn.2024-01.io.rdma-stack:ram0";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:6e766d66-7065-7266-0000-000000000001";

struct Opts {
    addr: Option<Ipv4Addr>,
    src: Ipv4Addr,
    port: u16,
    fabric_port: u16,
    device: Family,
    nqn: String,
    job: Job,
    kato: Option<u32>,
    json: bool,
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        addr: None,
        src: Ipv4Addr::new(127, 0, 0, 1),
        port: nvmf::rdma::DEFAULT_PORT,
        fabric_port: 4791,
        device: Family::Emu,
        nqn: DEFAULT_NQN.into(),
        job: Job::default(),
        kato: None,
        json: false,
    };
    let mut it = args.iter();
    fn num<T: std::str::FromStr>(a: &str, v: String) -> Result<T, String> {
        v.parse().map_err(|_| format!("{a}: bad value '{v}'"))
    }
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = Some(num(a, val()?)?),
            "--src" => o.src = num(a, val()?)?,
            "--port" => o.port = num(a, val()?)?,
            "--fabric-port" => o.fabric_port = num(a, val()?)?,
            "--device" => o.device = val()?.parse()?,
            "--nqn" => o.nqn = val()?,
            "--rw" => o.job.pattern = val()?.parse()?,
            "--bs" => o.job.bs = num(a, val()?)?,
            "--qd" => o.job.depth = num(a, val()?)?,
            "--queues" => o.job.queues = num(a, val()?)?,
            "--count" => o.job.count = Some(num(a, val()?)?),
            "--time" => {
                let s: f64 = num(a, val()?)?;
                o.job.count = None;
                o.job.time_ms = (s * 1000.0) as u64;
            }
            "--no-verify" => o.job.verify = false,
            "--nsid" => o.job.nsid = num(a, val()?)?,
            "--range" => o.job.range_blocks = num(a, val()?)?,
            "--kato" => o.kato = Some(num(a, val()?)?),
            "--json" => o.json = true,
            "-h" | "--help" => return Err(String::new()),
            x => return Err(format!("unknown argument '{x}'")),
        }
    }
    if o.job.depth == 0 || o.job.depth > nvmf::rdma::MAX_QUEUE_DEPTH {
        return Err(format!("--qd: 1 to {}", nvmf::rdma::MAX_QUEUE_DEPTH));
    }
    if o.job.queues == 0 {
        return Err("--queues: at least 1".into());
    }
    Ok(o)
}

fn params(o: &Opts) -> ConnectParams {
    ConnectParams {
        hostnqn: HOSTNQN.into(),
        hostid: *b"nvmf-perf-host01",
        subnqn: o.nqn.clone(),
        // --kato, else Linux's default of 5 s against a remote target; none embedded (its
        // virtual time leaps ahead whenever the devices idle). The admin queue sends Keep
        // Alive every half of it during a run.
        kato: o.kato.unwrap_or(if o.addr.is_some() { 5000 } else { 0 }),
        disable_sqflow: false,
    }
}

/// Runs the job from `ep` against the target at `dst`.
fn host<D: Device>(ep: &Endpoint<D>, dst: SocketAddr, o: &Opts) -> Result<Report, String> {
    let mut s = perf::open_session(
        ep,
        dst,
        &params(o),
        o.job.nsid,
        o.job.queues,
        // At least two entries (HSQSIZE 0 is invalid); `depth` commands in flight.
        o.job.depth.max(2),
        o.job.bs,
    )?;
    let r = perf::run(&mut s, &o.job);
    s.close();
    r
}

fn embedded(o: &Opts) -> Result<Report, String> {
    // Paced: virtual time runs no faster than real time while the devices idle, so a thread
    // the OS left unscheduled on a loaded machine does not time out its peer. The
    // listener's wait limit is how long it takes to see the end of the run.
    let e = Embedded::paced(0x6e76_6d66_7065, 500_000_000, 60_000_000_000)?;
    let mut t = Target::new(TargetConfig {
        mdts: 8,
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(&o.nqn, "RDMA-STACK-0001", "rdma-stack nvmf-perf");
    s.add_namespace(
        1,
        Arc::new(RamNamespace::new(512, 64 * 2048).ok_or("namespace")?),
    )
    .map_err(|e| format!("namespace: {e:?}"))?;
    t.add_subsystem(s)
        .map_err(|e| format!("subsystem: {e:?}"))?;
    let t = Arc::new(t);
    let listen = e.target.listen(o.port)?;
    let stop = AtomicBool::new(false);
    let stats = ListenerStats::default();
    let r = std::thread::scope(|sc| {
        sc.spawn(|| run_listener(&t, &listen, &e.target.clock, 1 << 20, &stop, &stats, false));
        let r = host(&e.host, SocketAddr::from((EMBEDDED_TARGET_IP, o.port)), o);
        stop.store(true, Ordering::Relaxed);
        r
    });
    listen.destroy_ep();
    r
}

struct Remote<'a>(&'a Opts, Ipv4Addr);

impl WithDevice for Remote<'_> {
    type Output = Result<Report, String>;
    fn run<D: Device>(self, dev: Opened<D>) -> Result<Report, String> {
        let Remote(o, dst) = self;
        let (ep, backing) = Endpoint::new(dev, 30_000_000_000)?;
        let r = host(&ep, SocketAddr::from((dst, o.port)), o);
        drop(ep);
        drop(backing);
        r
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(m) if m.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(m) => {
            eprintln!("nvmf-perf: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let r = match o.addr {
        None => embedded(&o),
        Some(dst) => open_remote(&o.device, o.src, o.fabric_port, Remote(&o, dst)).and_then(|r| r),
    };
    match r {
        Ok(r) => {
            if o.json {
                println!("{}", r.to_json());
            } else {
                println!("{}", r.to_text());
            }
            if r.errors == 0 && r.mismatches == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("nvmf-perf: {e}");
            ExitCode::from(1)
        }
    }
}

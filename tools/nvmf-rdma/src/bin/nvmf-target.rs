//! `nvmf-target`: an NVMe-oF/RDMA target serving RAM namespaces and file namespaces on an
//! emulated NIC on the UDP fabric (default), or on a device from `--device`.
//!
//! ```text
//! nvmf-target                                   # 127.0.0.2:4420, one 64 MiB RAM namespace
//! nvmf-target --ram 16:4096 --file disk.img:512 --nqn nqn.2024-01.io.example:disk
//! nvmf-target --addr 127.0.0.5 --fabric-port 4791 --device emu
//! ```
//!
//! It serves until killed. Exit status 1 on a setup failure, 2 on a bad command line.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use device_open::{Device, Family, Opened, WithDevice, open_remote};
use nvmf::namespace::{FileNamespace, Namespace, RamNamespace};
use nvmf::target::{Port, Subsystem, Target, TargetConfig};
use nvmf_rdma::net::Endpoint;
use nvmf_rdma::target::{ListenerStats, run_listener};

const USAGE: &str = "usage: nvmf-target [--addr IP] [--port PORT] [--fabric-port PORT] \
[--device emu|vfio:BDF] [--nqn NQN] [--ram MIB[:BS]]... [--file PATH[:BS]]... \
[--io-queues N] [--mdts N] [-v]";

struct Opts {
    addr: Ipv4Addr,
    port: u16,
    fabric_port: u16,
    device: Family,
    nqn: String,
    ram: Vec<(u64, u32)>,
    files: Vec<(String, u32)>,
    io_queues: u16,
    mdts: u8,
    verbose: bool,
}

fn split_bs(s: &str, default: u32) -> Result<(&str, u32), String> {
    match s.rsplit_once(':') {
        Some((a, b)) => Ok((a, b.parse().map_err(|_| format!("bad block size '{b}'"))?)),
        None => Ok((s, default)),
    }
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        addr: Ipv4Addr::new(127, 0, 0, 2),
        port: nvmf::rdma::DEFAULT_PORT,
        fabric_port: 4791,
        device: Family::Emu,
        nqn: "nqn.2024-01.io.rdma-stack:ram0".into(),
        ram: Vec::new(),
        files: Vec::new(),
        io_queues: 16,
        mdts: 5,
        verbose: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--addr" => o.addr = val()?.parse().map_err(|e| format!("--addr: {e}"))?,
            "--port" => o.port = val()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--fabric-port" => {
                o.fabric_port = val()?.parse().map_err(|e| format!("--fabric-port: {e}"))?
            }
            "--device" => o.device = val()?.parse()?,
            "--nqn" => o.nqn = val()?,
            "--ram" => {
                let v = val()?;
                let (m, bs) = split_bs(&v, 512)?;
                let mib: u64 = m.parse().map_err(|_| format!("--ram: bad size '{m}'"))?;
                o.ram.push((mib, bs));
            }
            "--file" => {
                let v = val()?;
                let (p, bs) = split_bs(&v, 512)?;
                o.files.push((p.into(), bs));
            }
            "--io-queues" => {
                o.io_queues = val()?.parse().map_err(|e| format!("--io-queues: {e}"))?
            }
            "--mdts" => o.mdts = val()?.parse().map_err(|e| format!("--mdts: {e}"))?,
            "-v" => o.verbose = true,
            "-h" | "--help" => return Err(String::new()),
            x => return Err(format!("unknown argument '{x}'")),
        }
    }
    if o.ram.is_empty() && o.files.is_empty() {
        o.ram.push((64, 512));
    }
    Ok(o)
}

/// The target of `o`'s namespaces.
fn build(o: &Opts) -> Result<Arc<Target>, String> {
    let mut t = Target::new(TargetConfig {
        max_io_queues: o.io_queues,
        mdts: o.mdts,
        ports: vec![Port {
            portid: 1,
            trtype: nvmf::discovery::trtype::RDMA,
            adrfam: nvmf::discovery::adrfam::IPV4,
            traddr: o.addr.to_string(),
            trsvcid: o.port.to_string(),
            treq: nvmf::discovery::TREQ_SECURE_NOT_REQUIRED,
        }],
        ..TargetConfig::default()
    });
    let mut s = Subsystem::new(&o.nqn, "RDMA-STACK-0001", "rdma-stack nvmf-target");
    let mut nsid = 1;
    for &(mib, bs) in &o.ram {
        let blocks = mib * 1024 * 1024 / u64::from(bs);
        let ns = RamNamespace::new(bs, blocks)
            .ok_or(format!("--ram {mib}:{bs}: not a valid namespace"))?;
        s.add_namespace(nsid, Arc::new(ns) as Arc<dyn Namespace>)
            .map_err(|e| format!("namespace {nsid}: {e:?}"))?;
        eprintln!("nvmf-target: namespace {nsid}: RAM, {blocks} blocks of {bs} bytes");
        nsid += 1;
    }
    for (path, bs) in &o.files {
        let ns = FileNamespace::open(path, *bs, false).map_err(|e| format!("{path}: {e}"))?;
        let blocks = ns.block_count();
        s.add_namespace(nsid, Arc::new(ns) as Arc<dyn Namespace>)
            .map_err(|e| format!("namespace {nsid}: {e:?}"))?;
        eprintln!("nvmf-target: namespace {nsid}: {path}, {blocks} blocks of {bs} bytes");
        nsid += 1;
    }
    t.add_subsystem(s)
        .map_err(|e| format!("subsystem: {e:?}"))?;
    Ok(Arc::new(t))
}

struct Serve<'a>(&'a Opts, Arc<Target>);

impl WithDevice for Serve<'_> {
    type Output = Result<(), String>;
    fn run<D: Device>(self, dev: Opened<D>) -> Result<(), String> {
        let Serve(o, target) = self;
        let (ep, backing) = Endpoint::new(dev, 2_000_000_000)?;
        let listen = ep.listen(o.port)?;
        eprintln!(
            "nvmf-target: {} listening on {}:{} ({})",
            o.nqn, o.addr, o.port, ep.label
        );
        let stop = AtomicBool::new(false);
        let stats = ListenerStats::default();
        let staging = 4096usize << o.mdts;
        run_listener(
            &target, &listen, &ep.clock, staging, &stop, &stats, o.verbose,
        );
        eprintln!(
            "nvmf-target: {} connections, {} rejected, {} commands",
            stats.accepted.load(Ordering::Relaxed),
            stats.rejected.load(Ordering::Relaxed),
            stats.commands.load(Ordering::Relaxed)
        );
        listen.destroy_ep();
        drop(ep);
        drop(backing);
        Ok(())
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
            eprintln!("nvmf-target: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let r = build(&o)
        .and_then(|t| open_remote(&o.device, o.addr, o.fabric_port, Serve(&o, t)).and_then(|r| r));
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            ExitCode::from(1)
        }
    }
}

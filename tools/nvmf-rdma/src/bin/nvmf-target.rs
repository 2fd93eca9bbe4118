//! `nvmf-target`: an NVMe-oF/RDMA target serving RAM namespaces and file namespaces on an
//! emulated NIC on the UDP fabric (default), or on a device from `--device`.
//!
//! ```text
//! nvmf-target                                   # 127.0.0.2:4420, one 64 MiB RAM namespace
//! nvmf-target --ram 16:4096 --file disk.img:512 --nqn nqn.2024-01.io.example:disk
//! nvmf-target --addr 127.0.0.5 --fabric-port 4791 --device emu
//! nvmf-target --addr 10.77.0.1 --fabric eth:48030,48031    # on a QEMU socket-netdev link
//! ```
//!
//! `--fabric eth:LOCAL,REMOTE` puts the emulated NIC on an Ethernet link in QEMU's
//! socket-netdev format (frames between 127.0.0.1:LOCAL and 127.0.0.1:REMOTE, ARP), where
//! Linux's nvme-rdma initiator on soft-RoCE in a guest reaches it; `--addr` is then the NIC's
//! address on that virtual wire.
//!
//! It serves until killed. Exit status 1 on a setup failure, 2 on a bad command line.

use std::net::Ipv4Addr;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use device_open::fabric::{Fabric, parse_fabric, parse_mac, wire_address_ok};
use device_open::{Device, Family, Opened, WithDevice, open_remote};
use nvmf::namespace::{FileNamespace, Namespace, RamNamespace};
use nvmf::target::{Port, Subsystem, Target, TargetConfig};
use nvmf_rdma::net::{Endpoint, eth_endpoint};
use nvmf_rdma::target::{ListenerStats, run_listener};

const USAGE: &str = "usage: nvmf-target [--addr IP] [--port PORT] [--fabric-port PORT | \
--fabric udp:PORT|eth:LOCAL,REMOTE [--mac MAC]] [--device emu|vfio:BDF] [--nqn NQN] [--ram MIB[:BS]]... [--file PATH[:BS]]... \
[--io-queues N] [--mdts N] [-v]";

struct Opts {
    addr: Ipv4Addr,
    port: u16,
    fabric: Fabric,
    mac: Option<[u8; 6]>,
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
        fabric: Fabric::Udp(4791),
        mac: None,
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
                o.fabric = Fabric::Udp(val()?.parse().map_err(|e| format!("--fabric-port: {e}"))?)
            }
            "--fabric" => o.fabric = parse_fabric(&val()?)?,
            "--mac" => o.mac = Some(parse_mac(&val()?)?),
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
    match o.fabric {
        Fabric::Udp(_) if o.mac.is_some() => {
            return Err("--mac applies to the Ethernet fabric (--fabric eth:LOCAL,REMOTE)".into());
        }
        Fabric::Eth { .. } if o.device != Family::Emu => {
            return Err("--fabric eth: is the emulated NIC's; not with --device".into());
        }
        Fabric::Eth { .. } if !wire_address_ok(o.addr) => {
            return Err(format!(
                "--addr {}: not a unicast address for the virtual wire (the link itself uses \
                 127.0.0.1)",
                o.addr
            ));
        }
        _ => {}
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

/// Listens on `ep` and serves until killed.
fn serve_on<D: Device>(ep: &Endpoint<D>, o: &Opts, target: &Arc<Target>) -> Result<(), String> {
    let listen = ep.listen(o.port)?;
    eprintln!(
        "nvmf-target: {} listening on {}:{} ({})",
        o.nqn, o.addr, o.port, ep.label
    );
    let stop = AtomicBool::new(false);
    let stats = ListenerStats::default();
    let staging = 4096usize << o.mdts;
    run_listener(
        target, &listen, &ep.clock, staging, &stop, &stats, o.verbose,
    );
    eprintln!(
        "nvmf-target: {} connections, {} rejected, {} commands",
        stats.accepted.load(Ordering::Relaxed),
        stats.rejected.load(Ordering::Relaxed),
        stats.commands.load(Ordering::Relaxed)
    );
    listen.destroy_ep();
    Ok(())
}

struct Serve<'a>(&'a Opts, Arc<Target>);

impl WithDevice for Serve<'_> {
    type Output = Result<(), String>;
    fn run<D: Device>(self, dev: Opened<D>) -> Result<(), String> {
        let Serve(o, target) = self;
        let (ep, backing) = Endpoint::new(dev, 2_000_000_000)?;
        let r = serve_on(&ep, o, &target);
        drop(ep);
        drop(backing);
        r
    }
}

/// Serves on the emulated NIC of an Ethernet link.
fn serve_eth(o: &Opts, target: Arc<Target>, local: u16, remote: u16) -> Result<(), String> {
    let (ep, nic) = eth_endpoint(o.addr, local, remote, o.mac, 2_000_000_000)?;
    let r = serve_on(&ep, o, &target);
    drop(ep);
    drop(nic);
    r
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
    let r = build(&o).and_then(|t| match o.fabric {
        Fabric::Udp(port) => open_remote(&o.device, o.addr, port, Serve(&o, t)).and_then(|r| r),
        Fabric::Eth { local, remote } => serve_eth(&o, t, local, remote),
    });
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvmf-target: {e}");
            ExitCode::from(1)
        }
    }
}

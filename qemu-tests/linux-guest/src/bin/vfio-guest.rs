//! `vfio-guest`: the stack in a Linux process through real kernel VFIO, for the QEMU guest
//! test (built statically; it runs from the guest's initramfs).
//!
//! It attaches the emulated NIC's PCI function (ivshmem 1af4:1110, bound to vfio-pci)
//! with `vfio-attach` (BAR2 is the NIC's BAR0), takes DMA memory with IOVA = guest-physical
//! address (huge pages for buffers over 4 KiB), brings the mlx5 driver up on it, adds it to
//! the connection manager and runs the data-checked SEND / WRITE / READ exchange
//! (`linux_guest::Exchange`):
//!
//! ```text
//! vfio-guest --ip ADDR --mode loopback [--port N] [--iters N] [--bdf BDF]
//!     server and client on this NIC (two threads, one connection to itself)
//! vfio-guest --ip ADDR --mode client --peer ADDR [--peer-mac MAC] [--port N] ...
//!     connects to a server on another NIC of the UDP fabric
//! vfio-guest --ip ADDR --mode server [--peer ADDR [--peer-mac MAC]] [--port N] ...
//!     listens (printing `server: listening on ADDR:PORT`) and serves one connection
//! vfio-guest --ip ADDR --mode efa-loopback [--bdf BDF]
//!     the EFA driver on the emulated EFA behind ivshmem (`nic-emud --family efa`): SRD and
//!     UD SENDs and an SRD RDMA READ to its own address, every byte checked
//! vfio-guest --ip ADDR --mode irq [--bdf BDF]
//!     MSI-X through VFIO (the function must be an ivshmem-doorbell): a blocking completion
//!     wait woken by the interrupt, its thread's CPU time measured
//! ```
//!
//! `--mode efa-loopback` reads the identity page at offset 0x1000 of BAR2 (the EFA's PCI ids
//! and where its doorbell and memory BARs are in BAR2), takes those windows and BAR2's start
//! as the EFA's BARs, probes the EFA driver (its GID must be the IPv4-mapped `--ip`), and
//! runs the EFA loopback exchange (`efa::loopback`) with every completion and byte checked;
//! `reads` and `sends` count what was checked.
//!
//! `--mode irq` enables the function's MSI-X vectors with an eventfd each
//! (`vfio_attach::VfioInterrupts`) and gives them to the driver through
//! `Platform::interrupts`. Two RC QPs on the NIC are connected to each other; the receiving
//! one's CQ is on a completion channel (its own vector) and armed; a thread waits for the
//! channel's event with a one-minute timeout (the driver is told never to recheck without an
//! interrupt) while the main thread sleeps 1.5 s and then posts the SEND. It prints
//! `VFIO-GUEST IRQ woken ok: vector V fired N times; wait W us, waiting thread CPU C us` and
//! the received data is checked.
//!
//! `--checks` first exercises the error paths on the real VFIO nodes: a BAR the function
//! does not have (`NoSuchBar`, after which the group must be attachable again), the group
//! opened by an unprivileged user (the tool re-runs itself as uid 65534 with
//! `--mode denied`: `PermissionDenied`), a second attach while the first holds the group
//! (`Busy`), and 4 KiB-page DMA memory mapped page by page at each page's physical address
//! (`small-pages`: the IOVAs equal what `/proc/self/pagemap` says, a buffer over a page is
//! refused with `NotContiguous`). `--mode unbound` checks the error for a function not
//! bound to vfio-pci yet (`NotBound`). Each prints `VFIO-GUEST CHECK <name> ok: <the error's message>` or
//! `VFIO-GUEST CHECK <name> FAIL ...`.
//!
//! Every step prints one line starting with `VFIO-GUEST`; the last is
//! `VFIO-GUEST RESULT <mode> ok sends=N reads=N writes=N rdma_bytes=N` or
//! `VFIO-GUEST RESULT <mode> FAIL <why>`. Exit status 0 only on success.

use std::net::Ipv4Addr;
use std::os::unix::process::CommandExt;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::{Cm, CmConfig, Neighbor};
use linux_guest::{Exchange, Report, SpinClock, client_ep, listen, run_client, serve};
use nic_hal::{DmaAllocator, Interrupts, Platform};
use verbs::rc::RcParams;
use verbs::{
    AccessFlags, AhAttr, Buffer, Gid, MemoryRegion, Mtu, Provider, QpCap, QpInitAttr, QpType,
    RecvWr, RemoteOp, SendFlags, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
};
use vfio_attach::{
    AttachError, AttachOptions, DmaOptions, HugePages, IovaPolicy, VfioBar, VfioInterrupts, attach,
};

type Dev = mlx5::Device<Arc<VfioBar>, GuestPlatform>;

/// The driver's platform in the guest: the clock, and in `--mode irq` the function's MSI-X
/// vectors through VFIO.
#[derive(Clone, Debug)]
struct GuestPlatform {
    clock: SpinClock,
    irqs: Option<Arc<VfioInterrupts>>,
}

impl Platform for GuestPlatform {
    fn relax(&self) {
        Platform::relax(&self.clock)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(&self.clock)
    }
    fn interrupts(&self) -> Option<&dyn Interrupts> {
        self.irqs.as_deref().map(|i| i as &dyn Interrupts)
    }
}

/// ivshmem's PCI IDs.
const IVSHMEM: (u16, u16) = (0x1af4, 0x1110);
/// The emulated NIC's default MAC (nic-emulator's default profile).
const DEFAULT_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

#[derive(Debug)]
struct Opts {
    mode: String,
    ip: Ipv4Addr,
    peer: Option<Ipv4Addr>,
    peer_mac: [u8; 6],
    port: u16,
    iters: u32,
    rdma_len: usize,
    bdf: Option<String>,
    checks: bool,
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = s.split(':').collect();
    if parts.len() != 6 {
        return Err(format!("bad MAC {s:?}"));
    }
    let mut m = [0u8; 6];
    for (i, p) in parts.iter().enumerate() {
        m[i] = u8::from_str_radix(p, 16).map_err(|_| format!("bad MAC {s:?}"))?;
    }
    Ok(m)
}

fn parse(args: &[String]) -> Result<Opts, String> {
    let mut o = Opts {
        mode: String::new(),
        ip: Ipv4Addr::UNSPECIFIED,
        peer: None,
        peer_mac: DEFAULT_MAC,
        port: 7471,
        iters: Exchange::default().iters,
        rdma_len: Exchange::default().rdma_len,
        bdf: None,
        checks: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut v = || it.next().cloned().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--mode" => o.mode = v()?,
            "--ip" => o.ip = v()?.parse().map_err(|e| format!("--ip: {e}"))?,
            "--peer" => o.peer = Some(v()?.parse().map_err(|e| format!("--peer: {e}"))?),
            "--peer-mac" => o.peer_mac = parse_mac(&v()?)?,
            "--port" => o.port = v()?.parse().map_err(|e| format!("--port: {e}"))?,
            "--iters" => o.iters = v()?.parse().map_err(|e| format!("--iters: {e}"))?,
            "--len" => o.rdma_len = v()?.parse().map_err(|e| format!("--len: {e}"))?,
            "--bdf" => o.bdf = Some(v()?),
            "--checks" => o.checks = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if matches!(o.mode.as_str(), "unbound" | "denied") {
        return Ok(o);
    }
    if o.ip.is_unspecified() {
        return Err("--ip is required (the NIC's address on the fabric)".into());
    }
    match o.mode.as_str() {
        "loopback" | "server" | "irq" | "efa-loopback" => {}
        "client" if o.peer.is_some() => {}
        "client" => return Err("--mode client needs --peer".into()),
        m => {
            return Err(format!(
                "--mode {m:?}: want loopback, client, server, irq, efa-loopback, unbound or denied"
            ));
        }
    }
    Ok(o)
}

fn read_hex(path: &std::path::Path) -> Option<u16> {
    let s = std::fs::read_to_string(path).ok()?;
    u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// The first PCI function with ivshmem's IDs.
fn find_ivshmem() -> Result<String, String> {
    let rd = std::fs::read_dir("/sys/bus/pci/devices")
        .map_err(|e| format!("/sys/bus/pci/devices: {e}"))?;
    let mut found: Vec<String> = rd
        .flatten()
        .filter(|e| {
            read_hex(&e.path().join("vendor")) == Some(IVSHMEM.0)
                && read_hex(&e.path().join("device")) == Some(IVSHMEM.1)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    found
        .into_iter()
        .next()
        .ok_or_else(|| "no ivshmem function (1af4:1110) on the PCI bus".into())
}

fn step(t0: Instant, what: &str) {
    println!("VFIO-GUEST [{:7.3}s] {what}", t0.elapsed().as_secs_f64());
}

fn bar2() -> AttachOptions {
    AttachOptions {
        bar: 2,
        ..AttachOptions::default()
    }
}

/// Attaches `bdf` with `opts` and checks the error is the one `want` accepts.
fn expect_error(
    name: &str,
    bdf: &str,
    opts: &AttachOptions,
    want: impl Fn(&AttachError) -> bool,
) -> Result<(), String> {
    match attach(bdf, opts) {
        Ok(d) => Err(format!("CHECK {name}: attach succeeded: {d:?}")),
        Err(e) if want(&e) => {
            println!("VFIO-GUEST CHECK {name} ok: {e}");
            Ok(())
        }
        Err(e) => Err(format!("CHECK {name}: unexpected error {e}")),
    }
}

/// The error checks that need no attached device.
fn checks_before(bdf: &str) -> Result<(), String> {
    // ivshmem-plain has BAR0 (registers) and BAR2 (memory) only
    let bar1 = AttachOptions {
        bar: 1,
        ..AttachOptions::default()
    };
    expect_error("no-such-bar", bdf, &bar1, |e| {
        *e == AttachError::NoSuchBar { bar: 1 }
    })?;
    // the same group as an unprivileged user
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = std::process::Command::new(exe)
        .args(["--mode", "denied", "--bdf", bdf])
        .uid(65534)
        .gid(65534)
        .output()
        .map_err(|e| format!("running as uid 65534: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!(
            "CHECK denied: the unprivileged run exited {}",
            out.status
        ));
    }
    Ok(())
}

/// DMA memory in 4 KiB pages, each mapped for the device at its own physical address.
fn check_small_pages(dev: &vfio_attach::Attached) -> Result<(), String> {
    let dma = dev
        .dma(DmaOptions {
            iova: IovaPolicy::PhysicalAddress,
            hugepages: HugePages::Never,
            block_size: 64 << 10,
            ..DmaOptions::default()
        })
        .map_err(|e| format!("CHECK small-pages: {e}"))?;
    let mut regions = Vec::new();
    let mut pas = Vec::new();
    for _ in 0..3 {
        let r = dma
            .try_allocate(4096, 4096)
            .map_err(|e| format!("CHECK small-pages: allocate: {e}"))?;
        let pa = vfio_attach::pagemap::physical_address(r.va.as_ptr() as usize)
            .map_err(|e| format!("CHECK small-pages: pagemap: {e}"))?;
        if pa != r.iova {
            return Err(format!(
                "CHECK small-pages: IOVA {:#x} but the page is at {pa:#x}",
                r.iova
            ));
        }
        pas.push(pa);
        regions.push(r);
    }
    let refused = match dma.try_allocate(8192, 4096) {
        Err(e @ vfio_attach::VfioDmaError::NotContiguous { .. }) => e.to_string(),
        other => return Err(format!("CHECK small-pages: 8 KiB request gave {other:?}")),
    };
    let st = dma.stats();
    for r in regions {
        // SAFETY: each region came from this allocator's try_allocate and is freed once;
        // nothing refers to it (no device was given its address).
        unsafe { nic_hal::DmaAllocator::deallocate(&*dma, r) };
    }
    if let Some(e) = dma.last_error() {
        return Err(format!("CHECK small-pages: {e}"));
    }
    drop(dma);
    println!(
        "VFIO-GUEST CHECK small-pages ok: 3 pages at IOVA = PA {pas:x?}, {} blocks, {} map calls, 8 KiB refused: {refused}",
        st.blocks, st.map_calls
    );
    Ok(())
}

fn run(o: &Opts, t0: Instant) -> Result<Report, String> {
    let bdf = match &o.bdf {
        Some(b) => b.clone(),
        None => find_ivshmem()?,
    };
    if o.checks {
        checks_before(&bdf)?;
    }
    let dev = attach(&bdf, &bar2()).map_err(|e| format!("attach {bdf}: {e}"))?;
    let bar = dev.bar();
    if o.checks {
        expect_error("busy", &bdf, &bar2(), |e| {
            matches!(e, AttachError::Busy { .. })
        })?;
        check_small_pages(&dev)?;
    }
    step(
        t0,
        &format!(
            "attach {bdf} ok: {:04x}:{:04x} iommu_group {} bar2 {:#x} bytes, reset {}, command {:#06x}",
            dev.vendor_id(),
            dev.device_id(),
            dev.iommu_group(),
            bar.len(),
            dev.was_reset(),
            dev.command()
        ),
    );
    let dma = dev
        .dma(DmaOptions {
            iova: IovaPolicy::PhysicalAddress,
            hugepages: HugePages::Required,
            ..DmaOptions::default()
        })
        .map_err(|e| format!("DMA allocator: {e}"))?;
    let alloc: Arc<dyn DmaAllocator> = dma.clone();
    let clock = SpinClock::new();
    if o.mode == "efa-loopback" {
        let r = efa_loopback(o, &bar, alloc.clone(), clock, t0);
        let rel = release(dma, alloc, None, dev, t0, 0, 0);
        let rep = r?;
        rel?;
        return Ok(rep);
    }
    let irqs = if o.mode == "irq" {
        let i = dev.interrupts().map_err(|e| format!("MSI-X: {e}"))?;
        step(
            t0,
            &format!("MSI-X ok: {} vectors with an eventfd each", i.vectors()),
        );
        Some(Arc::new(i))
    } else {
        None
    };
    let platform = GuestPlatform {
        clock,
        irqs: irqs.clone(),
    };
    let config = mlx5::Config {
        init_timeout_ns: 30_000_000_000,
        cmd_timeout_ns: 30_000_000_000,
        bar_size: bar.len() as u64,
        vendor_id: dev.vendor_id(),
        device_id: dev.device_id(),
        // With interrupts, only an interrupt (or the timeout) ends a wait's sleep.
        irq_recheck_ns: if irqs.is_some() {
            u64::MAX
        } else {
            mlx5::Config::default().irq_recheck_ns
        },
        ..mlx5::Config::default()
    };
    let nic: Dev =
        mlx5::Device::probe(bar, alloc.clone(), platform, config).map_err(|e| {
            match dma.last_error() {
                Some(d) => format!("mlx5 probe: {e} (DMA allocator: {d})"),
                None => format!("mlx5 probe: {e}"),
            }
        })?;
    let mac = nic.mac().map_err(|e| format!("query MAC: {e}"))?;
    nic.set_roce_gid(0, Gid::from_ipv4(o.ip.octets()).0, mac)
        .map_err(|e| format!("set GID: {e}"))?;
    let st = dma.stats();
    step(
        t0,
        &format!(
            "mlx5 probe ok: mac {mac:02x?}, gid {}, DMA {} blocks ({} huge), {} map calls",
            o.ip, st.blocks, st.hugetlb_blocks, st.map_calls
        ),
    );
    if o.mode == "irq" {
        let r = irq_wait(&nic, irqs.as_deref(), mac, o.ip, t0);
        let shut = nic.shutdown();
        let rel = release(dma, alloc, irqs, dev, t0, 0, 0);
        // The scenario's own error first: a failed step leaves objects for shutdown.
        let rep = r?;
        shut.map_err(|e| format!("mlx5 shutdown: {e}"))?;
        rel?;
        return Ok(rep);
    }
    let cm: Cm<Dev> = Cm::new(
        clock,
        CmConfig {
            wait_limit_ns: Some(60_000_000_000),
            mad_recv_slots: 32,
            mad_send_slots: 16,
            ..CmConfig::default()
        },
    );
    let devid = cm
        .add_device(nic, mac)
        .map_err(|(e, _)| format!("cm add_device: {e}"))?;
    if let Some(p) = o.peer {
        cm.add_neighbor(p, Neighbor { mac: o.peer_mac });
    }
    let ex = Exchange {
        iters: o.iters,
        rdma_len: o.rdma_len,
        ..Exchange::default()
    };
    let ip = o.ip.to_string();
    let r = match o.mode.as_str() {
        "loopback" => {
            let l = listen(&cm, &ip, o.port)?;
            let r = (|| {
                let id = client_ep(&cm, &ip, &ip, o.port)?;
                step(t0, "loopback: listening, connecting to self");
                let r = std::thread::scope(|s| {
                    let srv = s.spawn(|| serve(&l, &ex));
                    let c = run_client(&id, &ex);
                    let sr = srv
                        .join()
                        .unwrap_or_else(|_| Err("server thread panicked".into()));
                    match (c, sr) {
                        (Ok(c), Ok(s)) => Ok(Report {
                            sends: s.sends,
                            reads: s.reads,
                            writes: c.writes,
                            rdma_bytes: c.rdma_bytes,
                        }),
                        (Err(e), _) => Err(format!("client: {e}")),
                        (_, Err(e)) => Err(format!("server: {e}")),
                    }
                });
                id.destroy_ep();
                r
            })();
            l.destroy_ep();
            r
        }
        "server" => {
            let l = listen(&cm, &ip, o.port)?;
            step(t0, &format!("server: listening on {ip}:{}", o.port));
            let r = serve(&l, &ex);
            l.destroy_ep();
            r
        }
        _ => {
            let peer = o.peer.map(|p| p.to_string()).unwrap_or_default();
            let id = client_ep(&cm, &ip, &peer, o.port)?;
            step(t0, &format!("client: connecting to {peer}:{}", o.port));
            let r = run_client(&id, &ex);
            id.destroy_ep();
            r
        }
    };
    let (ids, chans) = cm.live();
    let nic = cm
        .remove_device(devid)
        .map_err(|e| format!("cm remove_device: {e}"))?;
    nic.shutdown().map_err(|e| format!("mlx5 shutdown: {e}"))?;
    release(dma, alloc, irqs, dev, t0, ids, chans).and(r)
}

/// Checks that every DMA buffer came back and releases the allocator, the interrupts and the
/// device, in that order.
fn release(
    dma: Arc<vfio_attach::VfioDma>,
    alloc: Arc<dyn DmaAllocator>,
    irqs: Option<Arc<VfioInterrupts>>,
    dev: vfio_attach::Attached,
    t0: Instant,
    ids: usize,
    chans: usize,
) -> Result<(), String> {
    let st = dma.stats();
    step(
        t0,
        &format!(
            "teardown ok: cm ids {ids} channels {chans}; DMA live buffers {} ({} bytes), {} map / {} unmap calls",
            st.live_buffers, st.live_bytes, st.map_calls, st.unmap_calls
        ),
    );
    if let Some(e) = dma.last_error() {
        return Err(format!("DMA allocator reported: {e}"));
    }
    if st.live_buffers != 0 {
        return Err(format!(
            "{} DMA buffers still allocated after teardown",
            st.live_buffers
        ));
    }
    // The last reference: its drop unmaps every block from the IOMMU (a failure is printed
    // as a `vfio-attach:` line, which the harness looks for).
    drop(alloc);
    match Arc::try_unwrap(dma) {
        Ok(d) => drop(d),
        Err(_) => return Err("the DMA allocator is still referenced after teardown".into()),
    }
    drop(irqs);
    drop(dev);
    step(t0, "DMA allocator and device released");
    Ok(())
}

fn main() -> ExitCode {
    let t0 = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(e) => {
            println!("VFIO-GUEST RESULT - FAIL bad command line: {e}");
            return ExitCode::from(2);
        }
    };
    step(t0, &format!("start: {o:?}"));
    if matches!(o.mode.as_str(), "unbound" | "denied") {
        let bdf = o
            .bdf
            .clone()
            .or_else(|| find_ivshmem().ok())
            .unwrap_or_default();
        let r = if o.mode == "unbound" {
            expect_error("not-bound", &bdf, &bar2(), |e| {
                matches!(e, AttachError::NotBound { .. })
            })
        } else {
            expect_error("denied", &bdf, &bar2(), |e| {
                matches!(e, AttachError::PermissionDenied { .. })
            })
        };
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                println!("VFIO-GUEST {e}");
                ExitCode::from(1)
            }
        };
    }
    match run(&o, t0) {
        Ok(r) => {
            println!(
                "VFIO-GUEST RESULT {} ok sends={} reads={} writes={} rdma_bytes={}",
                o.mode, r.sends, r.reads, r.writes, r.rdma_bytes
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("VFIO-GUEST RESULT {} FAIL {e}", o.mode);
            ExitCode::from(1)
        }
    }
}

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: all-zero is a valid `rusage` (integers and timevals); getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live, writable rusage; RUSAGE_THREAD names the calling thread.
    let r = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    if r != 0 {
        return Duration::MAX;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// An error of a verbs call, as a message.
fn e<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err:?}")
}

/// Bytes of the SEND in `--mode irq`.
const IRQ_LEN: usize = 3000;

/// `--mode irq`: a completion wait that sleeps until the channel's MSI-X vector fires.
fn irq_wait(
    nic: &Dev,
    irqs: Option<&VfioInterrupts>,
    mac: [u8; 6],
    ip: Ipv4Addr,
    t0: Instant,
) -> Result<Report, String> {
    let irqs = irqs.ok_or("no interrupts")?;
    let mut ch = Provider::create_comp_channel(nic).map_err(e("create_comp_channel"))?;
    let vector = ch.vector();
    if vector == 0 {
        return Err("the completion channel got no vector of its own".into());
    }
    let pd = Provider::alloc_pd(nic).map_err(e("alloc_pd"))?;
    let cq_a = Provider::create_cq(nic, 15, 0, None).map_err(e("create_cq"))?;
    let cq_b = Provider::create_cq(nic, 15, 0xfeed, Some(&ch)).map_err(e("create_cq"))?;
    let mem: Buffer = Provider::alloc_buf(nic, 2 * IRQ_LEN).map_err(e("alloc_buf"))?;
    let mr =
        Provider::reg_mr(nic, &pd, mem.clone(), AccessFlags::LOCAL_WRITE).map_err(e("reg_mr"))?;
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = |cq| {
        Provider::create_qp(
            nic,
            &pd,
            &QpInitAttr {
                qp_type: QpType::Rc,
                send_cq: cq,
                recv_cq: cq,
                srq: None,
                cap,
                sq_sig_all: false,
            },
        )
        .map(|(q, _)| q)
        .map_err(e("create_qp"))
    };
    let mut qa = qp(&cq_a)?;
    let mut qb = qp(&cq_b)?;
    let params = |qpn| RcParams {
        access: AccessFlags::REMOTE_WRITE,
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4(ip.octets()),
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: mac,
            ..AhAttr::default()
        },
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: qpn,
        min_rnr_timer: 1,
        ..RcParams::default()
    };
    let (na, nb) = (qa.qpn(), qb.qpn());
    verbs::rc::connect(nic, &mut qa, &params(nb)).map_err(e("connect A"))?;
    verbs::rc::connect(nic, &mut qb, &params(na)).map_err(e("connect B"))?;
    let sg_b = [Sge {
        addr: mr.addr() + IRQ_LEN as u64,
        length: IRQ_LEN as u32,
        lkey: mr.lkey(),
    }];
    Provider::post_recv(
        nic,
        &mut qb,
        &[RecvWr {
            wr_id: 1,
            sg_list: &sg_b,
        }],
    )
    .map_err(e("post_recv"))?;
    Provider::req_notify_cq(nic, &cq_b, false).map_err(e("req_notify_cq"))?;
    let data = linux_guest::pattern(0x1e9, IRQ_LEN);
    mem.write(0, &data)
        .map_err(|x| format!("dma write: {x:?}"))?;
    let before = irqs.count(vector);
    step(
        t0,
        &format!("irq: waiting on vector {vector} (count {before})"),
    );
    let (ev, wall, cpu) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let cpu0 = thread_cpu();
            let w0 = Instant::now();
            let ev = nic.wait_cq_event(&mut ch, 60_000_000_000);
            (ev, w0.elapsed(), thread_cpu().saturating_sub(cpu0))
        });
        std::thread::sleep(Duration::from_millis(1500));
        let sg_a = [Sge {
            addr: mr.addr(),
            length: IRQ_LEN as u32,
            lkey: mr.lkey(),
        }];
        let posted = Provider::post_send(
            nic,
            &mut qa,
            &[SendWr {
                wr_id: 10,
                opcode: WrOpcode::Send,
                flags: SendFlags::SIGNALED,
                sg_list: &sg_a,
                remote: RemoteOp::None,
                ..SendWr::default()
            }],
        );
        let r = waiter
            .join()
            .map_err(|_| "the waiting thread panicked".to_string());
        posted.map_err(e("post_send"))?;
        r
    })?;
    let after = irqs.count(vector);
    let counts: Vec<u64> = (0..irqs.vectors()).map(|v| irqs.count(v)).collect();
    step(t0, &format!("irq: wait over, vector counts {counts:?}"));
    let ev = match ev.map_err(|x| format!("wait_cq_event: {x}"))? {
        Some(ev) => ev,
        None => {
            let late = nic.get_cq_event(&mut ch);
            return Err(format!(
                "the wait timed out: no interrupt (vector counts {counts:?}; the channel now \
                 has {late:?})"
            ));
        }
    };
    if (ev.cqn, ev.cq_context) != (cq_b.cqn(), 0xfeed) {
        return Err(format!(
            "event for CQ {:#x} context {:#x}",
            ev.cqn, ev.cq_context
        ));
    }
    println!(
        "VFIO-GUEST IRQ woken ok: vector {vector} fired {} times; wait {} us, waiting thread CPU {} us (busy {:.2}%)",
        after - before,
        wall.as_micros(),
        cpu.as_micros(),
        100.0 * cpu.as_secs_f64() / wall.as_secs_f64().max(1e-9)
    );
    let poll_one = |cq: &mlx5::Cq| -> Result<verbs::WorkCompletion, String> {
        let w0 = Instant::now();
        loop {
            let mut wc = [verbs::WorkCompletion::default(); 1];
            if Provider::poll_cq(nic, cq, &mut wc).map_err(e("poll_cq"))? == 1 {
                return Ok(wc[0]);
            }
            if w0.elapsed() > Duration::from_secs(30) {
                return Err("no completion".into());
            }
            std::thread::yield_now();
        }
    };
    let wc = poll_one(&cq_b)?;
    if (wc.wr_id, wc.status, wc.opcode, wc.byte_len)
        != (1, WcStatus::Success, WcOpcode::Recv, IRQ_LEN as u32)
    {
        return Err(format!("receive completion {wc:?}"));
    }
    let wc = poll_one(&cq_a)?;
    if wc.status != WcStatus::Success {
        return Err(format!("send completion {wc:?}"));
    }
    let mut got = vec![0u8; IRQ_LEN];
    mem.read(IRQ_LEN, &mut got)
        .map_err(|x| format!("dma read: {x:?}"))?;
    linux_guest::compare("SEND", &got, &data)?;
    Provider::destroy_qp(nic, qa).map_err(e("destroy_qp"))?;
    Provider::destroy_qp(nic, qb).map_err(e("destroy_qp"))?;
    Provider::dereg_mr(nic, mr).map_err(e("dereg_mr"))?;
    Provider::destroy_cq(nic, cq_a).map_err(e("destroy_cq"))?;
    Provider::destroy_cq(nic, cq_b).map_err(e("destroy_cq"))?;
    Provider::destroy_comp_channel(nic, ch).map_err(e("destroy_comp_channel"))?;
    Provider::dealloc_pd(nic, pd).map_err(e("dealloc_pd"))?;
    drop(mem);
    Ok(Report {
        sends: 1,
        ..Report::default()
    })
}

// ------------------------------------------------------------------ EFA

/// A window of the attached BAR2 as one BAR of the EFA driver.
struct Window {
    bar: nic_hal::MmioBar,
    _map: Arc<VfioBar>,
}

impl Window {
    fn new(map: &Arc<VfioBar>, off: u32, len: u32) -> Result<Window, String> {
        let (off, len) = (off as usize, len as usize);
        let base = (len > 0)
            .then(|| nic_hal::RegisterIo::mapped(&**map, off, len))
            .flatten()
            .ok_or_else(|| format!("EFA window {off:#x}+{len:#x} outside BAR2"))?;
        // SAFETY: `base..base+len` lies inside BAR2's mapping (`mapped` checked the range),
        // which this window keeps alive (`_map`) and which no Rust reference covers.
        let bar = unsafe { nic_hal::MmioBar::new(base, len) };
        Ok(Window {
            bar,
            _map: map.clone(),
        })
    }
}

impl nic_hal::RegisterIo for Window {
    fn read32(&self, offset: usize) -> u32 {
        self.bar.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.bar.write32(offset, value)
    }
    fn write64(&self, offset: usize, value: u64) {
        self.bar.write64(offset, value)
    }
    fn write_block(&self, offset: usize, data: &[u8]) {
        self.bar.write_block(offset, data)
    }
    fn mapped(&self, offset: usize, len: usize) -> Option<std::ptr::NonNull<u8>> {
        self.bar.mapped(offset, len)
    }
}

type EfaDev = efa::Device<Window, SpinClock>;

/// The emulated EFA's identity page in BAR2.
const EFA_HEADER_OFF: usize = 0x1000;

fn efa_loopback(
    o: &Opts,
    bar: &Arc<VfioBar>,
    alloc: Arc<dyn DmaAllocator>,
    clock: SpinClock,
    t0: Instant,
) -> Result<Report, String> {
    use nic_hal::RegisterIo;
    let mut h = [0u8; 40];
    for (i, c) in h.chunks_mut(4).enumerate() {
        c.copy_from_slice(&bar.read32(EFA_HEADER_OFF + i * 4).to_le_bytes());
    }
    if h[..8] != *b"EFAEMU01" {
        return Err("no EFA identity page in BAR2 (nic-emud --family efa?)".into());
    }
    let w = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let (vendor, device) = (
        u16::from_le_bytes([h[8], h[9]]),
        u16::from_le_bytes([h[10], h[11]]),
    );
    if !efa::is_supported_pci(vendor, device) {
        return Err(format!("{vendor:04x}:{device:04x} is not an EFA"));
    }
    let config = efa::Config {
        device_id: device,
        admin_timeout_ns: Some(30_000_000_000),
        ..efa::Config::default()
    };
    let mut nic: EfaDev = efa::Device::probe(Window::new(bar, w(12), w(16))?, alloc, clock, config)
        .map_err(|e| format!("EFA probe: {e:?}"))?;
    let bars = if u32::from(nic.attributes().db_bar) != w(20) {
        Err("the doorbell BAR differs from the identity page's".to_string())
    } else {
        Window::new(bar, w(32), w(36)).and_then(|m| Ok((m, Window::new(bar, w(24), w(28))?)))
    };
    match bars {
        Ok((m, d)) => nic.attach_data_bars(m, d),
        Err(e) => {
            let _ = nic.shutdown();
            return Err(e);
        }
    }
    step(
        t0,
        &format!(
            "EFA probe ok: {vendor:04x}:{device:04x}, firmware {}, {} QPs",
            nic.attributes().fw_version_text(),
            nic.attributes().max_qp
        ),
    );
    let r = efa_traffic(o, &nic, clock, t0);
    let shut = nic.shutdown().map_err(|e| format!("EFA shutdown: {e:?}"));
    let rep = r?;
    shut?;
    Ok(rep)
}

/// The EFA loopback exchange (`efa::loopback`), a line per part that passed.
fn efa_traffic(o: &Opts, nic: &EfaDev, clock: SpinClock, t0: Instant) -> Result<Report, String> {
    use efa::loopback::{self, LoopbackConfig, Progress};
    let cfg = LoopbackConfig {
        qkey: 0x4242,
        timeout_ns: 60_000_000_000,
        gid: Some(Gid::from_ipv4(o.ip.octets())),
        ..LoopbackConfig::default()
    };
    let r = loopback::run(nic, &clock, &cfg, &mut |p| match p {
        Progress::Sent {
            qp_type,
            messages,
            len,
        } => step(
            t0,
            &format!("EFA {qp_type:?}: {messages} SENDs of {len} bytes to itself, data checked"),
        ),
        Progress::Read { len } => step(
            t0,
            &format!("EFA Srd: RDMA READ of {len} bytes from itself, data checked"),
        ),
    })
    .map_err(|e| {
        format!(
            "EFA loopback: {e} (refused completions {:?})",
            nic.bad_cqes()
        )
    })?;
    Ok(Report {
        sends: r.sends,
        reads: r.reads,
        writes: 0,
        rdma_bytes: r.read_bytes,
    })
}

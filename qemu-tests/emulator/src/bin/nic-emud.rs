//! `nic-emud`: an emulated NIC as a host process behind a QEMU guest: the ConnectX-class NIC
//! (default, `--family mlx5`) or the AWS EFA (`--family efa`, see below).
//!
//! QEMU gives the guest an `ivshmem-plain` PCI function (1af4:1110) whose BAR2 is a
//! shared-memory file: that file is the NIC's BAR0 (offset 0), which `nic-emud` maps too.
//! With `--ivshmem-server SOCKET` the function is an `ivshmem-doorbell` instead: `nic-emud`
//! serves QEMU's ivshmem protocol on that UNIX socket (the BAR file's descriptor and one
//! eventfd per MSI-X vector), and every vector the device raises (an armed EQ received an
//! EQE) becomes a real MSI-X message in the guest (`docs/ivshmem-doorbell.md`).
//! Guest RAM is a `memory-backend-file` with `share=on`, which `nic-emud` maps for DMA,
//! addressed by guest-physical address (QEMU 7.2 `q35` layout: RAM below 0xb000_0000 bytes
//! sits at GPA = file offset; a larger RAM has 2 GiB low and the rest at 4 GiB, right after
//! the low part in the file). DMA outside guest RAM is refused (the device records a DMA
//! fault). With a Linux guest driving the function through VFIO and no vIOMMU, IOVA = GPA,
//! so the same mapping serves. The device runs untrapped, polled on a thread of its own: the
//! command doorbell and queue address in the BAR, EQ doorbells in UAR pages, SQ/RQ/CQ
//! doorbell records in guest RAM. Its port is a UDP socket on 127/8 (the UDP fabric of
//! `roce-wire`; every NIC of one fabric uses the same UDP port number on its own address).
//!
//! With `--family efa` the BAR file holds the emulated EFA untrapped
//! (`nic_emulator::efa::Device::with_shared_bar`): its BAR0 register file at offset 0, an
//! identity page at 0x1000 (magic `EFAEMU01`, the EFA's PCI vendor and device id — the guest
//! sees ivshmem's ids on the bus —, and where the doorbell BAR and the memory BAR are in the
//! file: `nic_emulator::efa::ShmHeader`), the doorbell BAR and the memory BAR (the
//! low-latency send queues). The device finds the driver's register and doorbell writes by
//! polling; it raises no interrupts (the EFA driver polls), so `--ivshmem-server` and
//! `--fault` are mlx5 only. The default BAR size is the layout's (8 MiB); its GID is the
//! IPv4-mapped GID of `--ip` and its node GUID the EUI-64 of MAC `02:00` and the address.
//!
//! ```text
//! nic-emud --bar FILE --ram FILE --ram-size SIZE --ip 127.0.x.y --udp-port PORT
//!          [--family mlx5|efa] [--bar-size SIZE] [--profile default] [--fault SPEC]...
//!          [--ignore-stdin] [--ivshmem-server SOCKET [--vectors N]]
//!
//!   --family NAME     the device: mlx5 (default; also `connectx`) or efa
//!   --bar FILE        the ivshmem BAR file (e.g. /dev/shm/NAME); created or extended to
//!                     --bar-size if needed (a larger existing file is an error)
//!   --bar-size SIZE   BAR size (default 32M, the profile's BAR0, for mlx5; 8M, the
//!                     windows' layout, for efa; a power of two for QEMU)
//!   --ram FILE        the guest RAM backend file; created or extended to --ram-size
//!   --ram-size SIZE   guest RAM size, = QEMU's -m and the memory-backend-file size
//!   --ip ADDR         the NIC's IPv4 address on the UDP fabric (127.0.0.0/8 only)
//!   --udp-port PORT   the fabric's UDP port number
//!   --profile NAME    device profile: `default` (the only one so far)
//!   --fault SPEC      a fault knob (repeatable):
//!                       refuse-bringup           ENABLE_HCA fails: status 0x4
//!                                                (BAD_SYS_STATE), syndrome 0x0bad0001
//!                       fail-cmd=OP[:ST[:SYN]]   command OP (PRM name such as INIT_HCA,
//!                                                or a number) fails with status ST
//!                                                (default 0x4) and syndrome SYN (default 0)
//!                       fail-delivery=OP:ST      command OP gets delivery status ST
//!                       never-ready              `initializing` never clears
//!                       stall-commands           commands are never completed
//!   --ignore-stdin    do not exit on stdin EOF (for running in the background)
//!   --ivshmem-server SOCKET
//!                     serve QEMU's ivshmem-doorbell protocol on this UNIX socket path
//!                     (created; must not exist) and deliver the device's MSI-X vectors
//!   --vectors N       MSI-X vectors (default 8, the profile's; QEMU's `vectors=` must be
//!                     the same)
//!   -h, --help        this text
//! SIZE: a number (decimal or 0x hex) with an optional K, M or G suffix (binary units).
//! ```
//!
//! Once the device polls, one line goes to stdout:
//! `READY nic-emud bar=FILE bar_size=N ram=FILE ram_size=N ip=ADDR udp_port=PORT`, followed
//! by ` ivshmem_server=SOCKET vectors=N` with `--ivshmem-server` (QEMU may connect then), or
//! ` family=efa pci=1d0f:efa1` for the EFA.
//! It exits with status 0 on stdin EOF (unless `--ignore-stdin`) or on SIGTERM / SIGINT,
//! after stopping the poller; a summary goes to stderr:
//! `nic-emud: stopped; N commands, M device errors[ (first: ...)]; nothing alive|live {...}; port {...}`
//! (for the EFA, `data {...}`, its data-path counters, in place of `port`). A bad
//! command line exits with 2, a setup failure (files, socket) with 1.
//!
//! QEMU side (the BAR file and the RAM file must be the ones given here):
//!
//! ```text
//! timeout 60 qemu-system-x86_64 -machine q35,memory-backend=ram -accel tcg -m 256M \
//!   -object memory-backend-file,id=ram,size=256M,mem-path=/dev/shm/RAM,share=on \
//!   -object memory-backend-file,id=nicbar,size=32M,mem-path=/dev/shm/BAR,share=on \
//!   -device ivshmem-plain,memdev=nicbar -nic none ...
//! ```
//!
//! With `--ivshmem-server /tmp/S --vectors 8`, the BAR comes from the server instead of a
//! memory backend: `-chardev socket,path=/tmp/S,id=nicsock
//! -device ivshmem-doorbell,chardev=nicsock,vectors=8`.

use std::io::{BufRead, Write};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use firmware_interface::opcode;
use firmware_interface::status::cmd_status as cs;
use nic_emulator::host::{GuestRam, ShmBar};
use nic_emulator::ivshmem::DoorbellServer;
use nic_emulator::roce_wire::fabric::UdpFabric;
use nic_emulator::{Device, FailCommand, Faults, Live, Polled, Profile, spawn_poller};

const USAGE: &str =
    "usage: nic-emud --bar FILE --ram FILE --ram-size SIZE --ip 127.0.x.y --udp-port PORT
                [--family mlx5|efa] [--bar-size SIZE] [--profile default] [--fault SPEC]...
                [--ignore-stdin] [--ivshmem-server SOCKET [--vectors N]]
  --family NAME     mlx5 (default) or efa: the EFA's BARs are windows of the BAR file (an
                    identity page at 0x1000 says where); polled, no MSI-X, no --fault
  --bar FILE        ivshmem BAR file (NIC BAR0 at offset 0); created/extended to --bar-size
  --bar-size SIZE   BAR size (default 32M for mlx5, 8M for efa; a power of two for QEMU)
  --ram FILE        guest RAM backend file (memory-backend-file share=on); created/extended
  --ram-size SIZE   guest RAM size (= QEMU -m); q35 layout: < 0xb0000000 all low, else 2G
                    low + the rest at 4G; DMA addresses are guest-physical
  --ip ADDR         the NIC's IPv4 address on the UDP fabric (127.0.0.0/8)
  --udp-port PORT   the fabric's UDP port number
  --profile NAME    device profile: default
  --fault SPEC      refuse-bringup | fail-cmd=OP[:STATUS[:SYNDROME]] |
                    fail-delivery=OP:STATUS | never-ready | stall-commands (repeatable)
  --ignore-stdin    do not exit on stdin EOF
  --ivshmem-server SOCKET  serve QEMU's ivshmem-doorbell protocol on this UNIX socket
                    (must not exist): the guest gets MSI-X (-device ivshmem-doorbell)
  --vectors N       MSI-X vectors with --ivshmem-server (default 8; = QEMU's vectors=)
SIZE: decimal or 0x hex, optional K/M/G suffix. Prints one READY line when polling; exits 0
on stdin EOF or SIGTERM/SIGINT.";

/// `refuse-bringup`: the ENABLE_HCA status and syndrome.
const REFUSE_STATUS: u8 = cs::BAD_SYS_STATE;
const REFUSE_SYNDROME: u32 = 0x0bad_0001;

/// One fault knob from the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    FailCommand {
        opcode: u16,
        status: u8,
        syndrome: u32,
    },
    FailDelivery {
        opcode: u16,
        status: u8,
    },
    NeverReady,
    StallCommands,
}

/// The device model behind the BAR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// The ConnectX-class NIC (the mlx5 driver's).
    Mlx5,
    /// The AWS EFA (the EFA driver's).
    Efa,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Options {
    family: Family,
    bar: PathBuf,
    bar_size: u64,
    ram: PathBuf,
    ram_size: u64,
    ip: Ipv4Addr,
    udp_port: u16,
    faults: Vec<Fault>,
    ignore_stdin: bool,
    /// `--ivshmem-server`: the socket path.
    server: Option<PathBuf>,
    /// MSI-X vectors of the function.
    vectors: u16,
}

#[derive(Debug, PartialEq, Eq)]
enum CliError {
    Help,
    Bad(String),
}

fn bad<T>(m: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Bad(m.into()))
}

/// A number: decimal or `0x` hex.
fn parse_num(s: &str) -> Option<u64> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

/// A size with an optional K/M/G suffix.
fn parse_size(s: &str) -> Option<u64> {
    let (num, shift) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 10),
        b'm' | b'M' => (&s[..s.len() - 1], 20),
        b'g' | b'G' => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    parse_num(num)?.checked_mul(1u64 << shift)
}

/// An opcode by PRM name (`INIT_HCA`, case-insensitive) or number.
fn parse_opcode(s: &str) -> Option<u16> {
    if let Some(&(op, _)) = opcode::ALL.iter().find(|(_, n)| n.eq_ignore_ascii_case(s)) {
        return Some(op);
    }
    parse_num(s).and_then(|v| u16::try_from(v).ok())
}

fn parse_u8(s: &str) -> Option<u8> {
    parse_num(s).and_then(|v| u8::try_from(v).ok())
}

fn parse_fault(s: &str) -> Result<Fault, CliError> {
    let (name, arg) = match s.split_once('=') {
        Some((n, a)) => (n, Some(a)),
        None => (s, None),
    };
    match (name, arg) {
        ("refuse-bringup", None) => Ok(Fault::FailCommand {
            opcode: opcode::ENABLE_HCA,
            status: REFUSE_STATUS,
            syndrome: REFUSE_SYNDROME,
        }),
        ("never-ready", None) => Ok(Fault::NeverReady),
        ("stall-commands", None) => Ok(Fault::StallCommands),
        ("fail-cmd", Some(a)) => {
            let mut it = a.split(':');
            let op = it.next().unwrap_or("");
            let opcode =
                parse_opcode(op).ok_or_else(|| CliError::Bad(format!("unknown opcode {op:?}")))?;
            let status = match it.next() {
                Some(v) => parse_u8(v).ok_or_else(|| CliError::Bad(format!("bad status {v:?}")))?,
                None => cs::BAD_SYS_STATE,
            };
            let syndrome = match it.next() {
                Some(v) => parse_num(v)
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or_else(|| CliError::Bad(format!("bad syndrome {v:?}")))?,
                None => 0,
            };
            if it.next().is_some() {
                return bad(format!("fail-cmd takes OP[:STATUS[:SYNDROME]], got {a:?}"));
            }
            if status == cs::OK {
                return bad("fail-cmd: status 0 is success");
            }
            Ok(Fault::FailCommand {
                opcode,
                status,
                syndrome,
            })
        }
        ("fail-delivery", Some(a)) => {
            let Some((op, st)) = a.split_once(':') else {
                return bad(format!("fail-delivery takes OP:STATUS, got {a:?}"));
            };
            let opcode =
                parse_opcode(op).ok_or_else(|| CliError::Bad(format!("unknown opcode {op:?}")))?;
            let status = parse_u8(st).ok_or_else(|| CliError::Bad(format!("bad status {st:?}")))?;
            if status == 0 {
                return bad("fail-delivery: delivery status 0 is success");
            }
            Ok(Fault::FailDelivery { opcode, status })
        }
        _ => bad(format!("unknown fault {s:?}")),
    }
}

fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut bar = None;
    let mut ram = None;
    let mut ram_size = None;
    let mut bar_size = None;
    let mut family = Family::Mlx5;
    let mut ip = None;
    let mut udp_port = None;
    let mut faults = Vec::new();
    let mut ignore_stdin = false;
    let mut server = None;
    let mut vectors = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| CliError::Bad(format!("option {a} needs a value")))
        };
        match a.as_str() {
            "-h" | "--help" => return Err(CliError::Help),
            "--bar" => bar = Some(PathBuf::from(value()?)),
            "--ram" => ram = Some(PathBuf::from(value()?)),
            "--ram-size" => {
                let v = value()?;
                ram_size =
                    Some(parse_size(&v).ok_or_else(|| CliError::Bad(format!("bad size {v:?}")))?);
            }
            "--bar-size" => {
                let v = value()?;
                bar_size =
                    Some(parse_size(&v).ok_or_else(|| CliError::Bad(format!("bad size {v:?}")))?);
            }
            "--family" => {
                family = match value()?.as_str() {
                    "mlx5" | "connectx" => Family::Mlx5,
                    "efa" => Family::Efa,
                    v => return bad(format!("unknown family {v:?} (known: mlx5, efa)")),
                }
            }
            "--ip" => {
                let v = value()?;
                let addr: Ipv4Addr = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("bad address {v:?}")))?;
                if !addr.is_loopback() {
                    return bad(format!("{addr} is not in 127.0.0.0/8"));
                }
                ip = Some(addr);
            }
            "--udp-port" => {
                let v = value()?;
                let p: u16 = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("bad port {v:?}")))?;
                if p == 0 {
                    return bad("--udp-port 0");
                }
                udp_port = Some(p);
            }
            "--profile" => {
                let v = value()?;
                if v != "default" {
                    return bad(format!("unknown profile {v:?} (known: default)"));
                }
            }
            "--fault" => faults.push(parse_fault(&value()?)?),
            "--ignore-stdin" => ignore_stdin = true,
            "--ivshmem-server" => server = Some(PathBuf::from(value()?)),
            "--vectors" => {
                let v = value()?;
                let n: u16 = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("bad vector count {v:?}")))?;
                // QEMU's MSI-X table holds at most 2048 entries.
                if n == 0 || n > 2048 {
                    return bad("--vectors must be between 1 and 2048");
                }
                vectors = Some(n);
            }
            other => return bad(format!("unknown option {other:?}")),
        }
    }
    let missing = |n: &str| CliError::Bad(format!("{n} is required"));
    let efa_len = efa_layout().len as u64;
    let bar_size = bar_size.unwrap_or(match family {
        Family::Mlx5 => Profile::default().bar_size as u64,
        Family::Efa => efa_len,
    });
    if family == Family::Efa {
        if !faults.is_empty() {
            return bad("--fault is for the mlx5 family (the EFA has none here)");
        }
        if server.is_some() {
            return bad("--ivshmem-server is for the mlx5 family (the EFA is polled: no MSI-X)");
        }
        if bar_size < efa_len {
            return bad(format!(
                "--bar-size: the EFA's windows need {efa_len:#x} bytes"
            ));
        }
    }
    let ram_size = ram_size.ok_or_else(|| missing("--ram-size"))?;
    if ram_size == 0 || !ram_size.is_multiple_of(4096) {
        return bad("--ram-size must be a nonzero multiple of 4 KiB");
    }
    // The init segment and at least one UAR page; whole pages.
    if bar_size < 0x4000 || !bar_size.is_multiple_of(4096) || bar_size > 1 << 32 {
        return bad("--bar-size must be a multiple of 4 KiB between 16 KiB and 4 GiB");
    }
    if vectors.is_some() && server.is_none() {
        return bad("--vectors needs --ivshmem-server");
    }
    if server.is_some() && !bar_size.is_power_of_two() {
        return bad("--bar-size must be a power of two for an ivshmem-doorbell BAR");
    }
    Ok(Options {
        family,
        bar: bar.ok_or_else(|| missing("--bar"))?,
        bar_size,
        ram: ram.ok_or_else(|| missing("--ram"))?,
        ram_size,
        ip: ip.ok_or_else(|| missing("--ip"))?,
        udp_port: udp_port.ok_or_else(|| missing("--udp-port"))?,
        faults,
        ignore_stdin,
        server,
        vectors: vectors.unwrap_or(Profile::default().msix_vectors),
    })
}

fn apply(faults: &mut Faults, list: &[Fault]) {
    for f in list {
        match *f {
            Fault::FailCommand {
                opcode,
                status,
                syndrome,
            } => {
                faults.fail_command = Some(FailCommand {
                    opcode,
                    status,
                    syndrome,
                    times: None,
                })
            }
            Fault::FailDelivery { opcode, status } => faults.fail_delivery = Some((opcode, status)),
            Fault::NeverReady => faults.never_ready = true,
            Fault::StallCommands => faults.stall_commands = true,
        }
    }
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Async-signal-safe: one atomic store.
    STOP.store(true, Ordering::SeqCst);
}

/// The EFA's shared-BAR layout for the profile `nic-emud` serves.
fn efa_layout() -> nic_emulator::efa::ShmLayout {
    nic_emulator::efa::ShmLayout::for_profile(&nic_emulator::efa::Profile::default())
}

fn run(o: &Options) -> Result<(), String> {
    let bar = ShmBar::open(&o.bar, Some(o.bar_size))
        .map_err(|e| format!("bar {}: {e}", o.bar.display()))?;
    let ram =
        GuestRam::open(&o.ram, o.ram_size).map_err(|e| format!("ram {}: {e}", o.ram.display()))?;
    let port = UdpFabric::new(o.udp_port)
        .bind(o.ip)
        .map_err(|e| format!("fabric port {}:{}: {e:?}", o.ip, o.udp_port))?;
    match o.family {
        Family::Mlx5 => run_mlx5(o, bar, ram, port),
        Family::Efa => run_efa(o, bar, ram, port),
    }
}

fn run_mlx5(
    o: &Options,
    bar: ShmBar,
    ram: GuestRam,
    port: nic_emulator::roce_wire::fabric::UdpPort,
) -> Result<(), String> {
    let profile = Profile {
        ipv4: Some(o.ip),
        bar_size: o.bar_size as usize,
        msix_vectors: o.vectors,
        ..Profile::default()
    };
    let mut dev = Device::with_bar(profile, Arc::new(ram), Box::new(bar));
    apply(dev.faults(), &o.faults);
    let server = match &o.server {
        Some(path) => {
            let shm = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&o.bar)
                .map_err(|e| format!("bar {}: {e}", o.bar.display()))?;
            let s = DoorbellServer::start(path, shm, o.vectors)
                .map_err(|e| format!("ivshmem server {}: {e}", path.display()))?;
            dev.set_interrupt_sink(Some(s.sink()));
            Some(s)
        }
        None => None,
    };
    dev.attach(Box::new(port));
    let dev = Arc::new(Mutex::new(dev));
    let extra = match &server {
        Some(s) => format!(
            " ivshmem_server={} vectors={}",
            s.path().display(),
            o.vectors
        ),
        None => String::new(),
    };
    serve(o, &dev, &extra, |d| {
        let errs = d.errors();
        let live = d.live();
        let irq = match &server {
            Some(s) => format!("; interrupts {:?}", s.stats()),
            None => String::new(),
        };
        format!(
            "{} commands, {} device errors{}; {}; port {:?}{irq}",
            d.command_log().len(),
            errs.len(),
            match errs.first() {
                Some(e) => format!(" (first: {e:?})"),
                None => String::new(),
            },
            if live == Live::default() {
                "nothing alive".to_string()
            } else {
                format!("live {live:?}")
            },
            d.port_stats()
        )
    })
}

/// The emulated EFA untrapped on the BAR file (`nic_emulator::efa::ShmLayout`: registers at
/// 0, the identity page, the doorbell BAR and the memory BAR), its GID the IPv4-mapped GID of
/// `--ip`, its node GUID the EUI-64 of MAC `02:00` and the address.
fn run_efa(
    o: &Options,
    bar: ShmBar,
    ram: GuestRam,
    port: nic_emulator::roce_wire::fabric::UdpPort,
) -> Result<(), String> {
    use nic_emulator::efa;
    let ip = o.ip.octets();
    let mac = [0x02, 0, ip[0], ip[1], ip[2], ip[3]];
    let profile = efa::Profile {
        gid: nic_emulator::roce_wire::gid_from_ipv4(o.ip),
        guid: u64::from_be_bytes([
            mac[0] ^ 2,
            mac[1],
            mac[2],
            0xff,
            0xfe,
            mac[3],
            mac[4],
            mac[5],
        ]),
        ..efa::Profile::default()
    };
    let (vendor, device) = profile.pci_ids();
    let mut dev = efa::Device::with_shared_bar(profile, Arc::new(ram), Box::new(bar))?;
    dev.attach(Box::new(port));
    let dev = Arc::new(Mutex::new(dev));
    let extra = format!(" family=efa pci={vendor:04x}:{device:04x}");
    serve(o, &dev, &extra, |d| {
        let errs = d.errors();
        let live = d.live();
        format!(
            "{} commands, {} device errors{}; {}; data {:?}",
            d.command_log().len(),
            errs.len(),
            match errs.first() {
                Some(e) => format!(" (first: {e:?})"),
                None => String::new(),
            },
            if live == efa::Live::default() {
                "nothing alive".to_string()
            } else {
                format!("live {live:?}")
            },
            d.data_stats()
        )
    })
}

/// What both families share: stop on SIGTERM / SIGINT (and stdin EOF unless
/// `--ignore-stdin`), poll `dev` on a thread, print the READY line (with `extra` at its end),
/// wait, stop the poller and print `summary` of the device.
fn serve<D: Polled>(
    o: &Options,
    dev: &Arc<Mutex<D>>,
    extra: &str,
    summary: impl FnOnce(&D) -> String,
) -> Result<(), String> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        let handler: extern "C" fn(libc::c_int) = on_signal;
        // SAFETY: installs a handler that only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
    if !o.ignore_stdin {
        std::thread::Builder::new()
            .name("stdin-watch".into())
            .spawn(|| {
                let stdin = std::io::stdin();
                let mut line = String::new();
                let mut lock = stdin.lock();
                loop {
                    line.clear();
                    match lock.read_line(&mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
                STOP.store(true, Ordering::SeqCst);
            })
            .map_err(|e| format!("stdin thread: {e}"))?;
    }

    let poller = spawn_poller(dev.clone());
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "READY nic-emud bar={} bar_size={} ram={} ram_size={} ip={} udp_port={}{extra}",
            o.bar.display(),
            o.bar_size,
            o.ram.display(),
            o.ram_size,
            o.ip,
            o.udp_port
        );
        let _ = out.flush();
    }
    while !STOP.load(Ordering::SeqCst) {
        if !poller.is_running() {
            return Err("the device poller died".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    poller.stop();
    let d = dev.lock().unwrap_or_else(|e| e.into_inner());
    eprintln!("nic-emud: stopped; {}", summary(&d));
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let o = match parse(&args) {
        Ok(o) => o,
        Err(CliError::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(CliError::Bad(m)) => {
            eprintln!("nic-emud: {m}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nic-emud: {e}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Result<Options, CliError> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    const BASE: &[&str] = &[
        "--bar",
        "/dev/shm/b",
        "--ram",
        "/dev/shm/r",
        "--ram-size",
        "256M",
        "--ip",
        "127.0.5.1",
        "--udp-port",
        "45000",
    ];

    fn with(extra: &[&str]) -> Result<Options, CliError> {
        let mut v = BASE.to_vec();
        v.extend_from_slice(extra);
        p(&v)
    }

    #[test]
    fn sizes_and_numbers() {
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("4g"), Some(4 << 30));
        assert_eq!(parse_size("0x1000"), Some(4096));
        assert_eq!(parse_size("12k"), Some(12 << 10));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
        assert_eq!(parse_opcode("init_hca"), Some(opcode::INIT_HCA));
        assert_eq!(parse_opcode("0x104"), Some(opcode::ENABLE_HCA));
        assert_eq!(parse_opcode("0x10000"), None);
        assert_eq!(parse_opcode("NO_SUCH"), None);
    }

    #[test]
    fn full_command_line() {
        let o = with(&[
            "--bar-size",
            "64M",
            "--profile",
            "default",
            "--fault",
            "fail-cmd=INIT_HCA:0x3:0x1234",
            "--ignore-stdin",
        ])
        .unwrap();
        assert_eq!(o.ram_size, 256 << 20);
        assert_eq!(o.bar_size, 64 << 20);
        assert_eq!(o.ip, Ipv4Addr::new(127, 0, 5, 1));
        assert_eq!(o.udp_port, 45000);
        assert!(o.ignore_stdin);
        assert_eq!(
            o.faults,
            vec![Fault::FailCommand {
                opcode: opcode::INIT_HCA,
                status: 3,
                syndrome: 0x1234
            }]
        );
        let o = with(&[]).unwrap();
        assert_eq!(o.bar_size, 32 << 20);
        assert!(o.faults.is_empty());
        assert_eq!((o.server, o.vectors), (None, 8));
        let o = with(&["--ivshmem-server", "/tmp/s", "--vectors", "4"]).unwrap();
        assert_eq!((o.server, o.vectors), (Some(PathBuf::from("/tmp/s")), 4));
        assert_eq!(o.family, Family::Mlx5);
    }

    #[test]
    fn the_efa_family_takes_its_layout_and_refuses_mlx5_options() {
        let o = with(&["--family", "efa"]).unwrap();
        assert_eq!(o.family, Family::Efa);
        assert_eq!(o.bar_size, efa_layout().len as u64);
        assert_eq!(o.bar_size, 8 << 20);
        assert_eq!(
            with(&["--family", "connectx"]).unwrap().family,
            Family::Mlx5
        );
        for extra in [
            &["--family", "efa", "--fault", "never-ready"][..],
            &["--family", "efa", "--ivshmem-server", "/tmp/s"],
            &["--family", "efa", "--bar-size", "1M"],
            &["--family", "ib"],
        ] {
            assert!(
                matches!(with(extra), Err(CliError::Bad(_))),
                "{extra:?} accepted"
            );
        }
    }

    #[test]
    fn faults_map_to_knobs() {
        let o = with(&[
            "--fault",
            "refuse-bringup",
            "--fault",
            "never-ready",
            "--fault",
            "fail-delivery=QUERY_PAGES:0x9",
        ])
        .unwrap();
        let mut f = Faults::default();
        apply(&mut f, &o.faults);
        assert_eq!(
            f.fail_command,
            Some(FailCommand {
                opcode: opcode::ENABLE_HCA,
                status: REFUSE_STATUS,
                syndrome: REFUSE_SYNDROME,
                times: None
            })
        );
        assert!(f.never_ready && !f.stall_commands);
        assert_eq!(f.fail_delivery, Some((opcode::QUERY_PAGES, 9)));
    }

    #[test]
    fn bad_command_lines_are_refused() {
        assert_eq!(p(&["--help"]), Err(CliError::Help));
        for extra in [
            &["--ip", "10.0.0.1"][..],
            &["--udp-port", "0"],
            &["--udp-port", "70000"],
            &["--ram-size", "1000"],
            &["--bar-size", "4K"],
            &["--profile", "huge"],
            &["--fault", "explode"],
            &["--fault", "fail-cmd=NOPE"],
            &["--fault", "fail-cmd=INIT_HCA:0"],
            &["--fault", "fail-cmd=INIT_HCA:1:2:3"],
            &["--fault", "fail-delivery=INIT_HCA"],
            &["--fault"],
            &["--what"],
            &["--vectors", "4"],
            &["--ivshmem-server", "/tmp/s", "--vectors", "0"],
            &["--ivshmem-server", "/tmp/s", "--vectors", "4096"],
            &["--ivshmem-server", "/tmp/s", "--bar-size", "48M"],
        ] {
            assert!(
                matches!(with(extra), Err(CliError::Bad(_))),
                "{extra:?} accepted"
            );
        }
        // each required option
        for skip in [0, 2, 4, 6, 8] {
            let mut v = BASE.to_vec();
            v.drain(skip..skip + 2);
            assert!(matches!(p(&v), Err(CliError::Bad(_))), "{v:?} accepted");
        }
    }
}

//! The scenarios, chosen by `scenario=` on the kernel command line:
//!
//! * `hello`: console, heap, memory map, PCI scan, TSC calibration; no NIC needed.
//! * `bringup`: finds the NIC (a ConnectX function, or the emulated one behind ivshmem),
//!   brings it up, prints what it reports and tears it down. Against a `nic-emud` that
//!   refuses bring-up this reports the driver's error and fails (the failure scenario).
//! * `loopback`: bring-up, then the connection manager with both ends in this image on one
//!   thread (a passive endpoint and an asynchronous active one on the same NIC; the device
//!   delivers packets for its own address internally), SEND, RDMA WRITE and RDMA READ with
//!   the data checked, disconnect, teardown with nothing left behind.
//! * `server`: bring-up, a passive endpoint at `ip:port` (listen, get_request, accept with the
//!   addresses and keys of two buffers in the private data); a client elsewhere on the
//!   fabric RDMA-READs one (the guest's pattern), RDMA-WRITEs the other (its pattern) and
//!   SENDs a note; the guest checks the written data, then disconnects.
//! * `fault`: reads an unmapped address; the page fault handler reports it (exit 37).
//! * `irq`: MSI-X (the function must be an `ivshmem-doorbell` served by `nic-emud
//!   --ivshmem-server`): the table entries point at this CPU's APIC, the driver gets the
//!   vectors through its platform, and a completion wait halts the CPU until the completion
//!   channel's vector fires. The completion is a SEND's error completion after its ACK
//!   timeout (about half a second: the destination QP does not exist), so the wait is long
//!   enough to see the CPU asleep; the share of the wait spent outside `hlt` is printed
//!   (`CPU busy`).
//! * `nvmf-target`: the appliance. Bring-up, then an NVMe-oF target on RDMA at `ip:port`
//!   (port 4420 unless `port=` names another; RDMA_PS_TCP) serving a RAM namespace
//!   (`ns_mib=` MiB on the kernel heap, 1 to 8, default 4; 512-byte blocks) to the host at
//!   `peer=`/`peer_mac=`: admin and I/O queues (Connect, Property Get/Set, Identify, Set
//!   Features, Keep Alive, Read, Write, Flush, ...), all driven from one polling loop
//!   (`nvmf_rdma_target::PolledTarget`, the engine the threaded `nvmf-target` tool runs
//!   too). It ends once `queues=` queues (default 2: the admin queue and one I/O queue) were
//!   accepted and closed, and tears the stack down.
//! * `efa-loopback`: the emulated EFA behind ivshmem (`nic-emud --family efa`): the identity
//!   page at offset 0x1000 of the BAR names its PCI ids and where the doorbell and memory
//!   BARs are; the EFA driver probes it through those windows, creates a PD, a CQ, an SRD and
//!   a UD QP, an MR and an address handle to its own address, sends messages on both QPs and
//!   RDMA-READs its own buffer on the SRD QP, checking every completion and every byte, and
//!   tears everything down with all DMA memory returned (the exchange is `efa::loopback`).
//!
//! Other keys: `ip=` the NIC's IPv4 address (its RoCE GID; default 127.0.5.1), `port=` the
//! CM port (default 7471), `peer=` and `peer_mac=` (server: the client's address and
//! Ethernet address for the neighbour table).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::net::Ipv4Addr;
use core::ptr::NonNull;

use cm::{
    AddrInfo, Cm, CmConfig, ConnParam, EventType, Neighbor, QpInitAttr, RaiFlags, getaddrinfo,
};
use firmware_interface::pci as fpci;
use nic_hal::{DmaAllocator, DmaBuf, MmioBar};
use verbs::{Buffer, Gid, MemoryRegion, QpCap, SendFlags, WcOpcode, WcStatus};

use crate::bootinfo::{self, BootInfo, E820_RAM};
use crate::hal::{PhysDma, TscClock, calibrate_tsc};
use crate::io::rdtsc;
use crate::{kprintln, paging, pci};

type Dev = mlx5::Device<MmioBar, TscClock>;
type Id = cm::CmId<Dev>;

/// Everything a scenario needs from boot.
struct Env<'a> {
    boot: &'a BootInfo,
    clock: TscClock,
    entry_tsc: u64,
    dma: Arc<PhysDma>,
    nic: Option<(pci::Function, pci::Bar)>,
    ip: Ipv4Addr,
    port: u16,
}

impl Env<'_> {
    fn arg(&self, key: &str) -> Option<&str> {
        bootinfo::arg(&self.boot.cmdline, key)
    }

    fn us(&self, ticks: u64) -> u64 {
        self.clock.ticks_to_ns(ticks) / 1000
    }

    fn dma_dyn(&self) -> Arc<dyn DmaAllocator> {
        self.dma.clone()
    }
}

/// Runs scenario `name`.
pub fn run(boot: &BootInfo, entry_tsc: u64, name: &str) -> Result<(), String> {
    kprintln!(
        "UK: rdma-unikernel, PVH boot, cmdline '{}', image end {:#x}",
        boot.cmdline,
        crate::image_end()
    );
    for m in &boot.memmap {
        kprintln!(
            "UK: memmap {:#012x}-{:#012x} type {}",
            m.addr,
            m.addr.saturating_add(m.size),
            m.kind
        );
    }
    let hz = calibrate_tsc(20).ok_or("TSC calibration: the PIT never signalled")?;
    let clock = TscClock::new(hz);
    kprintln!("UK: TSC {} MHz", clock.hz() / 1_000_000);
    let dma = dma_region(boot)?;
    let (base, size) = dma.range();
    kprintln!(
        "UK: DMA memory {:#x}-{:#x} ({} MiB)",
        base,
        base + size,
        size >> 20
    );

    let funcs = pci::scan();
    let mut nic = None;
    for f in &funcs {
        kprintln!(
            "UK: PCI {:02x}:{:02x}.{} {:04x}:{:04x} class {:06x}",
            f.bus,
            f.dev,
            f.func,
            f.vendor,
            f.device,
            f.class
        );
        if nic.is_none()
            && (mlx5::is_supported_pci(f.vendor, f.device)
                || (f.vendor, f.device) == EMULATED_NIC_PCI)
        {
            nic = Some(*f);
        }
    }
    let nic = match nic {
        Some(f) => Some((f, map_nic(&f)?)),
        None => None,
    };
    let ip = match bootinfo::arg(&boot.cmdline, "ip") {
        Some(s) => s.parse().map_err(|_| format!("bad ip= {s:?}"))?,
        None => Ipv4Addr::new(127, 0, 5, 1),
    };
    let port = match bootinfo::arg(&boot.cmdline, "port") {
        Some(s) => s.parse().map_err(|_| format!("bad port= {s:?}"))?,
        None => 7471,
    };
    let env = Env {
        boot,
        clock,
        entry_tsc,
        dma,
        nic,
        ip,
        port,
    };
    match name {
        "hello" => hello(&env),
        "bringup" => bringup(&env),
        "loopback" => loopback(&env),
        "server" => server(&env),
        "fault" => fault(),
        "irq" => irq_wait(&env),
        "nvmf-target" => nvmf_target(&env),
        "efa-loopback" => efa_loopback(&env),
        other => Err(format!("unknown scenario {other:?}")),
    }
}

/// DMA memory: the RAM after the image, up to 1 MiB below the end of the RAM range that
/// holds it (the firmware keeps tables at the top of low RAM), below 4 GiB.
fn dma_region(boot: &BootInfo) -> Result<Arc<PhysDma>, String> {
    const TWO_MIB: u64 = 2 << 20;
    let start = crate::image_end().div_ceil(TWO_MIB) * TWO_MIB;
    let r = boot
        .memmap
        .iter()
        .find(|m| m.kind == E820_RAM && m.addr <= start && start < m.addr.saturating_add(m.size))
        .ok_or("the memory map has no RAM after the image")?;
    let end = r
        .addr
        .saturating_add(r.size)
        .min(1 << 32)
        .saturating_sub(1 << 20);
    if end <= start + (16 << 20) {
        return Err(format!(
            "too little RAM for DMA: {:#x}..{:#x} (give the guest more memory)",
            start, end
        ));
    }
    // SAFETY: the range is RAM per the memory map, above the image and its .bss (heap,
    // stack, page tables), below 4 GiB (identity-mapped), and nothing else uses it.
    Ok(unsafe { PhysDma::new(start as usize, (end - start) as usize) })
}

/// The PCI ids of the function the harness puts the emulated NIC behind: QEMU's
/// `ivshmem-plain` (Red Hat / Qumranet 1af4:1110), whose BAR2 is the NIC's BAR0. Not a ConnectX
/// id, so not in the driver's table: this image matches it itself.
const EMULATED_NIC_PCI: (u16, u16) = (0x1af4, 0x1110);

/// The NIC's register BAR: BAR0 of a ConnectX function, BAR2 of the ivshmem binding; memory
/// decoding and bus mastering on, identity-mapped.
fn map_nic(f: &pci::Function) -> Result<pci::Bar, String> {
    let index = if (f.vendor, f.device) == EMULATED_NIC_PCI {
        2
    } else {
        fpci::REG_BAR
    };
    let bar = pci::memory_bar(f, index).ok_or_else(|| {
        format!(
            "NIC {:04x}:{:04x}: BAR{index} not assigned",
            f.vendor, f.device
        )
    })?;
    f.set_command(f.command() | 0x0006);
    if bar.addr.checked_add(bar.size).is_none_or(|e| e > 1 << 32)
        && !paging::identity_map(bar.addr, bar.size)
    {
        return Err(format!("cannot map BAR at {:#x}", bar.addr));
    }
    kprintln!(
        "UK: NIC {:04x}:{:04x} at {:02x}:{:02x}.{} BAR{} {:#x} size {:#x}",
        f.vendor,
        f.device,
        f.bus,
        f.dev,
        f.func,
        index,
        bar.addr,
        bar.size
    );
    Ok(bar)
}

fn hello(env: &Env) -> Result<(), String> {
    let v: Vec<u64> = (1..=1000).collect();
    let sum: u64 = v.iter().sum();
    if sum != 500_500 {
        return Err(format!("heap check: sum {sum}"));
    }
    // DMA memory round trip.
    let dma = env.dma_dyn();
    let b = DmaBuf::new(&dma, 8192, 4096).map_err(|e| format!("dma: {e:?}"))?;
    b.write(100, b"dma").map_err(|e| format!("dma: {e:?}"))?;
    drop(b);
    if env.dma.live_regions() != 0 {
        return Err("DMA region not returned".into());
    }
    kprintln!(
        "UK: heap and DMA ok; {} us since kernel entry",
        env.us(rdtsc() - env.entry_tsc)
    );
    Ok(())
}

/// Reads an address nothing maps (1 TiB): the page fault handler reports it and exits.
fn fault() -> Result<(), String> {
    let p = 0x100_0000_0000u64 as *const u64;
    // SAFETY: not safe to dereference by design: this scenario exists to show that a fault
    // is caught (the handler never returns here).
    let v = unsafe { p.read_volatile() };
    Err(format!("read {v:#x} from an unmapped address"))
}

fn probe(env: &Env) -> Result<Dev, String> {
    let (f, bar) = env.nic.ok_or("no NIC found on PCI")?;
    let base = NonNull::new(bar.addr as *mut u8).ok_or("BAR at address 0")?;
    // SAFETY: the BAR is identity-mapped device memory (map_nic), owned by this driver alone
    // and never covered by a Rust reference.
    let regs = unsafe { MmioBar::new(base, bar.size as usize) };
    let config = mlx5::Config {
        init_timeout_ns: 10_000_000_000,
        cmd_timeout_ns: 10_000_000_000,
        bar_size: bar.size,
        vendor_id: f.vendor,
        device_id: f.device,
        ..mlx5::Config::default()
    };
    let t0 = rdtsc();
    let dev = Dev::probe(regs, env.dma_dyn(), env.clock, config).map_err(|e| {
        let cmd = match e {
            mlx5::Error::Cmd { opcode, .. } | mlx5::Error::CmdTimeout { opcode } => {
                firmware_interface::opcode::name(opcode)
            }
            _ => None,
        };
        match cmd {
            Some(name) => format!("bring-up: {name}: {e} ({e:?})"),
            None => format!("bring-up: {e} ({e:?})"),
        }
    })?;
    let (a, b, c) = dev.fw_version();
    kprintln!(
        "UK: bring-up ok in {} us: firmware {a}.{b}.{c}, {} firmware pages",
        env.us(rdtsc() - t0),
        dev.fw_pages()
    );
    Ok(dev)
}

fn bringup(env: &Env) -> Result<(), String> {
    let dev = probe(env)?;
    let mac = dev.mac().map_err(|e| format!("mac: {e}"))?;
    kprintln!("UK: mac {}", fmt_mac(&mac));
    dev.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    check_dma_returned(env)
}

fn check_dma_returned(env: &Env) -> Result<(), String> {
    let n = env.dma.live_regions();
    if n != 0 {
        return Err(format!(
            "{n} DMA regions ({} bytes) still allocated after teardown",
            env.dma.used()
        ));
    }
    kprintln!("UK: teardown complete, all DMA memory returned");
    Ok(())
}

fn fmt_mac(m: &[u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut m = [0u8; 6];
    let mut it = s.split(':');
    for b in &mut m {
        *b = u8::from_str_radix(it.next()?, 16).ok()?;
    }
    it.next().is_none().then_some(m)
}

/// Probe, RoCE GID 0 = the IPv4-mapped address, a connection manager with the device.
fn stack(env: &Env, wait_s: u64) -> Result<(Cm<Dev>, cm::DeviceId), String> {
    let dev = probe(env)?;
    let mac = dev.mac().map_err(|e| format!("mac: {e}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(env.ip.octets()).0, mac)
        .map_err(|e| format!("set_roce_gid: {e}"))?;
    kprintln!("UK: mac {} ip {}", fmt_mac(&mac), env.ip);
    let cm = Cm::new(
        env.clock,
        CmConfig {
            wait_limit_ns: Some(wait_s * 1_000_000_000),
            seed: rdtsc() | 1,
            ..CmConfig::default()
        },
    );
    let id = cm
        .add_device(dev, mac)
        .map_err(|(e, _)| format!("add_device: {e}"))?;
    Ok((cm, id))
}

/// Tears the stack down: the device out of the manager, shut down, DMA memory all back.
fn teardown(env: &Env, cm: Cm<Dev>, id: cm::DeviceId) -> Result<(), String> {
    let (ids, chans) = cm.live();
    if ids + chans != 0 {
        return Err(format!("{ids} ids and {chans} channels left"));
    }
    let dev = cm
        .remove_device(id)
        .map_err(|e| format!("remove_device: {e}"))?;
    dev.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    drop(cm);
    check_dma_returned(env)
}

/// The QP attributes of every endpoint here (a macro: the attribute type's parameters are
/// inferred from `create_ep`).
macro_rules! qp_attr {
    () => {
        QpInitAttr {
            cap: QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            ..QpInitAttr::default()
        }
    };
}

/// Registered DMA memory.
struct Buf {
    mem: Buffer,
    mr: mlx5::Mr,
}

impl Buf {
    /// `len` bytes of `id`'s device's memory, registered by `reg`.
    fn new(
        id: &Id,
        len: usize,
        reg: impl FnOnce(Buffer) -> Result<mlx5::Mr, cm::Error>,
    ) -> Result<Buf, String> {
        let mem = id.alloc_buf(len).map_err(|e| format!("dma: {e}"))?;
        let mr = reg(mem.clone()).map_err(|e| format!("reg_mr: {e}"))?;
        Ok(Buf { mem, mr })
    }

    fn addr(&self) -> u64 {
        self.mr.addr()
    }

    fn write(&self, off: usize, data: &[u8]) -> Result<(), String> {
        self.mem
            .write(off, data)
            .map_err(|e| format!("dma write: {e:?}"))
    }

    fn read(&self, off: usize, len: usize) -> Result<Vec<u8>, String> {
        let mut v = vec![0u8; len];
        self.mem
            .read(off, &mut v)
            .map_err(|e| format!("dma read: {e:?}"))?;
        Ok(v)
    }

    fn free(self, id: &Id) -> Result<(), String> {
        id.dereg_mr(self.mr).map_err(|e| format!("dereg_mr: {e}"))
    }
}

/// The test pattern both ends (and the host harness) compute: byte `i` of pattern `seed`.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(seed) * 7 + (i >> 8) as u32) as u8
        })
        .collect()
}

fn expect_ok(
    what: &str,
    wc: Result<verbs::WorkCompletion, cm::Error>,
    opcode: WcOpcode,
) -> Result<verbs::WorkCompletion, String> {
    let wc = wc.map_err(|e| format!("{what}: {e}"))?;
    if wc.status != WcStatus::Success || wc.opcode != opcode {
        return Err(format!(
            "{what}: completion {:?} {:?}",
            wc.status, wc.opcode
        ));
    }
    Ok(wc)
}

fn compare(what: &str, got: &[u8], want: &[u8]) -> Result<(), String> {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "{what}: data mismatch at byte {at} (got {:#04x}, want {:#04x})",
            got.get(at).copied().unwrap_or(0),
            want.get(at).copied().unwrap_or(0)
        ));
    }
    Ok(())
}

const SEND_LEN: usize = 256;
const RDMA_LEN: usize = 16384;

/// A listening endpoint at the image's address and CM port (with the scenarios' QP
/// attributes for the connections it accepts), and that address and port as text.
fn listener(cm: &Cm<Dev>, env: &Env) -> Result<(Id, String, String), String> {
    let ip = env.ip.to_string();
    let port = env.port.to_string();
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(&ip), Some(&port), Some(&passive))
        .map_err(|e| format!("getaddrinfo: {e:?}"))?;
    let mut a = qp_attr!();
    let listen = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("listener create_ep: {e}"))?;
    listen.listen(0).map_err(|e| format!("listen: {e}"))?;
    Ok((listen, ip, port))
}

fn loopback(env: &Env) -> Result<(), String> {
    let (cm, devid) = stack(env, 30)?;
    let (listen, ip, port) = listener(&cm, env)?;
    let hints = AddrInfo {
        ai_src_addr: Some(format!("{ip}:0").parse().map_err(|_| "src addr")?),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(&ip), Some(&port), Some(&hints))
        .map_err(|e| format!("getaddrinfo: {e:?}"))?;
    let mut a = qp_attr!();
    let client = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("client create_ep: {e}"))?;
    let ch = cm
        .create_event_channel()
        .map_err(|e| format!("event channel: {e}"))?;
    // The client goes asynchronous: its connect returns at once and this thread then plays
    // the server; both ends progress through the one engine.
    client
        .migrate_id(Some(&ch))
        .map_err(|e| format!("migrate_id: {e}"))?;
    let t_conn = rdtsc();
    client
        .connect(Some(&ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }))
        .map_err(|e| format!("connect: {e}"))?;
    let conn = listen
        .get_request()
        .map_err(|e| format!("get_request: {e}"))?;
    let srecv = Buf::new(&conn, SEND_LEN, |m| conn.reg_msgs(m))?;
    let swrite = Buf::new(&conn, RDMA_LEN, |m| conn.reg_write(m))?;
    let sread = Buf::new(&conn, RDMA_LEN, |m| conn.reg_read(m))?;
    let cbuf = Buf::new(&client, SEND_LEN + 2 * RDMA_LEN, |m| client.reg_msgs(m))?;
    let sread_data = pattern(3, RDMA_LEN);
    sread.write(0, &sread_data)?;
    conn.post_recv(1, srecv.addr(), SEND_LEN as u32, &srecv.mr)
        .map_err(|e| format!("post_recv: {e}"))?;
    conn.accept(None).map_err(|e| format!("accept: {e}"))?;
    let ev = ch
        .get_cm_event()
        .map_err(|e| format!("get_cm_event: {e}"))?;
    if ev.event != EventType::Established || ev.status != 0 {
        return Err(format!("client event {:?} status {}", ev.event, ev.status));
    }
    cm::ack_cm_event(ev);
    kprintln!(
        "UK: connected {ip}:{port} <-> itself (QPs {:?} and {:?}) in {} us",
        client.qp_num(),
        conn.qp_num(),
        env.us(rdtsc() - t_conn)
    );

    // SEND
    let msg = pattern(1, SEND_LEN);
    cbuf.write(0, &msg)?;
    client
        .post_send(
            2,
            cbuf.addr(),
            SEND_LEN as u32,
            &cbuf.mr,
            SendFlags::SIGNALED,
        )
        .map_err(|e| format!("post_send: {e}"))?;
    expect_ok("send", client.get_send_comp(), WcOpcode::Send)?;
    let first = rdtsc();
    kprintln!(
        "UK: first completion: {} us after reset, {} us after kernel entry",
        env.us(first),
        env.us(first - env.entry_tsc)
    );
    let wc = expect_ok("recv", conn.get_recv_comp(), WcOpcode::Recv)?;
    if wc.byte_len as usize != SEND_LEN {
        return Err(format!("recv: {} bytes, want {SEND_LEN}", wc.byte_len));
    }
    compare("send", &srecv.read(0, SEND_LEN)?, &msg)?;
    kprintln!("UK: SEND {SEND_LEN} bytes ok, data checked");

    // RDMA WRITE: client -> server buffer
    let wdata = pattern(2, RDMA_LEN);
    cbuf.write(SEND_LEN, &wdata)?;
    client
        .post_write(
            3,
            cbuf.addr() + SEND_LEN as u64,
            RDMA_LEN as u32,
            &cbuf.mr,
            SendFlags::SIGNALED,
            swrite.addr(),
            swrite.mr.rkey(),
        )
        .map_err(|e| format!("post_write: {e}"))?;
    expect_ok("rdma write", client.get_send_comp(), WcOpcode::RdmaWrite)?;
    compare("rdma write", &swrite.read(0, RDMA_LEN)?, &wdata)?;
    kprintln!("UK: RDMA WRITE {RDMA_LEN} bytes ok, data checked");

    // RDMA READ: server buffer -> client
    let roff = SEND_LEN + RDMA_LEN;
    client
        .post_read(
            4,
            cbuf.addr() + roff as u64,
            RDMA_LEN as u32,
            &cbuf.mr,
            SendFlags::SIGNALED,
            sread.addr(),
            sread.mr.rkey(),
        )
        .map_err(|e| format!("post_read: {e}"))?;
    expect_ok("rdma read", client.get_send_comp(), WcOpcode::RdmaRead)?;
    compare("rdma read", &cbuf.read(roff, RDMA_LEN)?, &sread_data)?;
    kprintln!("UK: RDMA READ {RDMA_LEN} bytes ok, data checked");

    client
        .disconnect()
        .map_err(|e| format!("client disconnect: {e}"))?;
    conn.disconnect()
        .map_err(|e| format!("server disconnect: {e}"))?;
    let ev = ch
        .get_cm_event()
        .map_err(|e| format!("get_cm_event: {e}"))?;
    if ev.event != EventType::Disconnected {
        return Err(format!("client event {:?}, want DISCONNECTED", ev.event));
    }
    cm::ack_cm_event(ev);
    kprintln!("UK: disconnected");
    cbuf.free(&client)?;
    for b in [srecv, swrite, sread] {
        b.free(&conn)?;
    }
    client.destroy_ep();
    conn.destroy_ep();
    listen.destroy_ep();
    ch.destroy();
    // The CQs create_ep wrote back into `a` are shared handles: the manager destroys them
    // once the caller lets go, and the device cannot leave it before.
    drop(a);
    teardown(env, cm, devid)
}

/// The server's private data in its REP: where the client may write and read.
/// `write_addr: u64, write_rkey: u32, read_addr: u64, read_rkey: u32, len: u32`, big-endian.
pub const SERVER_INFO_LEN: usize = 28;

fn server(env: &Env) -> Result<(), String> {
    let peer: Ipv4Addr = env
        .arg("peer")
        .ok_or("server: peer= (the client's address) missing")?
        .parse()
        .map_err(|_| "server: bad peer=")?;
    let peer_mac = env
        .arg("peer_mac")
        .and_then(parse_mac)
        .ok_or("server: peer_mac= missing or malformed")?;
    let (cm, devid) = stack(env, 60)?;
    cm.add_neighbor(peer, Neighbor { mac: peer_mac });
    let (listen, ip, port) = listener(&cm, env)?;
    kprintln!("UK: server listening on {ip}:{port}");
    let conn = listen
        .get_request()
        .map_err(|e| format!("get_request: {e}"))?;
    kprintln!("UK: connect request from {:?}", conn.dst_addr());
    let note = Buf::new(&conn, SEND_LEN, |m| conn.reg_msgs(m))?;
    let wbuf = Buf::new(&conn, RDMA_LEN, |m| conn.reg_write(m))?;
    let rbuf = Buf::new(&conn, RDMA_LEN, |m| conn.reg_read(m))?;
    rbuf.write(0, &pattern(5, RDMA_LEN))?;
    conn.post_recv(1, note.addr(), SEND_LEN as u32, &note.mr)
        .map_err(|e| format!("post_recv: {e}"))?;
    let mut info = [0u8; SERVER_INFO_LEN];
    info[..8].copy_from_slice(&wbuf.addr().to_be_bytes());
    info[8..12].copy_from_slice(&wbuf.mr.rkey().to_be_bytes());
    info[12..20].copy_from_slice(&rbuf.addr().to_be_bytes());
    info[20..24].copy_from_slice(&rbuf.mr.rkey().to_be_bytes());
    info[24..].copy_from_slice(&(RDMA_LEN as u32).to_be_bytes());
    conn.accept(Some(&ConnParam {
        private_data: &info,
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }))
    .map_err(|e| format!("accept: {e}"))?;
    kprintln!("UK: accepted; QP {:?}", conn.qp_num());
    let wc = expect_ok("recv", conn.get_recv_comp(), WcOpcode::Recv)?;
    let first = rdtsc();
    kprintln!(
        "UK: first completion: {} us after reset, {} us after kernel entry",
        env.us(first),
        env.us(first - env.entry_tsc)
    );
    let got = note.read(0, wc.byte_len as usize)?;
    kprintln!(
        "UK: note from the client: {:?}",
        core::str::from_utf8(&got).unwrap_or("<binary>")
    );
    compare(
        "client's rdma write",
        &wbuf.read(0, RDMA_LEN)?,
        &pattern(6, RDMA_LEN),
    )?;
    kprintln!("UK: client's RDMA WRITE of {RDMA_LEN} bytes checked");
    conn.disconnect().map_err(|e| format!("disconnect: {e}"))?;
    kprintln!("UK: disconnected");
    for b in [note, wbuf, rbuf] {
        b.free(&conn)?;
    }
    conn.destroy_ep();
    listen.destroy_ep();
    teardown(env, cm, devid)
}

/// `irq`: a completion wait that halts until the channel's MSI-X vector fires.
fn irq_wait(env: &Env) -> Result<(), String> {
    use crate::irq::{self, IrqPlatform, LapicIrqs};
    use nic_hal::Interrupts;
    use verbs::rc::RcParams;
    use verbs::{AccessFlags, AhAttr, Mtu, Provider, QpType, RemoteOp, SendWr, Sge, WrOpcode};
    type IrqDev = mlx5::Device<MmioBar, IrqPlatform>;
    let e = |what: &'static str| move |err: verbs::Error| format!("{what}: {err}");

    let (f, bar) = env.nic.ok_or("no NIC found on PCI")?;
    let per_ms = irq::init(&env.clock)?;
    let n = irq::enable_msix(&f)?;
    let irqs: &'static LapicIrqs =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(LapicIrqs::new(n, env.clock, per_ms)));
    kprintln!(
        "UK: MSI-X on: {n} vectors at IDT {}.., APIC timer {per_ms} ticks/ms",
        irq::MSIX_VECTOR_BASE
    );
    let platform = IrqPlatform {
        clock: env.clock,
        irqs,
    };
    let base = NonNull::new(bar.addr as *mut u8).ok_or("BAR at address 0")?;
    // SAFETY: the BAR is identity-mapped device memory (map_nic), owned by this driver alone
    // and never covered by a Rust reference.
    let regs = unsafe { MmioBar::new(base, bar.size as usize) };
    let config = mlx5::Config {
        init_timeout_ns: 10_000_000_000,
        cmd_timeout_ns: 10_000_000_000,
        bar_size: bar.size,
        vendor_id: f.vendor,
        device_id: f.device,
        // Only an interrupt (or the timeout) ends a wait's halt.
        irq_recheck_ns: u64::MAX,
        ..mlx5::Config::default()
    };
    let dev = IrqDev::probe(regs, env.dma_dyn(), platform, config)
        .map_err(|err| format!("bring-up: {err}"))?;
    let mac = dev.mac().map_err(|err| format!("mac: {err}"))?;
    dev.set_roce_gid(0, Gid::from_ipv4(env.ip.octets()).0, mac)
        .map_err(|err| format!("gid: {err}"))?;
    kprintln!(
        "UK: bring-up ok, vector 0 (driver EQ) fired {} times",
        irq::count(0)
    );

    let mut ch = Provider::create_comp_channel(&dev).map_err(e("create_comp_channel"))?;
    let vector = ch.vector();
    if vector == 0 || vector >= n {
        return Err(format!("the completion channel is on vector {vector}"));
    }
    let pd = Provider::alloc_pd(&dev).map_err(e("alloc_pd"))?;
    let cq = Provider::create_cq(&dev, 15, 0xa11, Some(&ch)).map_err(e("create_cq"))?;
    let mem: Buffer = Provider::alloc_buf(&dev, 256).map_err(e("alloc_buf"))?;
    let mr =
        Provider::reg_mr(&dev, &pd, mem.clone(), AccessFlags::LOCAL_WRITE).map_err(e("reg_mr"))?;
    let (mut qp, _) = Provider::create_qp(
        &dev,
        &pd,
        &verbs::QpInitAttr {
            qp_type: QpType::Rc,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        },
    )
    .map_err(e("create_qp"))?;
    // A destination QP nobody has: the SEND goes unanswered, its ACK timeout (code 17,
    // 4.096 us << 17 = 537 ms) runs out with no retry left, and the error completion comes.
    let params = RcParams {
        ah_attr: AhAttr {
            dgid: Gid::from_ipv4(env.ip.octets()),
            sgid_index: 0,
            hop_limit: 64,
            is_global: true,
            port_num: 1,
            dmac: mac,
            ..AhAttr::default()
        },
        path_mtu: Mtu::Mtu1024,
        dest_qp_num: 0x00ab_cdef,
        timeout: 17,
        retry_cnt: 0,
        ..RcParams::default()
    };
    verbs::rc::connect(&dev, &mut qp, &params).map_err(e("connect"))?;
    Provider::req_notify_cq(&dev, &cq, false).map_err(e("req_notify_cq"))?;
    let sg = [Sge {
        addr: mr.addr(),
        length: 64,
        lkey: mr.lkey(),
    }];
    let before = irqs.count(vector);
    let (halted0, halts0) = irqs.halted();
    let t0 = rdtsc();
    Provider::post_send(
        &dev,
        &mut qp,
        &[SendWr {
            wr_id: 7,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sg,
            remote: RemoteOp::None,
            ..SendWr::default()
        }],
    )
    .map_err(|err| format!("post_send: {err:?}"))?;
    let ev = dev
        .wait_cq_event(&mut ch, 30_000_000_000)
        .map_err(|err| format!("wait_cq_event: {err}"))?;
    let wall = rdtsc().wrapping_sub(t0);
    let (halted1, halts1) = irqs.halted();
    let fired = irqs.count(vector) - before;
    let halted = halted1 - halted0;
    let busy = wall.saturating_sub(halted);
    kprintln!(
        "UK: IRQ wait over: vector {vector} fired {fired} times, wait {} us, halted {} us in {} halts ({} timer alarms in all), CPU busy {}.{:02}%",
        env.us(wall),
        env.us(halted),
        halts1 - halts0,
        irq::timer_count(),
        busy * 100 / wall.max(1),
        busy * 10_000 / wall.max(1) % 100
    );
    let ev = ev.ok_or("the wait timed out: no interrupt")?;
    if ev.cq_context != 0xa11 || ev.cqn != cq.cqn() {
        return Err(format!(
            "event for CQ {:#x} context {:#x}",
            ev.cqn, ev.cq_context
        ));
    }
    if fired == 0 {
        return Err("the event came without the channel's vector firing".into());
    }
    let mut wc = [verbs::WorkCompletion::default(); 1];
    let t = rdtsc();
    while Provider::poll_cq(&dev, &cq, &mut wc).map_err(e("poll_cq"))? == 0 {
        if env.us(rdtsc() - t) > 10_000_000 {
            return Err("the event came but no completion".into());
        }
    }
    if (wc[0].wr_id, wc[0].status) != (7, WcStatus::RetryExcErr) {
        return Err(format!("completion {:?}", wc[0]));
    }
    kprintln!(
        "UK: IRQ woken ok: completion {:?} (retry exceeded, as asked)",
        wc[0].status
    );
    Provider::destroy_qp(&dev, qp).map_err(|err| format!("destroy_qp: {err:?}"))?;
    Provider::dereg_mr(&dev, mr).map_err(|err| format!("dereg_mr: {err:?}"))?;
    drop(mem);
    Provider::destroy_cq(&dev, cq).map_err(|err| format!("destroy_cq: {err:?}"))?;
    Provider::destroy_comp_channel(&dev, ch)
        .map_err(|err| format!("destroy_comp_channel: {err:?}"))?;
    Provider::dealloc_pd(&dev, pd).map_err(|err| format!("dealloc_pd: {err:?}"))?;
    dev.shutdown().map_err(|err| format!("shutdown: {err}"))?;
    check_dma_returned(env)
}

/// The appliance's subsystem NQN.
pub const NVMF_SUBNQN: &str = "nqn.2024-01.io.rdma-stack:unikernel-ram";

/// Where the polled target's diagnostics go.
fn nvmf_log(a: core::fmt::Arguments<'_>) {
    kprintln!("UK: nvmf: {a}");
}

/// Parses `key=` as a number, `default` when absent.
fn num_arg<T: core::str::FromStr>(env: &Env, key: &str, default: T) -> Result<T, String> {
    match env.arg(key) {
        Some(s) => s.parse().map_err(|_| format!("bad {key}= {s:?}")),
        None => Ok(default),
    }
}

/// `nvmf-target`: an NVMe-oF target with a RAM namespace, every queue from one loop.
fn nvmf_target(env: &Env) -> Result<(), String> {
    use core::sync::atomic::Ordering;
    use nic_hal::Platform;
    use nvmf::namespace::RamNamespace;
    use nvmf::target::{Port, Subsystem, Target, TargetConfig};
    use nvmf_rdma_target::PolledTarget;

    let peer: Ipv4Addr = env
        .arg("peer")
        .ok_or("nvmf-target: peer= (the host's address) missing")?
        .parse()
        .map_err(|_| "nvmf-target: bad peer=")?;
    let peer_mac = env
        .arg("peer_mac")
        .and_then(parse_mac)
        .ok_or("nvmf-target: peer_mac= missing or malformed")?;
    let port: u16 = num_arg(env, "port", 4420)?;
    let queues: u64 = num_arg(env, "queues", 2)?;
    let ns_mib: u64 = num_arg(env, "ns_mib", 4)?;
    // The namespace lives on the 16 MiB kernel heap.
    if !(1..=8).contains(&ns_mib) {
        return Err(format!("ns_mib={ns_mib}: 1 to 8"));
    }
    // MDTS 5: 128 KiB per command (4 KiB pages), the staging slot of each command in flight.
    const MDTS: u8 = 5;
    let staging = 4096usize << MDTS;
    let blocks = (ns_mib << 20) / 512;
    let ns = RamNamespace::new(512, blocks).ok_or("RAM namespace: no memory")?;
    let mut t = Target::new(TargetConfig {
        max_io_queues: 4,
        mdts: MDTS,
        ports: vec![Port {
            portid: 1,
            trtype: nvmf::discovery::trtype::RDMA,
            adrfam: nvmf::discovery::adrfam::IPV4,
            traddr: env.ip.to_string(),
            trsvcid: port.to_string(),
            treq: nvmf::discovery::TREQ_SECURE_NOT_REQUIRED,
        }],
        ..TargetConfig::default()
    });
    let mut sub = Subsystem::new(NVMF_SUBNQN, "SN-UNIKERNEL-1", "rdma-unikernel ram");
    sub.add_namespace(1, Arc::new(ns))
        .map_err(|e| format!("namespace: {e:?}"))?;
    t.add_subsystem(sub)
        .map_err(|e| format!("subsystem: {e:?}"))?;

    let (cm, devid) = stack(env, 60)?;
    cm.add_neighbor(peer, Neighbor { mac: peer_mac });
    let mut pt = PolledTarget::listen(
        &cm,
        core::net::SocketAddr::from((env.ip, port)),
        Arc::new(t),
        staging,
        Some(nvmf_log),
    )
    .map_err(|e| format!("listen: {e}"))?;
    kprintln!(
        "UK: nvmf target listening on {}:{port}: {NVMF_SUBNQN}, namespace 1 of {blocks} blocks of 512 bytes ({ns_mib} MiB of RAM), MDTS {} KiB",
        env.ip,
        staging >> 10
    );
    let now_ms = || env.clock.now_ns() / 1_000_000;
    let deadline = now_ms() + 100_000;
    let r = loop {
        let st = pt.stats();
        if st.closed.load(Ordering::Relaxed) >= queues && pt.queues() == 0 {
            break Ok(());
        }
        let now = now_ms();
        if now > deadline {
            break Err(format!(
                "nvmf-target: {} of {queues} queues closed after 100 s",
                st.closed.load(Ordering::Relaxed)
            ));
        }
        if !pt.poll(now) {
            core::hint::spin_loop();
        }
    };
    let st = pt.stats();
    let (accepted, rejected, commands, failed) = (
        st.accepted.load(Ordering::Relaxed),
        st.rejected.load(Ordering::Relaxed),
        st.commands.load(Ordering::Relaxed),
        st.failed.load(Ordering::Relaxed),
    );
    kprintln!(
        "UK: nvmf target served {commands} commands on {accepted} queues ({rejected} requests rejected, {failed} queues failed, most in flight {})",
        st.max_in_flight.load(Ordering::Relaxed)
    );
    pt.shutdown();
    r?;
    if failed != 0 {
        return Err(format!("{failed} queues failed"));
    }
    // The disconnects' last messages (a DREP, a DREQ's answer) settle; the ids then go.
    let t0 = now_ms();
    while cm.live() != (0, 0) && now_ms() - t0 < 10_000 {
        cm.progress();
    }
    kprintln!("UK: nvmf target stopped");
    teardown(env, cm, devid)
}

// ------------------------------------------------------------------ EFA

type EfaDev = efa::Device<MmioBar, TscClock>;

/// The emulated EFA's identity page in the ivshmem BAR (written by `nic-emud --family efa`).
const EFA_HEADER_OFF: u64 = 0x1000;
/// Its magic.
const EFA_MAGIC: [u8; 8] = *b"EFAEMU01";

/// A window of the NIC's BAR as a register backend.
fn window(bar: &pci::Bar, off: u32, len: u32) -> Result<MmioBar, String> {
    let (off, len) = (u64::from(off), u64::from(len));
    if len == 0 || off.checked_add(len).is_none_or(|e| e > bar.size) {
        return Err(format!(
            "EFA window {off:#x}+{len:#x} outside the {:#x}-byte BAR",
            bar.size
        ));
    }
    let base = NonNull::new((bar.addr + off) as *mut u8).ok_or("BAR at address 0")?;
    // SAFETY: `off..off+len` lies inside the BAR (checked), which is identity-mapped device
    // memory (map_nic) owned by this driver alone and never covered by a Rust reference.
    Ok(unsafe { MmioBar::new(base, len as usize) })
}

/// Reads the identity page and probes the EFA driver through the windows it names.
fn efa_probe(env: &Env) -> Result<EfaDev, String> {
    let (_, bar) = env.nic.ok_or("no NIC found on PCI")?;
    if bar.size < EFA_HEADER_OFF + 0x1000 {
        return Err("the BAR is too small for the EFA's identity page".into());
    }
    let page = window(&bar, EFA_HEADER_OFF as u32, 64)?;
    let mut h = [0u8; 40];
    for (i, c) in h.chunks_mut(4).enumerate() {
        c.copy_from_slice(&nic_hal::RegisterIo::read32(&page, i * 4).to_le_bytes());
    }
    if h[..8] != EFA_MAGIC {
        return Err("no EFA identity page (is nic-emud running with --family efa?)".into());
    }
    let w = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    let (vendor, device) = (
        u16::from_le_bytes([h[8], h[9]]),
        u16::from_le_bytes([h[10], h[11]]),
    );
    kprintln!("UK: EFA {vendor:04x}:{device:04x} behind ivshmem");
    if !efa::is_supported_pci(vendor, device) {
        return Err(format!("{vendor:04x}:{device:04x} is not an EFA"));
    }
    let regs = window(&bar, w(12), w(16))?;
    let (db_bar, db_off, db_len) = (w(20), w(24), w(28));
    let (llq_off, llq_len) = (w(32), w(36));
    let t0 = rdtsc();
    let config = efa::Config {
        device_id: device,
        admin_timeout_ns: Some(10_000_000_000),
        ..efa::Config::default()
    };
    let mut dev = EfaDev::probe(regs, env.dma_dyn(), env.clock, config)
        .map_err(|e| format!("EFA bring-up: {e:?}"))?;
    let attached = if u32::from(dev.attributes().db_bar) != db_bar {
        Err(format!(
            "the device's doorbell BAR {} is not the identity page's {db_bar}",
            dev.attributes().db_bar
        ))
    } else {
        window(&bar, llq_off, llq_len).and_then(|m| Ok((m, window(&bar, db_off, db_len)?)))
    };
    match attached {
        Ok((m, d)) => dev.attach_data_bars(m, d),
        Err(e) => {
            let _ = dev.shutdown();
            return Err(e);
        }
    }
    kprintln!(
        "UK: EFA bring-up ok in {} us: firmware {}, {} QPs, MTU {}",
        env.us(rdtsc() - t0),
        dev.attributes().fw_version_text(),
        dev.attributes().max_qp,
        dev.attributes().mtu
    );
    Ok(dev)
}

/// The EFA loopback exchange (`efa::loopback`: SRD and UD SENDs and an SRD RDMA READ to its
/// own address, every completion and byte checked), then shutdown with all DMA memory back.
fn efa_loopback(env: &Env) -> Result<(), String> {
    use efa::loopback::{self, LoopbackConfig, Progress};
    let dev = efa_probe(env)?;
    let cfg = LoopbackConfig {
        gid: Some(Gid::from_ipv4(env.ip.octets())),
        ..LoopbackConfig::default()
    };
    let r = loopback::run(&dev, &env.clock, &cfg, &mut |p| match p {
        Progress::Sent {
            qp_type,
            messages,
            len,
        } => kprintln!(
            "UK: EFA {qp_type:?} SEND {messages} x {len} bytes to itself ok, data checked"
        ),
        Progress::Read { len } => {
            kprintln!("UK: EFA RDMA READ {len} bytes from itself ok, data checked")
        }
    });
    if let Err(e) = r {
        let bad = dev.bad_cqes();
        let _ = dev.shutdown();
        return Err(format!("EFA loopback: {e} (refused completions {bad:?})"));
    }
    dev.shutdown().map_err(|e| format!("shutdown: {e:?}"))?;
    check_dma_returned(env)
}

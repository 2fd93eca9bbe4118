//! The unikernel (`qemu-tests/unikernel`) booted in QEMU (TCG) against the emulated NIC run by
//! `nic-emud` behind an `ivshmem-plain` function, and `nic-emud` itself with a host-side
//! stand-in for the guest.
//!
//! Each test builds what it needs with a nested cargo into its own target directories under
//! the workspace `target/` (`uk-image` for the image, `uk-host` for `nic-emud`; separate
//! directories, so the nested builds never wait on the lock of the cargo running the tests),
//! creates its shared-memory files under a unique `/dev/shm/uk-<pid>-<n>-*` name (removed
//! afterwards), starts `nic-emud` on the UDP fabric (127.0.5.0/24, UDP ports 45000-45099, one
//! pair per test) and QEMU wrapped in `timeout`, reads the serial console (QEMU's stdout) and
//! checks the exit status (33 pass, 35 fail, 37 panic) and the results the guest printed.
//!
//! To boot by hand (from the workspace root):
//!
//! ```text
//! cargo build --release --manifest-path qemu-tests/unikernel/Cargo.toml --target-dir target/uk-image
//! cargo build -p nic-emulator --bin nic-emud
//! target/debug/nic-emud --bar /dev/shm/uk-bar --ram /dev/shm/uk-ram --ram-size 128M \
//!          --ip 127.0.5.1 --udp-port 45000 --ignore-stdin &
//! timeout 60 qemu-system-x86_64 -machine q35,memory-backend=ram0 -accel tcg -m 128M -smp 1 \
//!   -nodefaults -no-reboot -display none -nic none -serial stdio \
//!   -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
//!   -object memory-backend-file,id=ram0,size=128M,mem-path=/dev/shm/uk-ram,share=on \
//!   -object memory-backend-file,id=nicbar,size=32M,mem-path=/dev/shm/uk-bar,share=on \
//!   -device ivshmem-plain,memdev=nicbar \
//!   -kernel target/uk-image/release/rdma-unikernel -append "scenario=loopback ip=127.0.5.1"
//! echo "exit status $? (33 pass, 35 fail, 37 panic)"; kill %1; rm /dev/shm/uk-bar /dev/shm/uk-ram
//! ```

use std::io::{BufRead, BufReader, Read};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cm::{AddrInfo, Cm, CmConfig, ConnParam, Neighbor, getaddrinfo};
use nic_emulator::host::SharedMapping;
use nic_hal::{DmaAllocator, DmaError, DmaRegion, MmioBar};
use nic_testbed::irq::IrqLines;
use nic_testbed::udp::{RealTime, UdpNic};
use verbs::{Gid, MemoryRegion, SendFlags, WcOpcode, WcStatus};

/// Guest RAM (MiB).
const RAM_MB: u64 = 128;
/// The NIC's BAR (the ivshmem memdev).
const BAR_SIZE: u64 = 32 << 20;
/// MSI-X vectors of the ivshmem-doorbell function (the emulated NIC's default).
const VECTORS: u16 = 8;
/// How long one QEMU run may take before it is killed (the guest's own waits are 30-60 s).
const QEMU_TIMEOUT: Duration = Duration::from_secs(120);
/// QEMU exit statuses of isa-debug-exit (value << 1 | 1).
const EXIT_PASS: i32 = 33;
const EXIT_FAIL: i32 = 35;
const EXIT_PANIC: i32 = 37;

static COUNTER: AtomicU32 = AtomicU32::new(0);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root")
}

fn cargo() -> std::ffi::OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Runs a nested cargo build; panics with its output on failure.
fn cargo_build(args: &[&str]) {
    let out = Command::new(cargo())
        .args(args)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .current_dir(root())
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `nic-emud` binary, built once.
fn emud() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = root().join("target/uk-host");
        cargo_build(&[
            "build",
            "--quiet",
            "-p",
            "nic-emulator",
            "--bin",
            "nic-emud",
            "--target-dir",
            dir.to_str().unwrap(),
        ]);
        dir.join("debug/nic-emud")
    })
}

/// The unikernel image (release), built once.
fn image() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = root().join("target/uk-image");
        let manifest = root().join("qemu-tests/unikernel/Cargo.toml");
        cargo_build(&[
            "build",
            "--quiet",
            "--release",
            "--manifest-path",
            manifest.to_str().unwrap(),
            "--target-dir",
            dir.to_str().unwrap(),
        ]);
        let p = dir.join("release/rdma-unikernel");
        report_image_size(&p);
        p
    })
}

/// Prints the image's file size and what it loads (PT_LOAD file and memory sizes).
fn report_image_size(p: &Path) {
    let b = std::fs::read(p).expect("read image");
    assert_eq!(&b[..4], b"\x7fELF", "not an ELF file");
    let u16at = |o: usize| u16::from_le_bytes([b[o], b[o + 1]]) as usize;
    let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
    let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
    let (phoff, phentsize, phnum) = (u64at(0x20) as usize, u16at(0x36), u16at(0x38));
    let (mut filesz, mut memsz) = (0, 0);
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        if u32at(ph) == 1 {
            filesz += u64at(ph + 0x20);
            memsz += u64at(ph + 0x28);
        }
    }
    eprintln!(
        "unikernel image {}: ELF {} bytes, loaded {} bytes (with .bss {} bytes: 16 MiB heap, 1 MiB stack)",
        p.display(),
        b.len(),
        filesz,
        memsz
    );
}

/// Unique /dev/shm files for one test, removed on drop.
struct Shm {
    bar: PathBuf,
    ram: PathBuf,
    /// nic-emud's ivshmem-doorbell socket (for a guest with MSI-X).
    sock: PathBuf,
}

impl Shm {
    fn new(tag: &str) -> Shm {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let base = format!("/dev/shm/uk-{}-{n}-{tag}", std::process::id());
        Shm {
            bar: PathBuf::from(format!("{base}-bar")),
            ram: PathBuf::from(format!("{base}-ram")),
            sock: std::env::temp_dir().join(format!("uk-{}-{n}-{tag}.sock", std::process::id())),
        }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.bar);
        let _ = std::fs::remove_file(&self.ram);
        let _ = std::fs::remove_file(&self.sock);
    }
}

/// A running `nic-emud`; stopped (stdin closed, then killed if it lingers) on drop.
struct Emud {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Option<JoinHandle<String>>,
}

impl Emud {
    fn start(shm: &Shm, ip: Ipv4Addr, udp_port: u16, extra: &[&str]) -> Emud {
        let mut child = Command::new(emud())
            .args(["--bar", shm.bar.to_str().unwrap()])
            .args(["--bar-size", &BAR_SIZE.to_string()])
            .args(["--ram", shm.ram.to_str().unwrap()])
            .args(["--ram-size", &format!("{RAM_MB}M")])
            .args(["--ip", &ip.to_string()])
            .args(["--udp-port", &udp_port.to_string()])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nic-emud");
        let stdin = child.stdin.take();
        let mut err = child.stderr.take().unwrap();
        let stderr = thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut lines = BufReader::new(out).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = tx.send(first);
            for _ in lines {}
        });
        let mut e = Emud {
            child,
            stdin,
            stderr: Some(stderr),
        };
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(Some(l)) if l.starts_with("READY nic-emud ") => {
                assert!(l.contains(&format!("ip={ip} udp_port={udp_port}")), "{l}");
            }
            other => {
                let _ = e.child.kill();
                let (_, err) = e.finish();
                panic!("nic-emud did not get ready: {other:?}\n{err}");
            }
        }
        e
    }

    /// Closes stdin (the daemon's signal to stop) and returns its exit status and stderr.
    fn finish(&mut self) -> (Option<ExitStatus>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut status = None;
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                status = Some(s);
                break;
            }
            thread::sleep(Duration::from_millis(10));
        }
        if status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let err = self
            .stderr
            .take()
            .map(|h| h.join().unwrap_or_default())
            .unwrap_or_default();
        (status, err)
    }

    /// Stops the daemon and checks that it exited cleanly with no device errors and nothing
    /// left alive on the device.
    fn finish_clean(mut self) -> String {
        let (status, err) = self.finish();
        assert_eq!(
            status.and_then(|s| s.code()),
            Some(0),
            "nic-emud exit: {err}"
        );
        assert!(err.contains(" 0 device errors;"), "nic-emud: {err}");
        assert!(
            err.contains("; nothing alive;"),
            "the guest left objects on the device: {err}"
        );
        err
    }
}

impl Drop for Emud {
    fn drop(&mut self) {
        if self.stderr.is_some() {
            let _ = self.finish();
        }
    }
}

/// A serial line and when it arrived (since QEMU was started).
type SerialLine = (Duration, String);

/// A running QEMU guest; its serial console (stdout) is read on a thread.
struct Vm {
    child: Child,
    start: Instant,
    lines: Receiver<SerialLine>,
    serial: Vec<SerialLine>,
}

/// How a guest ended.
struct Ended {
    code: Option<i32>,
    serial: Vec<SerialLine>,
    stderr: String,
}

impl Ended {
    fn text(&self) -> String {
        let mut s = String::new();
        for (t, l) in &self.serial {
            s += &format!("[{:8.3}s] {l}\n", t.as_secs_f64());
        }
        s + "--- qemu stderr:\n" + &self.stderr
    }

    fn has(&self, needle: &str) -> bool {
        self.serial.iter().any(|(_, l)| l.contains(needle))
    }

    fn at(&self, needle: &str) -> Option<Duration> {
        self.serial
            .iter()
            .find(|(_, l)| l.contains(needle))
            .map(|(t, _)| *t)
    }
}

impl Vm {
    fn boot(shm: Option<&Shm>, append: &str) -> Vm {
        Vm::boot_on(shm, append, false)
    }

    /// [`Vm::boot`]; with `doorbell` the NIC is an `ivshmem-doorbell` function served by
    /// nic-emud on `shm.sock` (MSI-X, BAR1 the MSI-X table) instead of an `ivshmem-plain`.
    fn boot_on(shm: Option<&Shm>, append: &str, doorbell: bool) -> Vm {
        let mut cmd = Command::new("timeout");
        cmd.args(["-k", "5", &QEMU_TIMEOUT.as_secs().to_string()])
            .arg("qemu-system-x86_64")
            .args(["-accel", "tcg", "-m", &format!("{RAM_MB}M"), "-smp", "1"])
            .args([
                "-nodefaults",
                "-no-reboot",
                "-display",
                "none",
                "-nic",
                "none",
            ])
            .args(["-serial", "stdio"])
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"]);
        match shm {
            Some(shm) if doorbell => {
                cmd.args(["-machine", "q35,memory-backend=ram0"]).args([
                    "-object",
                    &format!(
                        "memory-backend-file,id=ram0,size={RAM_MB}M,mem-path={},share=on",
                        shm.ram.display()
                    ),
                    "-chardev",
                    &format!("socket,path={},id=nicsock", shm.sock.display()),
                    "-device",
                    &format!("ivshmem-doorbell,chardev=nicsock,vectors={VECTORS}"),
                ]);
            }
            Some(shm) => {
                cmd.args(["-machine", "q35,memory-backend=ram0"]).args([
                    "-object",
                    &format!(
                        "memory-backend-file,id=ram0,size={RAM_MB}M,mem-path={},share=on",
                        shm.ram.display()
                    ),
                    "-object",
                    &format!(
                        "memory-backend-file,id=nicbar,size={BAR_SIZE},mem-path={},share=on",
                        shm.bar.display()
                    ),
                    "-device",
                    "ivshmem-plain,memdev=nicbar",
                ]);
            }
            None => {
                cmd.args(["-machine", "q35"]);
            }
        }
        cmd.arg("-kernel").arg(image()).args(["-append", append]);
        let start = Instant::now();
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn qemu-system-x86_64 (is qemu-system-x86 installed?)");
        let out = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for l in BufReader::new(out).lines() {
                let Ok(l) = l else { break };
                if tx
                    .send((start.elapsed(), l.trim_end_matches('\r').to_string()))
                    .is_err()
                {
                    break;
                }
            }
        });
        Vm {
            child,
            start,
            lines: rx,
            serial: Vec::new(),
        }
    }

    /// Waits for a serial line containing `needle`; `false` if the guest ended first or the
    /// deadline passed.
    fn wait_for(&mut self, needle: &str, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(l) => {
                    let hit = l.1.contains(needle);
                    self.serial.push(l);
                    if hit {
                        return true;
                    }
                }
                Err(_) => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
        }
    }

    /// Waits for the guest to exit (QEMU is killed at the deadline).
    fn wait(mut self) -> Ended {
        let deadline = self.start + QEMU_TIMEOUT + Duration::from_secs(10);
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.code(),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(500)) {
            self.serial.push(l);
        }
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        Ended {
            code,
            serial: self.serial,
            stderr,
        }
    }
}

// ------------------------------------------------------------------ nic-emud without QEMU

/// DMA memory for the host-side stand-in of the guest: the guest RAM file mapped in this
/// process, handed out by "guest-physical" address (the file offset, as q35 maps small RAM).
/// Regions are never reused (a bump allocator): enough for one bring-up.
struct RamDma {
    map: SharedMapping,
    next: Mutex<usize>,
}

// SAFETY: regions are disjoint slices of the RAM mapping (bump allocation, never reused), zero
// in a fresh file, aligned as asked on both sides (the mapping is page-aligned, so
// va % align == offset % align for align <= 4096, and larger alignments are refused).
unsafe impl DmaAllocator for RamDma {
    fn allocate(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() || align > 4096 {
            return Err(DmaError::InvalidRequest);
        }
        let mut next = self.next.lock().unwrap();
        let off = next.div_ceil(align) * align;
        let end = off.checked_add(len).ok_or(DmaError::NoMemory)?;
        if end > self.map.len() {
            return Err(DmaError::NoMemory);
        }
        *next = end;
        // SAFETY: off + len <= the mapping's length.
        let va = unsafe { NonNull::new_unchecked(self.map.as_ptr().as_ptr().add(off)) };
        Ok(DmaRegion {
            va,
            iova: off as u64,
            len,
        })
    }

    unsafe fn deallocate(&self, _region: DmaRegion) {}
}

/// nic-emud serves a driver that reaches it only through the two shared files, as a guest
/// does: registers by loads and stores on a second mapping of the BAR file (untrapped: the
/// daemon's poller sees them), DMA at "guest-physical" addresses in the RAM file. Bring-up,
/// the MAC, a RoCE GID, teardown; the daemon then exits cleanly on stdin EOF with no device
/// errors and nothing left alive.
#[test]
fn nic_emud_serves_a_driver_through_the_shared_files() {
    let shm = Shm::new("host");
    let emud = Emud::start(&shm, Ipv4Addr::new(127, 0, 5, 40), 45040, &[]);
    let bar = SharedMapping::open(&shm.bar, None, false).unwrap();
    assert_eq!(bar.len() as u64, BAR_SIZE);
    let ram = SharedMapping::open(&shm.ram, None, false).unwrap();
    assert_eq!(ram.len() as u64, RAM_MB << 20);
    // SAFETY: the BAR mapping lives until the end of the test, after the driver is gone, and
    // no Rust reference to it is formed.
    let regs = unsafe { MmioBar::new(bar.as_ptr(), bar.len()) };
    let dma: Arc<dyn DmaAllocator> = Arc::new(RamDma {
        map: ram,
        next: Mutex::new(1 << 20),
    });
    let dev = mlx5::Device::probe(
        regs,
        dma,
        RealTime::new(),
        mlx5::Config {
            init_timeout_ns: 10_000_000_000,
            cmd_timeout_ns: 10_000_000_000,
            bar_size: BAR_SIZE,
            ..mlx5::Config::default()
        },
    )
    .expect("bring-up through the shared files");
    assert_eq!(dev.fw_version(), nic_emulator::Profile::default().fw_rev);
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, Gid::from_ipv4([127, 0, 5, 40]).0, mac)
        .unwrap();
    dev.shutdown().unwrap();
    let err = emud.finish_clean();
    assert!(err.contains("commands"), "{err}");
}

/// `nic-emud --family efa` serves the EFA driver through the two shared files, as a guest
/// would reach it: the identity page in the BAR file names the PCI ids and where the doorbell
/// and memory BARs are, the driver takes those windows of a second mapping as its BARs (the
/// daemon's poller finds its writes), DMA is at "guest-physical" addresses in the RAM file.
/// Bring-up, an SRD SEND and RDMA READ to its own address (through the UDP fabric) with every
/// byte checked, teardown; the daemon then exits cleanly with no device errors and nothing
/// left alive.
#[test]
fn nic_emud_serves_the_efa_driver_through_the_shared_files() {
    use verbs::{
        AccessFlags, AhAttr, Provider, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState, QpType,
        QueuePair, RecvWr, RemoteOp, SendWr, Sge, UdDest, WorkCompletion, WrOpcode,
    };
    let shm = Shm::new("efa");
    let ip = Ipv4Addr::new(127, 0, 5, 41);
    let emud = Emud::start(&shm, ip, 45041, &["--family", "efa"]);
    let bar = Arc::new(SharedMapping::open(&shm.bar, None, false).unwrap());
    let ram = SharedMapping::open(&shm.ram, None, false).unwrap();
    let mut hb = [0u8; nic_emulator::efa::HEADER_LEN];
    assert!(bar.read(nic_emulator::efa::HEADER_OFF, &mut hb));
    let h = nic_emulator::efa::ShmHeader::parse(&hb).expect("the EFA identity page");
    assert_eq!((h.vendor, h.device), (0x1d0f, 0xefa1));
    assert!(efa::is_supported_pci(h.vendor, h.device));
    let win = |off: u32, len: u32| {
        nic_testbed::efa::ShmWindow::new(&bar, off as usize, len as usize).expect("window")
    };
    let dma: Arc<dyn DmaAllocator> = Arc::new(RamDma {
        map: ram,
        next: Mutex::new(1 << 20),
    });
    let config = efa::Config {
        device_id: h.device,
        ..Default::default()
    };
    let mut dev = efa::Device::probe(win(h.regs.0, h.regs.1), dma, RealTime::new(), config)
        .expect("EFA bring-up through the shared files");
    assert_eq!(u32::from(dev.attributes().db_bar), h.doorbells.0);
    dev.attach_data_bars(win(h.llq.0, h.llq.1), win(h.doorbells.1, h.doorbells.2));
    let gid = dev.query_gid(1, 0).unwrap();
    assert_eq!(gid, Gid::from_ipv4(ip.octets()));

    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(64, 0, None).unwrap();
    let (mut qp, _) = dev
        .create_qp(
            &pd,
            &QpInitAttr {
                qp_type: QpType::Srd,
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCap {
                    max_send_wr: 16,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: true,
            },
        )
        .unwrap();
    let qkey = 0x11;
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qkey,
        ..Default::default()
    };
    dev.modify_qp(&mut qp, &a, M::STATE | M::PORT | M::PKEY_INDEX | M::QKEY)
        .unwrap();
    for (st, m) in [
        (QpState::Rtr, M::STATE),
        (QpState::Rts, M::STATE | M::SQ_PSN),
    ] {
        let a = QpAttr {
            qp_state: st,
            ..Default::default()
        };
        dev.modify_qp(&mut qp, &a, m).unwrap();
    }
    let mr = dev
        .reg_mr(
            &pd,
            dev.alloc_buf(1 << 16).unwrap(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    let ah = dev
        .create_ah(
            &pd,
            &AhAttr {
                dgid: gid,
                port_num: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let b = mr.buffer().unwrap();
    let sge = |off: u64, len: u32| Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    };
    let wait = |n: usize| {
        let mut got = Vec::new();
        let mut wc = [WorkCompletion::default(); 4];
        let end = Instant::now() + Duration::from_secs(30);
        while got.len() < n && Instant::now() < end {
            let k = dev.poll_cq(&cq, &mut wc).unwrap();
            got.extend_from_slice(&wc[..k]);
            thread::yield_now();
        }
        assert_eq!(got.len(), n, "completions");
        got.sort_by_key(|w| w.wr_id);
        got
    };
    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
    b.write(0, &msg).unwrap();
    let r = [sge(8192, 8192)];
    dev.post_recv(
        &mut qp,
        &[RecvWr {
            wr_id: 2,
            sg_list: &r,
        }],
    )
    .unwrap();
    let s = [sge(0, 5000)];
    let qpn = qp.qp_num();
    let dest = || UdDest {
        ah: &ah,
        remote_qpn: qpn,
        remote_qkey: qkey,
    };
    let wr = SendWr {
        wr_id: 1,
        sg_list: &s,
        dest: Some(dest()),
        ..Default::default()
    };
    dev.post_send(&mut qp, &[wr]).unwrap();
    let c = wait(2);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!(
        (c[1].wr_id, c[1].status, c[1].byte_len),
        (2, WcStatus::Success, 5000)
    );
    let mut back = vec![0u8; 5000];
    b.read(8192, &mut back).unwrap();
    assert_eq!(back, msg);
    let l = [sge(20000, 5000)];
    let wr = SendWr {
        wr_id: 3,
        opcode: WrOpcode::RdmaRead,
        sg_list: &l,
        remote: RemoteOp::Rdma {
            remote_addr: mr.addr(),
            rkey: mr.rkey(),
        },
        dest: Some(dest()),
        ..Default::default()
    };
    dev.post_send(&mut qp, &[wr]).unwrap();
    let c = wait(1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].opcode),
        (3, WcStatus::Success, WcOpcode::RdmaRead)
    );
    b.read(20000, &mut back).unwrap();
    assert_eq!(back, msg);

    dev.destroy_qp(qp).map_err(|e| e.error).unwrap();
    dev.destroy_ah(ah).map_err(|e| e.error).unwrap();
    dev.dereg_mr(mr).map_err(|e| e.error).unwrap();
    dev.destroy_cq(cq).map_err(|e| e.error).unwrap();
    dev.dealloc_pd(pd).map_err(|e| e.error).unwrap();
    dev.shutdown().unwrap();
    let err = emud.finish_clean();
    assert!(err.contains("srd_delivered: 1"), "{err}");
}

/// One message of the ivshmem protocol as a client receives it: the value and the file
/// descriptor that came with it.
fn recv_ivshmem(sock: &std::os::unix::net::UnixStream) -> (i64, Option<std::os::fd::OwnedFd>) {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mut bytes = [0u8; 8];
    let mut iov = libc::iovec {
        iov_base: bytes.as_mut_ptr().cast(),
        iov_len: 8,
    };
    let mut control = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: `msg` points at live buffers of the sizes it states.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    assert_eq!(n, 8, "one whole message");
    let mut fd = None;
    // SAFETY: the kernel filled `control` as msg_controllen says; the header macros stay
    // inside it, and a passed descriptor is ours to own.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        if !c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS {
            let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<i32>());
            fd = Some(std::os::fd::OwnedFd::from_raw_fd(raw));
        }
    }
    (i64::from_le_bytes(bytes), fd)
}

/// nic-emud as an ivshmem-doorbell server, this test as its QEMU: the setup messages (version,
/// peer ID, the BAR file, an eventfd per vector), and a relay thread that turns each eventfd
/// signal into a delivery of its vector. A driver over the shared files arms a CQ on a
/// completion channel (its first arm: a doorbell word of 0, which only the UAR page shows)
/// and sends to itself; `wait_cq_event`, which only an interrupt can wake, returns the
/// event after the channel's vector fired.
#[test]
fn nic_emud_signals_an_armed_eq_through_the_ivshmem_eventfd() {
    use std::os::fd::AsRawFd;
    use verbs::rc::RcParams;
    use verbs::{
        AccessFlags, AhAttr, Buffer, Mtu, Provider, QpCap, QpInitAttr, QpType, RecvWr, RemoteOp,
        SendWr, Sge, WrOpcode,
    };
    let shm = Shm::new("door");
    let ip = Ipv4Addr::new(127, 0, 5, 43);
    let sock_path = shm.sock.to_string_lossy().into_owned();
    let emud = Emud::start(&shm, ip, 45043, &["--ivshmem-server", &sock_path]);
    let sock = std::os::unix::net::UnixStream::connect(&shm.sock).expect("connect");
    assert_eq!(recv_ivshmem(&sock).0, 0, "protocol version");
    let (id, none) = recv_ivshmem(&sock);
    assert!(none.is_none() && id >= 0, "peer id {id}");
    let (m, shm_fd) = recv_ivshmem(&sock);
    assert_eq!(m, -1);
    let shm_file = std::fs::File::from(shm_fd.expect("the BAR file's descriptor"));
    assert_eq!(shm_file.metadata().unwrap().len(), BAR_SIZE);
    let vectors: Vec<std::os::fd::OwnedFd> = (0..VECTORS)
        .map(|v| {
            let (m, fd) = recv_ivshmem(&sock);
            assert_eq!(m, id, "interrupt setup of vector {v}");
            fd.expect("an eventfd")
        })
        .collect();

    // QEMU's part: each eventfd signal becomes a delivery of that vector.
    let irq = IrqLines::new(VECTORS);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let relay = {
        let (irq, stop) = (irq.clone(), stop.clone());
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut pfds: Vec<libc::pollfd> = vectors
                    .iter()
                    .map(|f| libc::pollfd {
                        fd: f.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    })
                    .collect();
                // SAFETY: a live array of pollfds of the stated length.
                unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, 50) };
                for (v, p) in pfds.iter().enumerate() {
                    if p.revents & libc::POLLIN != 0 {
                        let mut b = [0u8; 8];
                        // SAFETY: reads 8 bytes into a live buffer from a readable eventfd.
                        unsafe { libc::read(p.fd, b.as_mut_ptr().cast(), 8) };
                        irq.raise(v as u16);
                    }
                }
            }
        })
    };
    let bar = SharedMapping::open(&shm.bar, None, false).unwrap();
    let ram = SharedMapping::open(&shm.ram, None, false).unwrap();
    // SAFETY: the BAR mapping outlives the driver; no Rust reference to it is formed.
    let regs = unsafe { MmioBar::new(bar.as_ptr(), bar.len()) };
    let dma: Arc<dyn DmaAllocator> = Arc::new(RamDma {
        map: ram,
        next: Mutex::new(1 << 20),
    });
    let dev = mlx5::Device::probe(
        regs,
        dma,
        RealTime::new().with_interrupts(irq.clone()),
        mlx5::Config {
            init_timeout_ns: 10_000_000_000,
            cmd_timeout_ns: 10_000_000_000,
            bar_size: BAR_SIZE,
            // only an interrupt (or the timeout) ends the wait's sleep
            irq_recheck_ns: u64::MAX,
            ..mlx5::Config::default()
        },
    )
    .expect("bring-up through the shared files");
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, Gid::from_ipv4(ip.octets()).0, mac)
        .unwrap();
    let mut ch = Provider::create_comp_channel(&dev).unwrap();
    let vector = ch.vector();
    assert_eq!(vector, 1, "the first completion vector");
    let pd = Provider::alloc_pd(&dev).unwrap();
    let cq = Provider::create_cq(&dev, 15, 0x51, Some(&ch)).unwrap();
    let mem: Buffer = Provider::alloc_buf(&dev, 512).unwrap();
    let mr = Provider::reg_mr(&dev, &pd, mem.clone(), AccessFlags::LOCAL_WRITE).unwrap();
    let qp = || {
        Provider::create_qp(
            &dev,
            &pd,
            &QpInitAttr {
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
        .unwrap()
        .0
    };
    let (mut qa, mut qb) = (qp(), qp());
    let params = |qpn| RcParams {
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
        ..RcParams::default()
    };
    let (na, nb) = (qa.qpn(), qb.qpn());
    verbs::rc::connect(&dev, &mut qa, &params(nb)).unwrap();
    verbs::rc::connect(&dev, &mut qb, &params(na)).unwrap();
    let sg_b = [Sge {
        addr: mr.addr() + 256,
        length: 256,
        lkey: mr.lkey(),
    }];
    Provider::post_recv(
        &dev,
        &mut qb,
        &[RecvWr {
            wr_id: 1,
            sg_list: &sg_b,
        }],
    )
    .unwrap();
    Provider::req_notify_cq(&dev, &cq, false).unwrap();
    let before = nic_hal::Interrupts::count(&*irq, vector);
    let sg_a = [Sge {
        addr: mr.addr(),
        length: 64,
        lkey: mr.lkey(),
    }];
    Provider::post_send(
        &dev,
        &mut qa,
        &[SendWr {
            wr_id: 2,
            opcode: WrOpcode::Send,
            flags: SendFlags::SIGNALED,
            sg_list: &sg_a,
            remote: RemoteOp::None,
            ..SendWr::default()
        }],
    )
    .unwrap();
    let ev = dev
        .wait_cq_event(&mut ch, 30_000_000_000)
        .unwrap()
        .expect("the completion event (no interrupt woke the wait)");
    // The eventfd's reader counts the vector on its own thread: the wait may have found the
    // EQE before that thread ran, so the count is awaited, not read once.
    let deadline = Instant::now() + Duration::from_secs(30);
    while nic_hal::Interrupts::count(&*irq, vector) <= before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        nic_hal::Interrupts::count(&*irq, vector) > before,
        "vector {vector} never fired"
    );
    assert_eq!((ev.cqn, ev.cq_context), (cq.cqn(), 0x51));
    let t = Instant::now();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let mut wc = [verbs::WorkCompletion::default(); 2];
        let n = Provider::poll_cq(&dev, &cq, &mut wc).unwrap();
        seen.extend(wc[..n].iter().map(|w| (w.wr_id, w.status)));
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "completions: {seen:?}"
        );
    }
    seen.sort_unstable_by_key(|w| w.0);
    assert_eq!(seen, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    Provider::destroy_qp(&dev, qa).unwrap();
    Provider::destroy_qp(&dev, qb).unwrap();
    Provider::dereg_mr(&dev, mr).unwrap();
    drop(mem);
    Provider::destroy_cq(&dev, cq).unwrap();
    Provider::destroy_comp_channel(&dev, ch).unwrap();
    Provider::dealloc_pd(&dev, pd).unwrap();
    dev.shutdown().unwrap();
    stop.store(true, Ordering::Relaxed);
    relay.join().unwrap();
    drop(sock);
    let err = emud.finish_clean();
    assert!(
        err.contains("interrupts DoorbellStats { guests: 1, delivered: "),
        "{err}"
    );
}

/// A bad command line is refused with status 2 and a message; a file that cannot be mapped
/// with status 1.
#[test]
fn nic_emud_refuses_bad_setups() {
    let out = Command::new(emud())
        .args([
            "--bar",
            "/dev/shm/x",
            "--ram",
            "/dev/shm/y",
            "--ram-size",
            "64M",
        ])
        .args(["--ip", "10.0.0.1", "--udp-port", "45041"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not in 127.0.0.0/8"));
    let out = Command::new(emud())
        .args([
            "--bar",
            "/nonexistent-dir/bar",
            "--ram",
            "/dev/shm/y",
            "--ram-size",
            "64M",
        ])
        .args(["--ip", "127.0.5.41", "--udp-port", "45041"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bar /nonexistent-dir/bar"));
    let out = Command::new(emud()).arg("--help").output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("--fault"));
}

/// SIGTERM stops the daemon cleanly (exit 0, summary on stderr) even with `--ignore-stdin`.
#[test]
fn nic_emud_stops_on_sigterm() {
    let shm = Shm::new("term");
    let mut e = Emud::start(
        &shm,
        Ipv4Addr::new(127, 0, 5, 42),
        45042,
        &["--ignore-stdin"],
    );
    // stdin closed: ignored
    drop(e.stdin.take());
    thread::sleep(Duration::from_millis(200));
    assert!(e.child.try_wait().unwrap().is_none(), "exited on stdin EOF");
    let st = Command::new("kill")
        .args(["-TERM", &e.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let (status, err) = e.finish();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
    assert!(
        err.contains("nic-emud: stopped; 0 commands, 0 device errors; nothing alive;"),
        "{err}"
    );
}

// ------------------------------------------------------------------ the guest

/// Boots without a NIC: console, heap, memory map, PCI scan, TSC; exit status 33.
#[test]
fn unikernel_boots_and_reports_its_machine() {
    let vm = Vm::boot(None, "scenario=hello");
    let e = vm.wait();
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: rdma-unikernel, PVH boot, cmdline 'scenario=hello'",
        "UK: memmap 0x0000100000-",
        "UK: PCI 00:00.0 8086:29c0",
        "UK: heap and DMA ok",
        "RESULT PASS hello",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
}

/// A CPU exception in the guest is reported on the console (vector, rip, cr2) and ends the
/// run with the panic status, not a silent triple fault.
#[test]
fn unikernel_reports_a_page_fault() {
    let e = Vm::boot(None, "scenario=fault").wait();
    assert_eq!(e.code, Some(EXIT_PANIC), "{}", e.text());
    assert!(
        e.serial.iter().any(|(_, l)| l
            .starts_with("EXCEPTION 14 (#PF page fault) error 0x0 at rip ")
            && l.ends_with(" cr2 0x10000000000")),
        "{}",
        e.text()
    );
    assert!(!e.has("RESULT"), "{}", e.text());
}

/// The loopback scenario: bring-up, a CM connection with both ends in the guest on one
/// thread, SEND, RDMA WRITE and RDMA READ with the data checked, disconnect, teardown.
/// The EFA at the unikernel level: `nic-emud --family efa` behind `ivshmem-plain`; the image
/// finds the EFA through the identity page, probes the EFA driver, and sends to itself on an
/// SRD and a UD QP and RDMA-READs its own buffer, every completion and byte checked.
#[test]
fn unikernel_efa_loopback_srd_ud_and_read() {
    let shm = Shm::new("efa-loop");
    let ip = Ipv4Addr::new(127, 0, 5, 12);
    let emud = Emud::start(&shm, ip, 45012, &["--family", "efa"]);
    let vm = Vm::boot(Some(&shm), &format!("scenario=efa-loopback ip={ip}"));
    let e = vm.wait();
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: NIC 1af4:1110",
        "UK: EFA 1d0f:efa1 behind ivshmem",
        "UK: EFA bring-up ok",
        "UK: EFA Srd SEND 3 x 6000 bytes to itself ok, data checked",
        "UK: EFA RDMA READ 6000 bytes from itself ok, data checked",
        "UK: EFA Ud SEND 3 x 1000 bytes to itself ok, data checked",
        "UK: teardown complete, all DMA memory returned",
        "RESULT PASS efa-loopback",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
    let err = emud.finish_clean();
    assert!(err.contains("srd_delivered: 3"), "{err}");
}

#[test]
fn unikernel_loopback_send_write_read() {
    let shm = Shm::new("loop");
    let ip = Ipv4Addr::new(127, 0, 5, 10);
    let emud = Emud::start(&shm, ip, 45010, &[]);
    let vm = Vm::boot(Some(&shm), &format!("scenario=loopback ip={ip} port=7471"));
    let e = vm.wait();
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: NIC 1af4:1110",
        "UK: bring-up ok",
        "UK: connected 127.0.5.10:7471 <-> itself",
        "UK: SEND 256 bytes ok, data checked",
        "UK: RDMA WRITE 16384 bytes ok, data checked",
        "UK: RDMA READ 16384 bytes ok, data checked",
        "UK: disconnected",
        "UK: teardown complete, all DMA memory returned",
        "RESULT PASS loopback",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
    let first = e.at("UK: first completion").unwrap();
    let line = &e
        .serial
        .iter()
        .find(|(_, l)| l.contains("UK: first completion"))
        .unwrap()
        .1;
    eprintln!(
        "loopback: QEMU start to first completion {:.3} s (wall); guest: {line}",
        first.as_secs_f64()
    );
    emud.finish_clean();
}

/// The interrupt scenario: the NIC is an ivshmem-doorbell served by nic-emud, the image
/// points the MSI-X table at its local APIC, and a completion wait halts the CPU until the
/// completion channel's vector fires (the completion: a SEND's error completion after its
/// ACK timeout, about half a second). The image prints how much of the wait the CPU was not
/// halted (`CPU busy`); the test checks the behaviour (woken by the vector, the completion
/// is the expected one), not the timing.
#[test]
fn unikernel_completion_wait_halts_until_msi_x() {
    let shm = Shm::new("irq");
    let ip = Ipv4Addr::new(127, 0, 5, 50);
    let sock = shm.sock.to_string_lossy().into_owned();
    let emud = Emud::start(
        &shm,
        ip,
        45050,
        &["--ivshmem-server", &sock, "--vectors", &VECTORS.to_string()],
    );
    let vm = Vm::boot_on(Some(&shm), &format!("scenario=irq ip={ip}"), true);
    let e = vm.wait();
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: MSI-X on: 8 vectors",
        "UK: bring-up ok, vector 0 (driver EQ) fired",
        "UK: IRQ woken ok: completion RetryExcErr",
        "UK: teardown complete, all DMA memory returned",
        "RESULT PASS irq",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
    let line = &e
        .serial
        .iter()
        .find(|(_, l)| l.contains("UK: IRQ wait over: "))
        .unwrap_or_else(|| panic!("no wait line:\n{}", e.text()))
        .1;
    eprintln!("irq: {line}");
    let fired: u64 = line
        .split(" fired ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(fired > 0, "the channel's vector never fired: {line}");
    let err = emud.finish_clean();
    assert!(
        err.contains("interrupts DoorbellStats { guests: 1, delivered: "),
        "{err}"
    );
    assert!(!err.contains("delivered: 0,"), "{err}");
}

/// The failure scenario: nic-emud refuses bring-up (ENABLE_HCA fails); the guest reports the
/// driver's error on serial and exits with the failure status.
#[test]
fn unikernel_reports_a_refused_bring_up() {
    let shm = Shm::new("fail");
    let ip = Ipv4Addr::new(127, 0, 5, 30);
    let mut emud = Emud::start(&shm, ip, 45030, &["--fault", "refuse-bringup"]);
    let vm = Vm::boot(Some(&shm), &format!("scenario=bringup ip={ip}"));
    let e = vm.wait();
    assert_eq!(e.code, Some(EXIT_FAIL), "{}", e.text());
    let line = e
        .serial
        .iter()
        .map(|(_, l)| l.as_str())
        .find(|l| l.starts_with("RESULT FAIL bringup: bring-up:"))
        .unwrap_or_else(|| panic!("no failure line:\n{}", e.text()));
    assert!(
        line.contains(
            "ENABLE_HCA: command 0x104 failed: status 0x4 (BAD_SYS_STATE), syndrome 0xbad0001"
        ),
        "{line}"
    );
    assert!(!e.has("RESULT PASS"), "{}", e.text());
    let (status, err) = emud.finish();
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{err}");
}

/// The server scenario: the guest listens; a client on the host (our stack on an in-process
/// emulated NIC on the UDP fabric) connects, RDMA-READs the guest's buffer, RDMA-WRITEs
/// another, SENDs a note and disconnects; the guest checks what was written.
#[test]
fn unikernel_server_with_a_host_client() {
    const UDP_PORT: u16 = 45020;
    const PORT: u16 = 7472;
    let shm = Shm::new("srv");
    let guest_ip = Ipv4Addr::new(127, 0, 5, 20);
    let host_ip = Ipv4Addr::new(127, 0, 5, 21);
    let emud = Emud::start(&shm, guest_ip, UDP_PORT, &[]);

    let nic = UdpNic::new(host_ip, UDP_PORT, nic_emulator::Profile::default()).unwrap();
    let dev = nic.probe(mlx5::Config::default()).unwrap();
    let mac = dev.mac().unwrap();
    dev.set_roce_gid(0, Gid::from_ipv4(host_ip.octets()).0, mac)
        .unwrap();
    let cm = Cm::new(
        nic.platform(),
        CmConfig {
            wait_limit_ns: Some(60_000_000_000),
            ..CmConfig::default()
        },
    );
    let devid = cm.add_device(dev, mac).map_err(|(e, _)| e).unwrap();
    let guest_mac = nic_emulator::Profile::default().mac;
    cm.add_neighbor(guest_ip, Neighbor { mac: guest_mac });

    let mac_s = mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    let mut vm = Vm::boot(
        Some(&shm),
        &format!("scenario=server ip={guest_ip} port={PORT} peer={host_ip} peer_mac={mac_s}"),
    );
    let listening = vm.wait_for("UK: server listening on", Duration::from_secs(90));
    if !listening {
        let e = vm.wait();
        panic!("the guest did not listen:\n{}", e.text());
    }
    assert!(
        vm.serial
            .iter()
            .any(|(_, l)| l.contains(&format!("UK: mac {}", fmt_mac(&guest_mac))))
    );

    let client = (|| -> Result<(), String> {
        let hints = AddrInfo {
            ai_src_addr: Some(format!("{host_ip}:0").parse().unwrap()),
            ..AddrInfo::default()
        };
        let res = getaddrinfo(
            Some(&guest_ip.to_string()),
            Some(&PORT.to_string()),
            Some(&hints),
        )
        .map_err(|e| format!("getaddrinfo: {e:?}"))?;
        let mut attr = cm::QpInitAttr {
            cap: verbs::QpCap {
                max_send_wr: 8,
                max_recv_wr: 8,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: true,
            ..cm::QpInitAttr::default()
        };
        let id = cm
            .create_ep(&res, None, Some(&mut attr))
            .map_err(|e| format!("create_ep: {e}"))?;
        let r = (|| -> Result<(), String> {
            id.connect(Some(&ConnParam {
                responder_resources: 1,
                initiator_depth: 1,
                retry_count: 7,
                rnr_retry_count: 7,
                ..ConnParam::default()
            }))
            .map_err(|e| format!("connect: {e}"))?;
            let ev = id.event().ok_or("no ESTABLISHED event")?;
            let pd = ev.param.private_data();
            assert!(pd.len() >= 28, "server info in the REP: {pd:?}");
            let u64at = |o: usize| u64::from_be_bytes(pd[o..o + 8].try_into().unwrap());
            let u32at = |o: usize| u32::from_be_bytes(pd[o..o + 4].try_into().unwrap());
            let (waddr, wkey, raddr, rkey, len) =
                (u64at(0), u32at(8), u64at(12), u32at(20), u32at(24) as usize);
            assert_eq!(len, 16384);
            let mem = id
                .alloc_buf(2 * len + 64)
                .map_err(|e| format!("alloc_buf: {e}"))?;
            let mr = id
                .reg_msgs(mem.clone())
                .map_err(|e| format!("reg_msgs: {e}"))?;
            let base = mr.addr();
            // READ the guest's buffer
            id.post_read(1, base, len as u32, &mr, SendFlags::SIGNALED, raddr, rkey)
                .map_err(|e| format!("post_read: {e}"))?;
            let wc = id.get_send_comp().map_err(|e| format!("read comp: {e}"))?;
            assert_eq!(
                (wc.status, wc.opcode),
                (WcStatus::Success, WcOpcode::RdmaRead)
            );
            let mut got = vec![0u8; len];
            mem.read(0, &mut got).unwrap();
            assert!(
                got == pattern(5, len),
                "RDMA READ of the guest's buffer: wrong data"
            );
            // WRITE ours into the other
            mem.write(len, &pattern(6, len)).unwrap();
            id.post_write(
                2,
                base + len as u64,
                len as u32,
                &mr,
                SendFlags::SIGNALED,
                waddr,
                wkey,
            )
            .map_err(|e| format!("post_write: {e}"))?;
            let wc = id.get_send_comp().map_err(|e| format!("write comp: {e}"))?;
            assert_eq!(
                (wc.status, wc.opcode),
                (WcStatus::Success, WcOpcode::RdmaWrite)
            );
            // the note
            let note = b"host client: wrote 16384 bytes";
            mem.write(2 * len, note).unwrap();
            id.post_send(
                3,
                base + 2 * len as u64,
                note.len() as u32,
                &mr,
                SendFlags::SIGNALED,
            )
            .map_err(|e| format!("post_send: {e}"))?;
            let wc = id.get_send_comp().map_err(|e| format!("send comp: {e}"))?;
            assert_eq!((wc.status, wc.opcode), (WcStatus::Success, WcOpcode::Send));
            id.disconnect().map_err(|e| format!("disconnect: {e}"))?;
            id.dereg_mr(mr).map_err(|e| format!("dereg: {e}"))?;
            Ok(())
        })();
        id.destroy_ep();
        r
    })();
    let e = vm.wait();
    client.unwrap_or_else(|m| panic!("host client: {m}\nguest:\n{}", e.text()));
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: connect request from",
        "UK: note from the client: \"host client: wrote 16384 bytes\"",
        "UK: client's RDMA WRITE of 16384 bytes checked",
        "UK: disconnected",
        "RESULT PASS server",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
    let p = cm.remove_device(devid).unwrap();
    p.shutdown().unwrap();
    assert_eq!(nic.live(), nic_emulator::Live::default());
    emud.finish_clean();
}

/// The guest's test pattern (`scenario::pattern` in the image).
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(31)
                .wrapping_add(u32::from(seed) * 7 + (i >> 8) as u32) as u8
        })
        .collect()
}

fn fmt_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The appliance: the guest serves a RAM namespace as an NVMe-oF target on RDMA (the
/// `nvmf-target` scenario: every queue from one polling loop), and our host (nvmf-rdma's, on
/// an emulated NIC on the UDP fabric) connects the admin queue and two I/O queues,
/// identifies, writes a pattern (keyed and in-capsule), reads it back on the other queue
/// with the data checked, flushes, gets the target's NVMe status for a read past the
/// namespace's end, and disconnects; the guest reports every queue closed cleanly, tears its
/// stack down and passes.
#[test]
fn unikernel_nvmf_target_serves_our_host() {
    use nvmf::host::{ConnectParams, HostError};
    use nvmf::status::Status;
    use nvmf_rdma::host::{QueueConfig, connect_queue};
    use nvmf_rdma::net::Endpoint;

    const UDP_PORT: u16 = 45064;
    const PORT: u16 = 4420;
    const SUBNQN: &str = "nqn.2024-01.io.rdma-stack:unikernel-ram";
    const NS_MIB: u64 = 4;
    let shm = Shm::new("nvmf");
    let guest_ip = Ipv4Addr::new(127, 0, 5, 64);
    let host_ip = Ipv4Addr::new(127, 0, 5, 65);
    let emud = Emud::start(&shm, guest_ip, UDP_PORT, &[]);
    let opened = device_open::Open::open(device_open::UdpEmu {
        ip: host_ip,
        fabric_port: UDP_PORT,
    })
    .unwrap();
    let (ep, backing) = Endpoint::new(opened, 60_000_000_000).unwrap();
    let guest_mac = nic_emulator::Profile::default().mac;
    ep.cm.add_neighbor(guest_ip, Neighbor { mac: guest_mac });
    let host_mac = device_open::mac_for(host_ip);

    let mut vm = Vm::boot(
        Some(&shm),
        &format!(
            "scenario=nvmf-target ip={guest_ip} peer={host_ip} peer_mac={} queues=3 ns_mib={NS_MIB}",
            fmt_mac(&host_mac)
        ),
    );
    if !vm.wait_for("UK: nvmf target listening on", Duration::from_secs(90)) {
        let e = vm.wait();
        panic!("the guest did not listen:\n{}", e.text());
    }

    let dst = std::net::SocketAddr::from((guest_ip, PORT));
    let host = (|| -> Result<(), String> {
        let params = ConnectParams {
            hostnqn: "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-0000000000a1".into(),
            hostid: *b"uk-nvmf-host-001",
            subnqn: SUBNQN.into(),
            kato: 120_000,
            disable_sqflow: false,
        };
        let e = |what: &'static str| move |err: HostError<_>| format!("{what}: {err:?}");
        let mut admin = connect_queue(
            &ep,
            dst,
            QueueConfig {
                qid: 0,
                depth: 32,
                slot_size: 4096,
                inline: 0,
            },
        )
        .map_err(|err| format!("admin queue: {err}"))?;
        let cntlid = admin.connect_admin(&params).map_err(e("connect admin"))?;
        admin.enable(1000).map_err(e("enable"))?;
        let ctrl = admin.identify_controller().map_err(e("identify"))?;
        assert_eq!((ctrl.cntlid, ctrl.subnqn.as_str()), (cntlid, SUBNQN));
        let ns = admin.identify_namespace(1).map_err(e("identify ns"))?;
        assert_eq!((ns.nsze, ns.lbads), ((NS_MIB << 20) / 512, 9));
        assert_eq!(admin.set_num_queues(2).map_err(e("set features"))?, 2);
        admin.keep_alive().map_err(e("keep alive"))?;

        // Two I/O queues open at once (the guest's one loop serves all three).
        let mut ios = Vec::new();
        for qid in 1..=2 {
            let mut q = connect_queue(
                &ep,
                dst,
                QueueConfig {
                    qid,
                    depth: 16,
                    slot_size: 64 * 1024,
                    inline: 4096,
                },
            )
            .map_err(|err| format!("I/O queue {qid}: {err}"))?;
            assert_eq!(q.connect(&params, cntlid).map_err(e("connect io"))?, cntlid);
            ios.push(q);
        }
        let mut io2 = ios.pop().unwrap();
        let mut io = ios.pop().unwrap();
        // Keyed (RDMA READ by the target) and in-capsule writes, read back (RDMA WRITE) on
        // the other queue.
        let big = pattern(9, 64 * 1024);
        let small = pattern(10, 2048);
        io.write(1, 0, 512, &big).map_err(e("write 64 KiB"))?;
        io2.write(1, 1000, 512, &small).map_err(e("write 2 KiB"))?;
        let mut got = vec![0u8; big.len()];
        io2.read(1, 0, 512, &mut got).map_err(e("read 64 KiB"))?;
        assert!(got == big, "64 KiB read back: wrong data");
        let mut got = vec![0u8; small.len()];
        io.read(1, 1000, 512, &mut got).map_err(e("read 2 KiB"))?;
        assert!(got == small, "2 KiB read back: wrong data");
        io.flush(1).map_err(e("flush"))?;
        // Past the end: LBA Out of Range with DNR, from the guest's target.
        let last = (NS_MIB << 20) / 512 - 1;
        let mut buf = vec![0u8; 1024];
        match io.read(1, last, 512, &mut buf) {
            Err(HostError::Status(s, _)) => {
                assert_eq!(s.code(), Status::LBA_RANGE, "{s:?}");
                assert!(s.is_dnr());
            }
            other => return Err(format!("read past the end: {other:?}")),
        }
        admin.keep_alive().map_err(e("keep alive"))?;
        // I/O queue 1 leaves with a Fabrics Disconnect, queue 2 with the CM disconnect only,
        // the admin queue after a shutdown.
        io.disconnect().map_err(e("disconnect io"))?;
        io.transport.close();
        io2.transport.close();
        admin.shutdown().map_err(e("shutdown"))?;
        admin.transport.close();
        Ok(())
    })();
    let e = vm.wait();
    host.unwrap_or_else(|m| panic!("host: {m}\nguest:\n{}", e.text()));
    assert_eq!(e.code, Some(EXIT_PASS), "{}", e.text());
    for needle in [
        "UK: nvmf: queue 0 accepted",
        "UK: nvmf: queue 1 accepted",
        "UK: nvmf: queue 1 closed",
        "UK: nvmf: queue 2 accepted",
        "UK: nvmf: queue 2 closed",
        "UK: nvmf: queue 0 closed",
        "UK: nvmf target served ",
        "(0 requests rejected, 0 queues failed",
        "UK: teardown complete, all DMA memory returned",
        "RESULT PASS nvmf-target",
    ] {
        assert!(e.has(needle), "missing {needle:?}:\n{}", e.text());
    }
    let served = &e
        .serial
        .iter()
        .find(|(_, l)| l.contains("UK: nvmf target served "))
        .unwrap()
        .1;
    let (Some(listening), Some(passed)) = (
        e.at("UK: nvmf target listening on"),
        e.at("RESULT PASS nvmf-target"),
    ) else {
        panic!("{}", e.text());
    };
    eprintln!(
        "nvmf-target: listening {:.3} s after QEMU start, host done and guest passed {:.3} s later; {served}",
        listening.as_secs_f64(),
        (passed - listening).as_secs_f64()
    );
    // The host's ids are all gone (each disconnect answered).
    assert_eq!(ep.cm.live(), (0, 0));
    drop(ep);
    drop(backing);
    emud.finish_clean();
}

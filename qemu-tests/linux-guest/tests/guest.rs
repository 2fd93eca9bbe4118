//! The stack through real kernel VFIO: a Debian kernel in QEMU (TCG, q35, intel-iommu), the
//! emulated NIC as an ivshmem function whose BAR and the guest's RAM are shared files served
//! by `nic-emud` on the host, and the statically linked `vfio-guest` tool in the guest
//! (vfio-attach, IOVA = guest-physical address, mlx5, cm).
//!
//! The harness builds everything it needs: the Debian packages are fetched into
//! `target/guest-cache` (guest-kit; reused when there), `vfio-guest` is built with
//! `+crt-static` for `x86_64-unknown-linux-gnu` and `nic-emud` natively, both by a nested
//! cargo in `<target>/guest-build`.
//!
//! Addresses: 127.0.6.0/24; UDP ports 46000-46099. The EFA case runs the same way with
//! `nic-emud --family efa` and `vfio-guest --mode efa-loopback`.

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};
use std::time::{Duration, Instant};

use cm::{Cm, CmConfig, Neighbor};
use guest_kit::{Initramfs, Ivshmem, IvshmemDoorbell, Kit, Qemu};
use linux_guest::{Exchange, Report, client_ep, listen, run_client, serve};
use nic_emulator::Profile;
use nic_testbed::udp::UdpNic;
use verbs::Gid;

const RAM_MIB: u64 = 512;
const BAR_SIZE: u64 = 32 << 20;
/// 2 MiB huge pages reserved in the guest (64 MiB) for DMA buffers over 4 KiB.
const HUGEPAGES: u32 = 32;
const QEMU_TIMEOUT_SECS: u32 = 240;
/// MSI-X vectors of the ivshmem-doorbell function (the emulated NIC's default).
const VECTORS: u16 = 8;
/// The emulated NIC's default MAC.
const EMU_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];

/// `vfio-guest` finds its parameters in these kernel command-line words, which the kernel
/// hands to `/init` as environment variables.
const INIT_BODY: &str = r#"
echo "GUEST-INIT up: $(uname -r), hugepages $(cat /proc/sys/vm/nr_hugepages)"
dev=""
for d in /sys/bus/pci/devices/*; do
  if [ "$(cat $d/vendor)" = "0x1af4" ] && [ "$(cat $d/device)" = "0x1110" ]; then dev=$d; fi
done
if [ -z "$dev" ]; then echo "GUEST-INIT no ivshmem function"; poweroff -f; fi
bdf=$(basename $dev)
echo "GUEST-INIT ivshmem at $bdf, iommu group $(basename $(readlink $dev/iommu_group))"
/bin/vfio-guest --mode unbound --bdf $bdf
echo vfio-pci > $dev/driver_override
echo $bdf > /sys/bus/pci/drivers_probe
echo "GUEST-INIT driver $(basename $(readlink $dev/driver)), /dev/vfio: $(ls /dev/vfio | tr '\n' ' ')"
if [ -n "$vg_peer" ]; then peer="--peer $vg_peer"; else peer=""; fi
if [ "$vg_checks" = "no" ]; then checks=""; else checks="--checks"; fi
for mode in $(echo $vg_mode | tr , ' '); do
  /bin/vfio-guest $checks --bdf $bdf --ip $vg_ip --mode $mode --port $vg_port $peer
  echo "GUEST-INIT vfio-guest exit $?"
done
"#;

struct Built {
    kernel: PathBuf,
    initrd: PathBuf,
    nic_emud: PathBuf,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>` of this test binary (`<target>/<profile>/deps/guest-*`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .nth(3)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| workspace().join("target"))
}

fn cargo_build(args: &[&str], static_crt: bool, dir: &Path) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.arg("build")
        .arg("--release")
        .arg("--manifest-path")
        .arg(workspace().join("Cargo.toml"))
        .args(args)
        .env("CARGO_TARGET_DIR", dir)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS");
    if static_crt {
        // With an explicit --target, RUSTFLAGS reach only the target's crates, not build
        // scripts or proc macros.
        c.env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C strip=debuginfo",
        );
    }
    let out = c.output().map_err(|e| format!("cargo: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo build {args:?} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn build() -> Result<Built, String> {
    let t = Instant::now();
    let dir = target_dir().join("guest-build");
    cargo_build(
        &[
            "-p",
            "linux-guest",
            "--bin",
            "vfio-guest",
            "--target",
            "x86_64-unknown-linux-gnu",
        ],
        true,
        &dir,
    )?;
    cargo_build(&["-p", "nic-emulator", "--bin", "nic-emud"], false, &dir)?;
    let tool = dir.join("x86_64-unknown-linux-gnu/release/vfio-guest");
    let nic_emud = dir.join("release/nic-emud");
    eprintln!("guest: tools built in {:?}", t.elapsed());
    let kit = Kit::new(Kit::default_cache_dir()).map_err(|e| e.to_string())?;
    let kernel = kit.kernel().map_err(|e| e.to_string())?;
    let busybox = kit.busybox().map_err(|e| e.to_string())?;
    let mut init = Initramfs::new();
    init.busybox(&busybox).map_err(|e| e.to_string())?;
    init.modules(&kernel, &["vfio-pci", "vfio_iommu_type1"])
        .map_err(|e| e.to_string())?;
    init.file(&tool, "bin/vfio-guest")
        .map_err(|e| e.to_string())?;
    init.init_script(INIT_BODY);
    let initrd = dir.join("vfio-guest.cpio");
    init.write(&initrd).map_err(|e| e.to_string())?;
    eprintln!(
        "guest: kernel {} and initramfs ready after {:?}",
        kernel.version,
        t.elapsed()
    );
    Ok(Built {
        kernel: kernel.vmlinux,
        initrd,
        nic_emud,
    })
}

fn built() -> &'static Built {
    static B: OnceLock<Result<Built, String>> = OnceLock::new();
    match B.get_or_init(build) {
        Ok(b) => b,
        Err(e) => panic!("building the guest failed: {e}"),
    }
}

/// One QEMU at a time: two TCG guests on a 2-core machine only slow each other down.
static SERIAL: Mutex<()> = Mutex::new(());

/// Unique /dev/shm names, removed on drop.
struct Shm {
    ram: PathBuf,
    bar: PathBuf,
    log: PathBuf,
    /// nic-emud's ivshmem-doorbell socket (when the guest gets MSI-X).
    sock: PathBuf,
}

impl Shm {
    fn new(tag: &str) -> Shm {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = format!("/dev/shm/vfio-guest-{}-{n}-{tag}", std::process::id());
        Shm {
            ram: format!("{base}-ram").into(),
            bar: format!("{base}-bar").into(),
            sock: std::env::temp_dir()
                .join(format!("vfio-guest-{}-{n}-{tag}.sock", std::process::id())),
            log: std::env::temp_dir().join(format!(
                "vfio-guest-{}-{n}-{tag}.serial",
                std::process::id()
            )),
        }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        for p in [&self.ram, &self.bar, &self.log, &self.sock] {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A running nic-emud, stopped (stdin closed, then killed if needed) on drop.
struct Emud {
    child: Child,
    stderr: mpsc::Receiver<String>,
}

impl Emud {
    fn start(b: &Built, shm: &Shm, ip: Ipv4Addr, udp_port: u16) -> Emud {
        Emud::start_with(b, shm, ip, udp_port, &[])
    }

    fn start_with(b: &Built, shm: &Shm, ip: Ipv4Addr, udp_port: u16, extra: &[&str]) -> Emud {
        let mut child = Command::new(&b.nic_emud)
            .arg("--bar")
            .arg(&shm.bar)
            .arg("--bar-size")
            .arg(BAR_SIZE.to_string())
            .arg("--ram")
            .arg(&shm.ram)
            .arg("--ram-size")
            .arg(format!("{RAM_MIB}M"))
            .arg("--ip")
            .arg(ip.to_string())
            .arg("--udp-port")
            .arg(udp_port.to_string())
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn nic-emud");
        let (tx, rx) = mpsc::channel();
        let out = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(l);
            }
        });
        let line = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("nic-emud printed no READY line within 20 s");
        assert!(line.starts_with("READY nic-emud"), "nic-emud said {line:?}");
        let (etx, erx) = mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            let mut s = String::new();
            for l in BufReader::new(err).lines().map_while(Result::ok) {
                s.push_str(&l);
                s.push('\n');
            }
            let _ = etx.send(s);
        });
        Emud { child, stderr: erx }
    }

    /// Stops it; its stderr (the summary).
    fn stop(mut self) -> String {
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }
}

impl Drop for Emud {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Boots the guest with `vg_*` parameters; the serial log after QEMU exits.
fn run_guest(b: &Built, shm: &Shm, params: &str) -> String {
    run_guest_on(b, shm, params, false)
}

/// [`run_guest`], the function an `ivshmem-doorbell` served by nic-emud on `shm.sock`
/// (MSI-X) if `doorbell`, else an `ivshmem-plain` on the BAR file.
fn run_guest_on(b: &Built, shm: &Shm, params: &str, doorbell: bool) -> String {
    let mut q = Qemu::new(b.kernel.clone(), b.initrd.clone(), shm.log.clone());
    q.ram_mib = RAM_MIB;
    q.ram_file = Some(shm.ram.clone());
    q.intel_iommu = true;
    if doorbell {
        q.ivshmem_doorbell.push(IvshmemDoorbell {
            socket: shm.sock.clone(),
            vectors: VECTORS,
        });
    } else {
        q.ivshmem.push(Ivshmem {
            path: shm.bar.clone(),
            size: BAR_SIZE,
        });
    }
    q.timeout_secs = QEMU_TIMEOUT_SECS;
    q.append = format!("quiet loglevel=4 hugepages={HUGEPAGES} {params}");
    let t = Instant::now();
    let out = q.command().output().expect("run qemu");
    let log = std::fs::read_to_string(&shm.log).unwrap_or_default();
    eprintln!(
        "qemu exited {} after {:?}\n--- serial ---\n{log}--- qemu stderr ---\n{}",
        out.status,
        t.elapsed(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "QEMU did not power off cleanly ({}); serial log above",
        out.status
    );
    log
}

fn result_line<'a>(log: &'a str, mode: &str) -> &'a str {
    log.lines()
        .find(|l| l.starts_with(&format!("VFIO-GUEST RESULT {mode}")))
        .unwrap_or_else(|| panic!("no VFIO-GUEST RESULT {mode} line in the serial log"))
}

fn expect_ok(log: &str, mode: &str, ex: &Exchange) {
    let want = format!(
        "VFIO-GUEST RESULT {mode} ok sends={n} reads={n} writes={n} rdma_bytes={}",
        2 * ex.iters as usize * ex.rdma_len,
        n = ex.iters
    );
    assert_eq!(result_line(log, mode).trim_end(), want);
    assert!(
        log.contains("GUEST-INIT driver vfio-pci"),
        "not bound to vfio-pci"
    );
    assert!(log.contains("VFIO-GUEST") && log.contains("teardown ok"));
    assert!(log.contains("GUEST-INIT vfio-guest exit 0"));
    assert!(log.contains("DMA allocator and device released"));
    assert!(
        !log.contains("vfio-attach:"),
        "vfio-attach reported an error at teardown"
    );
    // the error paths on the real VFIO nodes
    for (check, says) in [
        ("not-bound", "has no driver; bind it to vfio-pci"),
        ("no-such-bar", "BAR1 does not exist"),
        ("denied", "permission denied opening /dev/vfio/"),
        ("busy", "is busy"),
        ("small-pages", "cannot be physically contiguous"),
    ] {
        let line = log
            .lines()
            .find(|l| l.starts_with(&format!("VFIO-GUEST CHECK {check} ")))
            .unwrap_or_else(|| panic!("no CHECK {check} line"));
        assert!(
            line.starts_with(&format!("VFIO-GUEST CHECK {check} ok: ")) && line.contains(says),
            "{line}"
        );
    }
}

#[test]
fn loopback_in_the_guest_through_vfio() {
    let b = built();
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = Shm::new("loop");
    let ip = Ipv4Addr::new(127, 0, 6, 1);
    let emud = Emud::start(b, &shm, ip, 46001);
    let log = run_guest(
        b,
        &shm,
        &format!("vg_mode=loopback vg_ip={ip} vg_port=7471"),
    );
    let summary = emud.stop();
    eprintln!("--- nic-emud ---\n{summary}");
    expect_ok(&log, "loopback", &Exchange::default());
}

/// The EFA in the Linux guest through real kernel VFIO: nic-emud serves the emulated EFA
/// (`--family efa`) behind the ivshmem function; `vfio-guest --mode efa-loopback` finds it
/// through the identity page in BAR2, probes the EFA driver on the BAR2 windows with DMA at
/// IOVA = guest-physical address, and sends to itself on SRD and UD and RDMA-READs its own
/// buffer, every byte checked; the device is left with nothing alive and no errors.
#[test]
fn efa_loopback_in_the_guest_through_vfio() {
    let b = built();
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = Shm::new("efa");
    let ip = Ipv4Addr::new(127, 0, 6, 8);
    let emud = Emud::start_with(b, &shm, ip, 46008, &["--family", "efa"]);
    let log = run_guest(
        b,
        &shm,
        &format!("vg_mode=efa-loopback vg_ip={ip} vg_port=7478 vg_checks=no"),
    );
    let summary = emud.stop();
    eprintln!("--- nic-emud ---\n{summary}");
    assert_eq!(
        result_line(&log, "efa-loopback").trim_end(),
        "VFIO-GUEST RESULT efa-loopback ok sends=6 reads=1 writes=0 rdma_bytes=6000"
    );
    for needle in [
        "GUEST-INIT driver vfio-pci",
        "EFA probe ok: 1d0f:efa1",
        "EFA Srd: 3 SENDs of 6000 bytes to itself, data checked",
        "EFA Srd: RDMA READ of 6000 bytes from itself, data checked",
        "EFA Ud: 3 SENDs of 1000 bytes to itself, data checked",
        "DMA allocator and device released",
        "GUEST-INIT vfio-guest exit 0",
    ] {
        assert!(log.contains(needle), "missing {needle:?} in the serial log");
    }
    assert!(!log.contains("vfio-attach:"), "teardown error");
    assert!(
        summary.contains(" 0 device errors; nothing alive;"),
        "nic-emud: {summary}"
    );
}

#[test]
fn bring_up_refused_by_the_device_is_a_clear_error_in_the_guest() {
    let b = built();
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = Shm::new("refuse");
    let ip = Ipv4Addr::new(127, 0, 6, 5);
    let emud = Emud::start_with(b, &shm, ip, 46004, &["--fault", "refuse-bringup"]);
    let log = run_guest(
        b,
        &shm,
        &format!("vg_mode=loopback vg_ip={ip} vg_port=7474"),
    );
    let summary = emud.stop();
    eprintln!("--- nic-emud ---\n{summary}");
    let line = result_line(&log, "loopback");
    assert!(
        line.starts_with("VFIO-GUEST RESULT loopback FAIL mlx5 probe:"),
        "{line}"
    );
    // ENABLE_HCA (0x104) refused with the knob's status and syndrome
    assert!(
        line.contains("command 0x104 failed: status 0x4 (BAD_SYS_STATE), syndrome 0xbad0001"),
        "{line}"
    );
    assert!(log.contains("GUEST-INIT vfio-guest exit 1"));
    assert!(!log.contains("vfio-attach:"), "teardown error");
}

/// MSI-X in the guest: nic-emud serves the ivshmem-doorbell protocol, the guest tool takes
/// the vectors through VFIO eventfds, and a thread waiting for a completion event sleeps in
/// `poll(2)` until the device's interrupt wakes it, using under 5% of the wait in CPU time
/// (getrusage of the thread, in the guest).
#[test]
fn a_completion_wait_in_the_guest_is_woken_by_msi_x_through_vfio() {
    let b = built();
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = Shm::new("irq");
    let ip = Ipv4Addr::new(127, 0, 6, 7);
    let sock = shm.sock.to_string_lossy().into_owned();
    let emud = Emud::start_with(
        b,
        &shm,
        ip,
        46007,
        &["--ivshmem-server", &sock, "--vectors", &VECTORS.to_string()],
    );
    let log = run_guest_on(
        b,
        &shm,
        &format!("vg_mode=irq vg_checks=no vg_ip={ip} vg_port=7477"),
        true,
    );
    let summary = emud.stop();
    eprintln!("--- nic-emud ---\n{summary}");
    assert_eq!(
        result_line(&log, "irq").trim_end(),
        "VFIO-GUEST RESULT irq ok sends=1 reads=0 writes=0 rdma_bytes=0"
    );
    assert!(log.contains("VFIO-GUEST") && log.contains(&format!("MSI-X ok: {VECTORS} vectors")));
    let line = log
        .lines()
        .find(|l| l.starts_with("VFIO-GUEST IRQ woken ok: "))
        .expect("no IRQ line");
    let num = |after: &str| -> u64 {
        let rest = &line[line
            .find(after)
            .unwrap_or_else(|| panic!("{after} in {line}"))
            + after.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|d| d.parse().ok())
            .unwrap_or_else(|| panic!("no number after {after:?} in {line}"))
    };
    let (fired, wall_us, cpu_us) = (num(" fired "), num("wait "), num("thread CPU "));
    assert!(fired > 0, "the channel's vector never fired: {line}");
    assert!(
        wall_us >= 1_000_000,
        "the wait ended before the SEND was posted: {line}"
    );
    assert!(
        cpu_us * 20 < wall_us,
        "the waiting thread used more than 5% of the wait in CPU: {line}"
    );
    assert!(log.contains("GUEST-INIT vfio-guest exit 0"));
    assert!(log.contains("DMA allocator and device released"));
    assert!(!log.contains("vfio-attach:"), "teardown error");
    // nic-emud delivered the vectors to the guest it served
    let stats = summary
        .split("interrupts DoorbellStats { ")
        .nth(1)
        .unwrap_or_else(|| panic!("no interrupt counts in {summary:?}"));
    assert!(stats.starts_with("guests: 1, delivered: "), "{summary}");
    assert!(!stats.starts_with("guests: 1, delivered: 0,"), "{summary}");
}

/// Waits until the file at `path` has a line containing `needle` (false after `limit`, or
/// once `done` is set and the line is not there).
fn wait_for_line(path: &Path, needle: &str, limit: Duration, done: &AtomicBool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        let finished = done.load(Ordering::Acquire);
        if std::fs::read_to_string(path).is_ok_and(|s| s.lines().any(|l| l.contains(needle))) {
            return true;
        }
        if finished {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// One guest boot, two runs of the tool (each a full attach, bring-up and teardown): first
/// as the client of a server in this process, then as a server this process connects to.
#[test]
fn guest_against_a_host_peer_on_the_udp_fabric_both_ways() {
    let b = built();
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let shm = Shm::new("peer");
    let udp = 46002;
    let guest_ip = Ipv4Addr::new(127, 0, 6, 2);
    let host_ip = Ipv4Addr::new(127, 0, 6, 3);
    let port = 7472;
    // The host end: our stack on an emulated NIC of the same UDP fabric.
    let nic = UdpNic::new(host_ip, udp, Profile::default()).expect("host NIC");
    let dev = nic.probe(mlx5::Config::default()).expect("probe host NIC");
    let mac = dev.mac().expect("mac");
    dev.set_roce_gid(0, Gid::from_ipv4(host_ip.octets()).0, mac)
        .expect("gid");
    let cm = Cm::new(
        nic.platform(),
        CmConfig {
            // a guest run takes seconds; a lost guest is an error, not a hang
            wait_limit_ns: Some(90_000_000_000),
            ..CmConfig::default()
        },
    );
    let devid = cm
        .add_device(dev, mac)
        .map_err(|(e, _)| e)
        .expect("add_device");
    cm.add_neighbor(guest_ip, Neighbor { mac: EMU_MAC });
    let l = listen(&cm, &host_ip.to_string(), port).expect("listen");
    let ex = Exchange::default();
    let emud = Emud::start(b, &shm, guest_ip, udp);
    let qemu_done = AtomicBool::new(false);
    let (served, connected, log) = std::thread::scope(|s| {
        let host = s.spawn(|| {
            let served = serve(&l, &ex);
            let connected = if wait_for_line(
                &shm.log,
                &format!("server: listening on {guest_ip}:{port}"),
                Duration::from_secs(150),
                &qemu_done,
            ) {
                let id = client_ep(&cm, &host_ip.to_string(), &guest_ip.to_string(), port)
                    .expect("client endpoint");
                let r = run_client(&id, &ex);
                id.destroy_ep();
                r
            } else {
                Err("the guest server never said it was listening".into())
            };
            (served, connected)
        });
        let log = run_guest(
            b,
            &shm,
            &format!("vg_mode=client,server vg_ip={guest_ip} vg_peer={host_ip} vg_port={port}"),
        );
        qemu_done.store(true, Ordering::Release);
        let (served, connected) = host.join().expect("host thread");
        (served, connected, log)
    });
    let summary = emud.stop();
    eprintln!("--- nic-emud ---\n{summary}");
    l.destroy_ep();
    let all = Report {
        sends: ex.iters,
        reads: ex.iters,
        writes: ex.iters,
        rdma_bytes: 2 * ex.iters as u64 * ex.rdma_len as u64,
    };
    assert_eq!(served.expect("host as server"), all);
    assert_eq!(connected.expect("host as client"), all);
    expect_ok(&log, "client", &ex);
    expect_ok(&log, "server", &ex);
    assert_eq!(log.matches("GUEST-INIT vfio-guest exit 0").count(), 2);
    assert_eq!(cm.live(), (0, 0), "host CM ids / channels left");
    let dev = cm.remove_device(devid).expect("remove_device");
    dev.shutdown().expect("host NIC shutdown");
    let _ = std::io::stderr().flush();
}

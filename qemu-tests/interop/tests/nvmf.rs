//! NVMe over Fabrics (RDMA) against Linux in the soft-RoCE guest, one boot per direction:
//!
//! * `linux_initiator_against_our_target`: our `nvmf-target` binary on the Ethernet fabric
//!   (`--fabric eth:`), the guest's kernel initiator (nvme-rdma) discovers it with nvme-cli,
//!   connects through `/dev/nvme-fabrics`, writes a pattern with O_DIRECT in 4 KiB (in-capsule),
//!   64 KiB and 256 KiB requests (split by MDTS into commands in flight together), reads it
//!   back, makes an ext2 file system, mounts it, writes files, unmounts, disconnects,
//!   connects again and finds the files intact; all of it without the initiator recovering
//!   or resetting its controller, and with no disconnect from our target (the relay between
//!   them records the frames).
//! * `our_host_against_linux_target`: the guest's kernel target (nvmet-rdma, configured
//!   through configfs over a brd RAM disk); our host (`nvmf-rdma`'s host queues on an emulated
//!   NIC on the Ethernet fabric, in this process) connects the admin queue, enables the
//!   controller, identifies controller and namespace, connects an I/O queue, writes a pattern
//!   (4 KiB in-capsule, then 64 KiB by RDMA READ), reads it back by RDMA WRITE, flushes, sends
//!   a Keep Alive, writes a done marker, and disconnects; the guest then checks the pattern on
//!   its RAM disk with O_DIRECT.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use interop::guest::{self, Guest, Mode};
use interop::tools::{Relay, lo, roce_packet, tool_binary};

/// One guest at a time: they share two cores with everything else.
static GUEST: Mutex<()> = Mutex::new(());

const NQN: &str = "nqn.2024-01.io.rdma-stack:interop";

/// A tool process, killed when dropped; its stderr goes to a file.
struct Tool {
    child: Child,
    log: std::path::PathBuf,
}

impl Tool {
    fn stderr(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    fn wait_for(&mut self, marker: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        while !self.stderr().contains(marker) {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "the tool exited ({st}) before {marker:?}:\n{}",
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < end,
                "no {marker:?} after {timeout:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the tool; its stderr.
    fn stop(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr()
    }
}

impl Drop for Tool {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn marker_line<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line; serial:\n{out}"))
}

/// The connection-manager MADs on the relay's record (`T>`: sent by our target), one line
/// each, and how many DREQs our target sent.
fn cm_mads(log: &[interop::tools::Relayed]) -> (String, usize) {
    let mut lines = String::new();
    let mut our_dreqs = 0;
    for r in log {
        let Some(p) = roce_packet(&r.captured.frame) else {
            continue;
        };
        // QP1 (the GSI): a CM MAD, its attribute ID at offset 16
        if p.bth.dest_qp != 1 || p.payload.len() < 18 {
            continue;
        }
        let attr = u16::from_be_bytes([p.payload[16], p.payload[17]]);
        let name = match attr {
            0x10 => "REQ",
            0x11 => "MRA",
            0x12 => "REJ",
            0x13 => "REP",
            0x14 => "RTU",
            0x15 => "DREQ",
            0x16 => "DREP",
            _ => "other",
        };
        if r.captured.tx && attr == 0x15 {
            our_dreqs += 1;
        }
        let dir = if r.captured.tx { "target" } else { "guest" };
        lines += &format!("{:9.3} s {dir} {name}\n", r.at.as_secs_f64());
    }
    (lines, our_dreqs)
}

#[test]
fn linux_initiator_against_our_target() {
    let _one = GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let image = guest::build().expect("guest image");
    let bin = tool_binary("nvmf-rdma", "nvmf-target").expect("nvmf-target");
    let log = std::env::temp_dir().join(format!("nvmf-interop-target-{}.log", std::process::id()));
    let child = Command::new(&bin)
        .args([
            "--addr",
            "10.77.0.1",
            "--fabric",
            "eth:48065,48064",
            "--ram",
            "16:512",
            "--nqn",
            NQN,
            "-v",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start nvmf-target");
    let relay = Relay::start(lo(48060), lo(48061), lo(48064), lo(48065)).expect("relay");
    let mut target = Tool { child, log };
    target.wait_for("listening on 10.77.0.1:4420", Duration::from_secs(60));
    let serial =
        std::env::temp_dir().join(format!("nvmf-interop-host-{}.serial", std::process::id()));
    let start = Instant::now();
    let g = Guest::boot(
        &image,
        &Mode::NvmeHost { nqn: NQN.into() },
        lo(48060),
        lo(48061),
        &serial,
    )
    .expect("boot");
    let out = g.finish(Duration::from_secs(450));
    let stderr = target.stop();
    let log = relay.take_log();
    drop(relay);
    let out = out.unwrap_or_else(|e| panic!("{e}\nnvmf-target:\n{stderr}"));
    eprintln!(
        "guest run: {:?}\n{out}\nnvmf-target:\n{stderr}",
        start.elapsed()
    );
    let need = [
        "NVME discover rc=0",
        "NVME connect ok",
        "NVME dd write rc=0,0,0",
        "NVME pattern read back ok",
        "NVME mke2fs ok",
        "NVME mounted",
        "NVME unmounted",
        "NVME disconnected",
        "NVME mounted again",
        "NVME files intact",
        "NVME unmounted again",
    ];
    for m in need {
        assert!(
            out.contains(m),
            "no {m:?}\nserial:\n{out}\nnvmf-target:\n{stderr}"
        );
    }
    // nvme-cli listed our subsystem from the discovery log page
    assert!(
        out.lines()
            .any(|l| l.starts_with("NVME discover: subnqn:") && l.contains(NQN)),
        "{out}"
    );
    let ns = marker_line(&out, "NVME namespace ");
    // 16 MiB in 512-byte sectors, over RDMA, the NQN we serve, live
    assert!(ns.contains("sectors=32768"), "{ns}");
    assert!(ns.contains("transport=rdma"), "{ns}");
    assert!(ns.contains(&format!("subsysnqn={NQN}")), "{ns}");
    assert!(ns.contains("state=live"), "{ns}");
    assert_eq!(out.matches("NVME connect ok").count(), 2, "{out}");
    assert_eq!(out.matches("NVME disconnected").count(), 2, "{out}");
    // no queue of ours failed
    assert!(
        !stderr.contains("transport:") && !stderr.contains("poll:"),
        "nvmf-target:\n{stderr}"
    );
    // The initiator never had to recover: no error recovery, no controller reset (a queue
    // our target disconnected, a command or keep-alive that timed out), and every
    // disconnect came from the initiator (delete_controller), none from our target.
    for bad in [
        "starting error recovery",
        "resetting controller",
        "Reconnecting in",
    ] {
        assert!(
            !out.contains(bad),
            "{bad:?}\nserial:\n{out}\nnvmf-target:\n{stderr}"
        );
    }
    let (mads, our_dreqs) = cm_mads(&log);
    assert_eq!(
        our_dreqs, 0,
        "our target disconnected a queue; CM MADs:\n{mads}"
    );
    // discovery, then admin and I/O queue twice, each disconnected by the guest
    assert!(mads.matches("guest DREQ").count() >= 5, "CM MADs:\n{mads}");
}

#[test]
fn our_host_against_linux_target() {
    use nvmf::host::ConnectParams;
    use nvmf_rdma::host::{QueueConfig, connect_queue};
    let _one = GUEST.lock().unwrap_or_else(|e| e.into_inner());
    let image = guest::build().expect("guest image");
    let (ep, nic) = nvmf_rdma::net::eth_endpoint(
        guest::HOST_IP,
        48062,
        48063,
        Some(guest::HOST_MAC),
        30_000_000_000,
    )
    .expect("our NIC");
    let serial =
        std::env::temp_dir().join(format!("nvmf-interop-target-{}.serial", std::process::id()));
    let start = Instant::now();
    let mut g = Guest::boot(
        &image,
        &Mode::NvmeTarget { nqn: NQN.into() },
        lo(48062),
        lo(48063),
        &serial,
    )
    .expect("boot");
    g.wait_for("NVMET listening", Duration::from_secs(240))
        .expect("nvmet");
    device_open::fabric::resolve(&nic, guest::GUEST_IP, Duration::from_secs(30)).expect("ARP");
    let dst = std::net::SocketAddr::from((guest::GUEST_IP, 4420));
    let params = ConnectParams {
        hostnqn: "nqn.2014-08.org.nvmexpress:uuid:6e766d66-6f75-7268-6f73-740000000001".into(),
        hostid: *b"interop-host-001",
        subnqn: NQN.into(),
        kato: 10_000,
        disable_sqflow: false,
    };
    let pattern = guest::pattern();
    let run = || -> Result<String, String> {
        let e = |what: &'static str| move |x: nvmf::host::HostError<_>| format!("{what}: {x:?}");
        let mut admin = connect_queue(
            &ep,
            dst,
            QueueConfig {
                qid: 0,
                depth: nvmf::rdma::ADMIN_QUEUE_DEPTH,
                slot_size: 4096,
                inline: 0,
            },
        )
        .map_err(|x| format!("admin queue: {x}"))?;
        let cntlid = admin.connect_admin(&params).map_err(e("admin Connect"))?;
        admin.enable(1000).map_err(e("enable"))?;
        let ctrl = admin.identify_controller().map_err(e("Identify"))?;
        if ctrl.cntlid != cntlid || ctrl.subnqn != NQN || ctrl.mn.trim() != "Linux" {
            return Err(format!("Identify Controller: {ctrl:?}"));
        }
        let inline = (ctrl.ioccsz as usize * 16).saturating_sub(64);
        let nss = admin.active_namespaces(0).map_err(e("active namespaces"))?;
        if nss != [1] {
            return Err(format!("active namespaces {nss:?}"));
        }
        let id = admin
            .identify_namespace(1)
            .map_err(e("Identify Namespace"))?;
        // brd's default: 16 MiB in 512-byte blocks
        if id.nsze != 32768 || id.lbads != 9 {
            return Err(format!("namespace 1: {id:?}"));
        }
        let n = admin.set_num_queues(1).map_err(e("Number of Queues"))?;
        if n < 1 {
            return Err("no I/O queue".into());
        }
        let mut io = connect_queue(
            &ep,
            dst,
            QueueConfig {
                qid: 1,
                depth: 32,
                slot_size: 64 * 1024,
                inline,
            },
        )
        .map_err(|x| format!("I/O queue: {x}"))?;
        io.connect(&params, cntlid).map_err(e("I/O Connect"))?;
        let lba0 = guest::PATTERN_OFFSET / 512;
        // 4 KiB in the capsule, then 64 KiB pieces the target RDMA READs
        io.write(1, lba0, 512, &pattern[..4096])
            .map_err(e("write 4 KiB"))?;
        let mut off = 4096;
        while off < pattern.len() {
            let n = (pattern.len() - off).min(64 * 1024);
            io.write(1, lba0 + off as u64 / 512, 512, &pattern[off..off + n])
                .map_err(e("write"))?;
            off += n;
        }
        let mut back = vec![0u8; pattern.len()];
        for (i, c) in back.chunks_mut(64 * 1024).enumerate() {
            io.read(1, lba0 + (i * 128) as u64, 512, c)
                .map_err(e("read"))?;
        }
        if back != pattern {
            return Err("the pattern read back differs".into());
        }
        io.flush(1).map_err(e("flush"))?;
        admin.keep_alive().map_err(e("Keep Alive"))?;
        let mut done = vec![0u8; 512];
        done[..guest::HOST_DONE.len()].copy_from_slice(guest::HOST_DONE.as_bytes());
        io.write(1, 0, 512, &done).map_err(e("write the marker"))?;
        io.flush(1).map_err(e("flush"))?;
        io.transport.close();
        let csts = admin.shutdown().map_err(e("shutdown"))?;
        admin.transport.close();
        Ok(format!(
            "cntlid {cntlid}, ioccsz {}, mdts {}, inline {inline}, CSTS {csts:?}",
            ctrl.ioccsz, ctrl.mdts
        ))
    };
    let r = run();
    let out = g.finish(Duration::from_secs(240));
    drop(ep);
    let live = nic.shutdown();
    let out = out.unwrap_or_else(|x| panic!("{x}\nhost: {r:?}"));
    eprintln!("guest run: {:?}\nhost: {r:?}\n{out}", start.elapsed());
    let summary = r.unwrap_or_else(|x| panic!("our host: {x}\nserial:\n{out}"));
    eprintln!("{summary}");
    assert!(out.contains("NVMET pattern ok"), "{out}");
    assert!(out.contains("creating nvm controller"), "{out}");
    assert_eq!(
        live.expect("NIC shutdown"),
        Default::default(),
        "device objects left"
    );
}

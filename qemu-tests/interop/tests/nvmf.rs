//! NVMe over Fabrics (RDMA) against Linux in the soft-RoCE guest, one boot per direction:
//!
//! * `linux_initiator_against_our_target`: our `nvmf-target` binary on the Ethernet fabric
//!   (`--fabric eth:`), the guest's kernel initiator (nvme-rdma) discovers it with nvme-cli,
//!   connects through `/dev/nvme-fabrics`, writes a pattern with O_DIRECT in 4 KiB (in-capsule),
//!   64 KiB and 256 KiB requests (split by MDTS into commands in flight together), reads it
//!   back, makes an ext2 file system, mounts it, writes files, unmounts, disconnects,
//!   connects again and finds the files intact.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use interop::guest::{self, Guest, Mode};
use interop::tools::{lo, tool_binary};

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
            "eth:48060,48061",
            "--ram",
            "32:512",
            "--nqn",
            NQN,
            "-v",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("start nvmf-target");
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
    let out = g.finish(Duration::from_secs(400));
    let stderr = target.stop();
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
    // 32 MiB in 512-byte sectors, over RDMA, the NQN we serve, live
    assert!(ns.contains("sectors=65536"), "{ns}");
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
}

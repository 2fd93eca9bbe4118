//! Our tools as the host side of the scenarios: [`rping_binary`] builds `tools/rping` (the
//! binary, as a user runs it) and [`Relay`] sits on the Ethernet link between QEMU and it,
//! recording every frame, so that the tests check the wire although our NIC is in another
//! process.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

pub use nic_emulator::roce_wire::fabric::Captured;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target>` of the running test binary (`<target>/<profile>/deps/<test>-<hash>`).
fn target_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.ancestors().nth(3).map(Path::to_path_buf))
        .unwrap_or_else(|| workspace().join("target"))
}

/// Builds `tools/rping` (debug profile, in `<target>/interop-tools`, so that the nested
/// cargo never waits for the lock of the build running the tests) once per process, and
/// returns the binary's path.
pub fn rping_binary() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let dir = target_dir().join("interop-tools");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .arg("build")
            .arg("--manifest-path")
            .arg(workspace().join("Cargo.toml"))
            .args(["-p", "rping", "--bin", "rping"])
            .env("CARGO_TARGET_DIR", &dir)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .output()
            .map_err(|e| format!("cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build -p rping failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let bin = dir.join("debug").join("rping");
        if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("{} missing after the build", bin.display()))
        }
    })
    .clone()
}

/// A relay between the two ends of an Ethernet link (QEMU's socket netdev format): frames
/// from QEMU arriving at `qemu_side` go to the tool's socket, frames from the tool arriving
/// at `tool_side` go to QEMU, one datagram for one datagram, each recorded.
///
/// QEMU is started with `udp=QEMU_SIDE,localaddr=QEMU_ADDR`; the tool with
/// `--fabric eth:TOOL_ADDR_PORT,TOOL_SIDE_PORT`.
pub struct Relay {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    capture: Arc<Mutex<Vec<Captured>>>,
}

impl Relay {
    /// Binds `qemu_side` (QEMU sends there; it binds `qemu`) and `tool_side` (the tool sends
    /// there; it binds `tool`). Every address is on 127.0.0.0/8.
    pub fn start(
        qemu_side: SocketAddrV4,
        qemu: SocketAddrV4,
        tool_side: SocketAddrV4,
        tool: SocketAddrV4,
    ) -> io::Result<Relay> {
        for a in [qemu_side, qemu, tool_side, tool] {
            if !a.ip().is_loopback() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{a}: not on loopback"),
                ));
            }
        }
        let q = UdpSocket::bind(qemu_side)?;
        let t = UdpSocket::bind(tool_side)?;
        let stop = Arc::new(AtomicBool::new(false));
        let capture = Arc::new(Mutex::new(Vec::new()));
        let mut threads = Vec::new();
        // (receive on, send from, to, sent by the tool)
        for (rx, tx, to, by_tool) in [
            (q.try_clone()?, t.try_clone()?, tool, false),
            (t, q, qemu, true),
        ] {
            rx.set_read_timeout(Some(Duration::from_millis(20)))?;
            let stop = stop.clone();
            let capture = capture.clone();
            let h = std::thread::Builder::new()
                .name("interop-relay".into())
                .spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while !stop.load(Ordering::Acquire) {
                        let Ok((n, from)) = rx.recv_from(&mut buf) else {
                            continue;
                        };
                        // only the link's own end (nothing else on loopback gets through)
                        let want = if by_tool { tool } else { qemu };
                        if from != std::net::SocketAddr::V4(want) {
                            continue;
                        }
                        capture
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(Captured {
                                tx: by_tool,
                                frame: buf[..n].to_vec(),
                            });
                        let _ = tx.send_to(&buf[..n], to);
                    }
                })?;
            threads.push(h);
        }
        Ok(Relay {
            stop,
            threads,
            capture,
        })
    }

    /// The frames so far, in order (`tx`: sent by the tool).
    pub fn take_capture(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.capture.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

/// 127.0.0.1:`port`.
pub fn lo(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

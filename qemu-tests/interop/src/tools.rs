//! Our tools as the host side of the scenarios: [`rping_binary`] builds `tools/rping` (the
//! binary, as a user runs it; [`tool_binary`] any other tool, `nvmf-target`) and [`Relay`] sits on the Ethernet link between QEMU and it,
//! recording every frame, so that the tests check the wire although our NIC is in another
//! process, and losing chosen RoCEv2 frames on purpose ([`Relay::drop_next`]) for the
//! retransmission tests.

use std::io::{self, BufRead, BufReader, Read};
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use nic_emulator::roce_wire::fabric::Captured;
use nic_emulator::roce_wire::packet::{Opcode, Packet};

/// The RoCEv2 packet in an Ethernet frame: IPv4 (ethertype 0x0800) carrying UDP to port
/// 4791, decoded with `roce-wire` (headers and ICRC checked). `None` for anything else, or
/// a frame that does not decode.
pub fn roce_packet(frame: &[u8]) -> Option<Packet> {
    if frame.get(12..14) != Some(&[0x08, 0x00]) {
        return None;
    }
    let ip = frame.get(14..)?;
    if ip.get(9) != Some(&17) || ip.get(22..24) != Some(&[0x12, 0xb7]) {
        return None;
    }
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
    Packet::decode(ip.get(..total)?).ok()
}

/// A frame that reached the relay, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Relayed {
    /// The frame (`tx`: sent by the tool).
    pub captured: Captured,
    /// Lost on purpose ([`Relay::drop_next`]): recorded, not forwarded.
    pub dropped: bool,
    /// When it arrived, from the relay's start.
    pub at: Duration,
}

/// What the relay threads share.
#[derive(Default)]
struct Shared {
    /// When the relay started.
    start: Option<std::time::Instant>,
    log: Vec<Relayed>,
    /// Planned losses: (sent by the tool, BTH opcode), each matching once.
    drops: Vec<(bool, Opcode)>,
}

impl Shared {
    /// Records the frame; true when it is to be lost (a planned drop matched and is used up).
    fn record(&mut self, by_tool: bool, frame: &[u8]) -> bool {
        let dropped = !self.drops.is_empty()
            && roce_packet(frame).is_some_and(|p| {
                match self
                    .drops
                    .iter()
                    .position(|d| *d == (by_tool, p.bth.opcode))
                {
                    Some(i) => {
                        self.drops.remove(i);
                        true
                    }
                    None => false,
                }
            });
        self.log.push(Relayed {
            captured: Captured {
                tx: by_tool,
                frame: frame.to_vec(),
            },
            dropped,
            at: self.start.map(|t| t.elapsed()).unwrap_or_default(),
        });
        dropped
    }
}

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
    tool_binary("rping", "rping")
}

/// Builds binary `bin` of workspace package `package` as [`rping_binary`] does (once per
/// process and binary) and returns its path.
pub fn tool_binary(package: &str, bin: &str) -> Result<PathBuf, String> {
    static BUILT: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, r)) = built.iter().find(|(b, _)| b == bin) {
        return r.clone();
    }
    let r = (|| {
        let dir = target_dir().join("interop-tools");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let out = Command::new(cargo)
            .arg("build")
            .arg("--manifest-path")
            .arg(workspace().join("Cargo.toml"))
            .args(["-p", package, "--bin", bin])
            .env("CARGO_TARGET_DIR", &dir)
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("RUSTFLAGS")
            .output()
            .map_err(|e| format!("cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo build -p {package} --bin {bin} failed:\n{}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let path = dir.join("debug").join(bin);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{} missing after the build", path.display()))
        }
    })();
    built.push((bin.to_string(), r.clone()));
    r
}

/// Builds `tools/cm-examples` (librdmacm's examples ported: `rdma_server`, `rdma_client`,
/// `udaddy`, `ucmatose`) as [`rping_binary`] builds rping, and returns the path of the binary
/// `name`.
pub fn example_binary(name: &str) -> Result<PathBuf, String> {
    tool_binary("cm-examples", name)
}

/// Builds `tools/rperf` as [`rping_binary`] builds rping, and returns the binary's path.
pub fn rperf_binary() -> Result<PathBuf, String> {
    tool_binary("rperf", "rperf")
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
    shared: Arc<Mutex<Shared>>,
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
        let shared = Arc::new(Mutex::new(Shared {
            start: Some(std::time::Instant::now()),
            ..Shared::default()
        }));
        let mut threads = Vec::new();
        // (receive on, send from, to, sent by the tool)
        for (rx, tx, to, by_tool) in [
            (q.try_clone()?, t.try_clone()?, tool, false),
            (t, q, qemu, true),
        ] {
            rx.set_read_timeout(Some(Duration::from_millis(20)))?;
            let stop = stop.clone();
            let shared = shared.clone();
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
                        let lost = shared
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .record(by_tool, &buf[..n]);
                        if !lost {
                            let _ = tx.send_to(&buf[..n], to);
                        }
                    }
                })?;
            threads.push(h);
        }
        Ok(Relay {
            stop,
            threads,
            shared,
        })
    }

    fn shared(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Loses the next RoCEv2 frame with BTH opcode `op` sent by the tool (`by_tool`) or by
    /// QEMU (`!by_tool`), once: it is recorded (see [`Relay::take_log`]) but not forwarded.
    /// Plans add up; each matches one frame.
    pub fn drop_next(&self, by_tool: bool, op: Opcode) {
        self.shared().drops.push((by_tool, op));
    }

    /// The planned losses that have not matched a frame yet.
    pub fn pending_drops(&self) -> Vec<(bool, Opcode)> {
        self.shared().drops.clone()
    }

    /// Every frame so far, forwarded or lost, in arrival order; the record starts afresh.
    pub fn take_log(&self) -> Vec<Relayed> {
        std::mem::take(&mut self.shared().log)
    }

    /// The frames forwarded so far, in order (`tx`: sent by the tool); the record starts
    /// afresh.
    pub fn take_capture(&self) -> Vec<Captured> {
        self.take_log()
            .into_iter()
            .filter(|r| !r.dropped)
            .map(|r| r.captured)
            .collect()
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

/// One of our tools (`rping`, the librdmacm example ports) run as a process, as a user runs
/// it, killed if the test fails first; its output is collected as it comes.
pub struct ToolProcess {
    name: String,
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl ToolProcess {
    /// Starts `bin ARGS` with its stdout and stderr collected.
    pub fn spawn(bin: &Path, args: &[&str]) -> ToolProcess {
        let mut child = Command::new(bin)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        let stdout: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("stdout"));
        let stderr: Box<dyn Read + Send> = Box::new(child.stderr.take().expect("stderr"));
        for (pipe, text) in [(stdout, &out), (stderr, &err)] {
            let text = text.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let mut t = text.lock().unwrap();
                    t.push_str(&line);
                    t.push('\n');
                }
            }));
        }
        ToolProcess {
            name: bin
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            child,
            out,
            err,
            readers,
        }
    }

    /// What it wrote to stdout so far.
    pub fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// What it wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until stderr contains `marker` (panics if the process exits first or after
    /// `timeout`).
    pub fn wait_stderr(&mut self, marker: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        while !self.stderr().contains(marker) {
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!(
                    "{} exited ({st}) before {marker:?}:\n{}\n{}",
                    self.name,
                    self.stdout(),
                    self.stderr()
                );
            }
            assert!(Instant::now() < end, "no {marker:?}:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the exit (panics after `timeout`); (status, stdout, stderr).
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, String, String) {
        let end = Instant::now() + timeout;
        let st = loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                break st;
            }
            assert!(
                Instant::now() < end,
                "{} still running after {timeout:?}:\n{}\n{}",
                self.name,
                self.stdout(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        (st, self.stdout(), self.stderr())
    }
}

impl Drop for ToolProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The text of rdma-core rping's ping `ping` of `size` bytes (26 to 65535), as `%s` prints
/// its buffer: `rdma-ping-N: `, then letters from 'A' + N (mod 58) rotating through
/// 'A'..='z', cut to `size - 1` characters (the buffer's last byte is its NUL). What the
/// tests expect on both sides' `-v` lines.
pub fn ping_text(ping: u32, size: usize) -> String {
    let mut t = format!("rdma-ping-{ping}: ");
    let mut c = b'A' + (ping % 58) as u8;
    while t.len() < size.saturating_sub(1) {
        t.push(char::from(c));
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    t.truncate(size.saturating_sub(1));
    t
}

/// 127.0.0.1:`port`.
pub fn lo(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_text_is_rpings_pattern() {
        assert_eq!(ping_text(0, 26), "rdma-ping-0: ABCDEFGHIJKL");
        assert_eq!(ping_text(1, 20), "rdma-ping-1: BCDEFG");
        // letters wrap from 'z' to 'A'; the start letter advances one per ping and wraps too
        assert_eq!(&ping_text(57, 18)[14..], "zAB");
        assert_eq!(&ping_text(58, 18)[14..], "ABC");
        assert_eq!(ping_text(3, 64).len(), 63);
        assert_eq!(ping_text(9, 8), "rdma-pi");
    }

    fn frame(name: &str) -> Vec<u8> {
        let hex = std::fs::read_to_string(
            workspace()
                .join("qemu-tests/interop/tests/frames")
                .join(name),
        )
        .expect("frame file");
        let hex: String = hex.split_whitespace().collect();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect()
    }

    /// The relay forwards both ways, loses exactly the planned frames (by direction and BTH
    /// opcode, once each) and records everything in order.
    #[test]
    fn relay_forwards_records_and_loses_planned_frames() {
        let send = frame("rxe_rc_send_only.hex");
        let ack = frame("rxe_rc_acknowledge.hex");
        assert_eq!(roce_packet(&send).unwrap().bth.opcode, Opcode::RcSendOnly);
        assert_eq!(roce_packet(&ack).unwrap().bth.opcode, Opcode::RcAcknowledge);
        assert!(roce_packet(&send[..send.len() - 1]).is_none());
        let relay = Relay::start(lo(48090), lo(48091), lo(48092), lo(48093)).unwrap();
        let qemu = UdpSocket::bind(lo(48091)).unwrap();
        let tool = UdpSocket::bind(lo(48093)).unwrap();
        let recv = |s: &UdpSocket, wait_ms: u64| {
            s.set_read_timeout(Some(Duration::from_millis(wait_ms)))
                .unwrap();
            let mut buf = [0u8; 2048];
            s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
        };
        relay.drop_next(false, Opcode::RcSendOnly); // the next SEND from QEMU
        relay.drop_next(true, Opcode::RcAcknowledge); // the next ACK from the tool
        relay.drop_next(true, Opcode::RcSendOnly); // never matches: the tool sends none
        // QEMU -> tool: the first SEND is lost, the ACK and the second SEND get through, in
        // order (one relay thread per direction)
        for f in [&send, &ack, &send] {
            qemu.send_to(f, lo(48090)).unwrap();
        }
        assert_eq!(recv(&tool, 2000).as_ref(), Some(&ack));
        assert_eq!(recv(&tool, 2000).as_ref(), Some(&send));
        assert_eq!(recv(&tool, 200), None, "a third frame");
        // tool -> QEMU: the first ACK is lost, the second gets through
        for f in [&ack, &ack] {
            tool.send_to(f, lo(48092)).unwrap();
        }
        assert_eq!(recv(&qemu, 2000).as_ref(), Some(&ack));
        assert_eq!(recv(&qemu, 200), None, "a second frame");
        // a stranger on loopback is neither forwarded nor recorded: the tool's next frame
        // comes through alone
        let other = UdpSocket::bind(lo(48094)).unwrap();
        other.send_to(&send, lo(48092)).unwrap();
        tool.send_to(&ack, lo(48092)).unwrap();
        assert_eq!(recv(&qemu, 2000).as_ref(), Some(&ack));
        assert_eq!(recv(&qemu, 200), None, "a stranger's frame");
        assert_eq!(relay.pending_drops(), vec![(true, Opcode::RcSendOnly)]);
        let log: Vec<(bool, bool, Opcode)> = relay
            .take_log()
            .iter()
            .map(|r| {
                let op = roce_packet(&r.captured.frame).unwrap().bth.opcode;
                (r.captured.tx, r.dropped, op)
            })
            .collect();
        use Opcode::*;
        assert_eq!(
            log,
            [
                (false, true, RcSendOnly),
                (false, false, RcAcknowledge),
                (false, false, RcSendOnly),
                (true, true, RcAcknowledge),
                (true, false, RcAcknowledge),
                (true, false, RcAcknowledge),
            ]
        );
        assert!(relay.take_capture().is_empty(), "the log starts afresh");
    }
}

//! Command line: perftest's options, parsed by hand (no parser dependency), and the checks that
//! turn an inconsistent request into a clear error.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use verbs::Mtu;

use device_open::Family;

use crate::remote::{DEFAULT_CM_PORT, DEFAULT_FABRIC_PORT, DEFAULT_TIMEOUT_S};

/// Largest message size `-s` accepts (the device's `max_msg_sz` is 1 GiB).
pub const MAX_SIZE: usize = 1 << 30;
/// Sizes `-a` runs: 2 B .. 8 MiB, powers of two (as perftest's `-a`).
pub const ALL_SIZES: std::ops::RangeInclusive<u32> = 1..=23;
/// Largest queue depth `-t` accepts (the device's `log_max_qp_sz` is 15).
pub const MAX_DEPTH: u32 = 8192;

/// One benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Test {
    /// SEND/RECV ping-pong.
    SendLat,
    /// RDMA WRITE ping-pong, each side polling the last byte of its buffer.
    WriteLat,
    /// RDMA READ round trips.
    ReadLat,
    /// Fetch-and-add round trips.
    AtomicLat,
    /// Streamed SENDs.
    SendBw,
    /// Streamed RDMA WRITEs.
    WriteBw,
    /// Streamed RDMA READs.
    ReadBw,
}

impl Test {
    /// Every test, in the order `--help` lists them.
    pub const ALL: [Test; 7] = [
        Test::SendLat,
        Test::WriteLat,
        Test::ReadLat,
        Test::AtomicLat,
        Test::SendBw,
        Test::WriteBw,
        Test::ReadBw,
    ];

    /// The default suite (no test named): the three latency tests at 64 B, the two RDMA
    /// bandwidth tests at 64 KiB.
    pub const SUITE: [(Test, usize); 5] = [
        (Test::SendLat, 64),
        (Test::WriteLat, 64),
        (Test::ReadLat, 64),
        (Test::WriteBw, 64 << 10),
        (Test::ReadBw, 64 << 10),
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Test::SendLat => "send_lat",
            Test::WriteLat => "write_lat",
            Test::ReadLat => "read_lat",
            Test::AtomicLat => "atomic_lat",
            Test::SendBw => "send_bw",
            Test::WriteBw => "write_bw",
            Test::ReadBw => "read_bw",
        }
    }

    /// The test named `s`.
    pub fn from_name(s: &str) -> Option<Test> {
        Test::ALL.into_iter().find(|t| t.name() == s)
    }

    /// The banner title, as perftest prints it.
    pub fn title(self) -> &'static str {
        match self {
            Test::SendLat => "Send Latency Test",
            Test::WriteLat => "RDMA_Write Latency Test",
            Test::ReadLat => "RDMA_Read Latency Test",
            Test::AtomicLat => "Atomic FETCH_AND_ADD Latency Test",
            Test::SendBw => "Send BW Test",
            Test::WriteBw => "RDMA_Write BW Test",
            Test::ReadBw => "RDMA_Read BW Test",
        }
    }

    /// A latency test (else a bandwidth test).
    pub fn is_lat(self) -> bool {
        matches!(
            self,
            Test::SendLat | Test::WriteLat | Test::ReadLat | Test::AtomicLat
        )
    }

    /// Default message size (perftest: 2 B for latency, 64 KiB for bandwidth; atomics are 8 B).
    pub fn default_size(self) -> usize {
        match self {
            Test::AtomicLat => 8,
            t if t.is_lat() => 2,
            _ => 65536,
        }
    }

    /// Default inline threshold: perftest's maxima for the latency tests that can send inline
    /// (236 B for SEND, 220 B for WRITE), 0 elsewhere.
    pub fn default_inline(self) -> u32 {
        match self {
            Test::SendLat => 236,
            Test::WriteLat => 220,
            _ => 0,
        }
    }

    /// Whether the test's requests can carry inline data (SEND and WRITE).
    pub fn can_inline(self) -> bool {
        matches!(
            self,
            Test::SendLat | Test::WriteLat | Test::SendBw | Test::WriteBw
        )
    }

    /// Whether `size`-byte messages go inline under the threshold `inline`.
    pub fn inline_at(self, inline: u32, size: usize) -> bool {
        inline as usize >= size && self.can_inline()
    }

    /// Latency is reported as half the round trip (ping-pong tests), as perftest does; READ
    /// and atomics report the whole round trip.
    pub fn rtt_divisor(self) -> f64 {
        match self {
            Test::SendLat | Test::WriteLat => 2.0,
            _ => 1.0,
        }
    }
}

/// How long each size runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Plan {
    /// A number of iterations.
    Iters(u64),
    /// A wall-clock duration.
    Duration(Duration),
}

impl Plan {
    /// The iterations when they are fixed up front (`u64::MAX` for a duration).
    pub fn count(self) -> u64 {
        match self {
            Plan::Iters(n) => n,
            Plan::Duration(_) => u64::MAX,
        }
    }
}

/// Default iteration count (perftest's latency default; the brief asks the same for bandwidth).
pub const DEFAULT_ITERS: u64 = 1000;
/// Default bandwidth queue depth (perftest's `-t`).
pub const DEFAULT_TX_DEPTH: u32 = 128;
/// Most QPs (threads) `-q` accepts.
pub const MAX_QPS: u32 = 16;
/// Default completion moderation for bandwidth tests (perftest's `-Q`, capped by the depth).
pub const DEFAULT_CQ_MOD: u32 = 100;

/// Parsed options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The test; `None` runs the default suite.
    pub test: Option<Test>,
    /// `-s`.
    pub size: Option<usize>,
    /// `-a`.
    pub all: bool,
    /// `-n`.
    pub iters: Option<u64>,
    /// `-D`, in seconds.
    pub duration: Option<f64>,
    /// `-t`.
    pub tx_depth: Option<u32>,
    /// `-Q`.
    pub cq_mod: Option<u32>,
    /// `-I`.
    pub inline: Option<u32>,
    /// `-m`.
    pub mtu: Option<Mtu>,
    /// `--json`.
    pub json: bool,
    /// `--plot`.
    pub plot: Option<PathBuf>,
    /// `--server`.
    pub server: bool,
    /// A peer address (positional).
    pub peer: Option<String>,
    /// `--device`.
    pub device: Option<String>,
    /// `--bind`: this NIC's address (two-process mode).
    pub bind: Option<Ipv4Addr>,
    /// `-p`: the CM port.
    pub port: Option<u16>,
    /// `--fabric-port`: the emulated fabric's UDP port.
    pub fabric_port: Option<u16>,
    /// `--timeout`, in seconds.
    pub timeout: Option<f64>,
    /// `-q`: QPs, one per thread.
    pub qps: Option<u32>,
    /// `-e`: event mode.
    pub events: bool,
    /// `-R`: perftest's rdma_cm exchange (the peer is perftest's `ib_*` tool or rperf -R).
    pub perftest: bool,
    /// `--fabric eth:LOCAL,REMOTE`: the Ethernet link's two UDP ports (ours, the far end's).
    pub eth: Option<(u16, u16)>,
}

/// Where the two ends run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Both ends in this process.
    Embedded,
    /// The server end (`--server`).
    Server,
    /// The client end, connecting to the peer.
    Client(Ipv4Addr),
}

/// What the command line asks for.
#[derive(Debug)]
pub enum Command {
    /// Run benchmarks.
    Run(Options),
    /// Print the usage text.
    Help,
    /// Print the version.
    Version,
}

/// Why the command line cannot be served (exit code 2).
#[derive(Debug, PartialEq, Eq)]
pub enum CliError {
    /// Malformed or inconsistent options.
    Usage(String),
}

impl std::fmt::Display for CliError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CliError::Usage(m) => write!(f, "{m}\nTry 'rperf --help'."),
        }
    }
}

/// The usage text.
pub fn usage() -> String {
    let tests: Vec<&str> = Test::ALL.iter().map(|t| t.name()).collect();
    format!(
        "rperf: perftest-style RDMA bandwidth and latency benchmark

Usage: rperf [TEST] [OPTIONS]                 both ends in this process
       rperf [TEST] --server [OPTIONS]        server end
       rperf [TEST] [OPTIONS] PEER            client end, connects to PEER

With no TEST, runs the default suite: send_lat, write_lat, read_lat at 64 B and
write_bw, read_bw at 64 KiB.

Tests: {}

Modes (times are wall-clock):
  EMBEDDED (no --server, no PEER): both ends in this process on two emulated
    ConnectX-class NICs joined by the in-process RoCEv2 fabric (RC QPs), or with
    --device efa two emulated EFAs (SRD QPs, an AH each way; no atomics, SENDs
    of at most the MTU, inline data of at most 32 bytes).
  SERVER / CLIENT: one end per process, each with its own NIC: an emulated one
    on the UDP fabric (a socket at BIND:FABRIC_PORT in 127.0.0.0/8) or a real
    one (--device vfio:BDF), connected through the connection manager (RC
    ids; with --device efa an emulated EFA and SRD ids of the UDP port space:
    no atomics, no -R, inline data of at most the device's). The
    client's test and options govern; a server given a TEST serves only that
    test; it serves the client's connections (one per test and size) and exits
    after its last one. Both ends check what arrived.

Options:
  -s, --size BYTES        message size (default 2 for *_lat, 65536 for *_bw;
                          suffixes K, M, G accepted; atomic_lat is always 8)
  -a, --all               run every size from 2 B to 8 MiB (powers of two)
  -n, --iters N           iterations per size (default {DEFAULT_ITERS})
  -D, --duration SECS     run each size for SECS seconds instead of -n
  -t, --tx-depth N        send queue depth of bandwidth tests (default {DEFAULT_TX_DEPTH})
  -Q, --cq-mod N          signal one send in N in bandwidth tests (default {DEFAULT_CQ_MOD},
                          at most the depth)
  -I, --inline-size N     send messages up to N bytes inline (default 236 for
                          send_lat, 220 for write_lat, 0 otherwise)
  -m, --mtu BYTES         path MTU: 256, 512, 1024, 2048 or 4096 (default: the
                          port's active MTU)
      --json              print one JSON object per size (JSON Lines) instead of tables
      --plot FILE.svg     write an SVG: latency histogram (*_lat), bandwidth vs
                          size (*_bw); with the suite, one FILE-<test>.svg per test
      --server            be the server end
      PEER                be the client end of the server at PEER (IPv4)
      --bind IP           this NIC's address (default 127.0.0.2 for --server,
                          127.0.0.1 for a client); the emulated fabric has no
                          ARP: both ends' addresses must share a /24
  -p, --port N            CM port (default {DEFAULT_CM_PORT})
      --fabric-port N     UDP port of the emulated fabric, the same on both ends
                          (default {DEFAULT_FABRIC_PORT}; also --fabric udp:N)
      --fabric eth:L,R    put this end's emulated NIC on an Ethernet link instead:
                          raw frames over UDP from 127.0.0.1:L to 127.0.0.1:R (the
                          format of QEMU's socket netdev), ARP on the virtual wire;
                          --bind is the NIC's address there (any IPv4 address)
  -R, --rdma_cm           speak perftest's rdma_cm exchange (its -R): the other end
                          is rdma-core's ib_send_lat, ib_send_bw, ib_write_lat,
                          ib_write_bw or ib_read_bw with -R (or rperf -R); both ends
                          take the same TEST, -s and -n; data is not verified
      --timeout SECS      give up when the peer makes no progress for SECS
                          (default {DEFAULT_TIMEOUT_S})
  -q, --qps N             run N QPs, one per thread, each with its own CQ and
                          buffer (default 1); bandwidth is their sum, latency
                          their samples merged (client and embedded mode; the
                          server follows the client)
  -e, --events            event mode (perftest's -e): wait for completions on
                          completion channels, sleeping until the NIC's
                          interrupt, instead of polling the CQs (--server or
                          PEER, one QP; not write_lat, whose pings are seen
                          in memory; a server given -e polls for write_lat
                          and -q clients)
  -d, --device DEV        emu (default: emulated NICs), vfio:BDF (a real NIC
                          through VFIO; with --server or PEER) or efa[:NAME]
                          (emulated EFAs; says whether this build has them)
  -h, --help              print this help
  -V, --version           print the version

Exit status: 0 when every run finished and its data verified, 1 when a run failed
or data did not verify, 2 for a bad command line or an unsupported mode.
",
        tests.join(", ")
    )
}

fn usage_err(m: impl Into<String>) -> CliError {
    CliError::Usage(m.into())
}

/// Parses a size with an optional K/M/G suffix (binary multiples).
pub fn parse_size(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1usize << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        b'g' | b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_mtu(s: &str) -> Option<Mtu> {
    Some(match s {
        "256" => Mtu::Mtu256,
        "512" => Mtu::Mtu512,
        "1024" => Mtu::Mtu1024,
        "2048" => Mtu::Mtu2048,
        "4096" => Mtu::Mtu4096,
        _ => return None,
    })
}

/// Whether a positional argument that is not a test name looks like a peer address (an IP
/// address, a dotted or colon-separated name, or `localhost`).
fn looks_like_address(s: &str) -> bool {
    s.parse::<std::net::IpAddr>().is_ok() || s.contains('.') || s.contains(':') || s == "localhost"
}

fn number<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T, CliError> {
    v.parse()
        .map_err(|_| usage_err(format!("{opt}: '{v}' is not a valid number")))
}

/// Parses the arguments (without the program name).
pub fn parse<I, S>(args: I) -> Result<Command, CliError>
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    let args: Vec<String> = args.into_iter().map(Into::into).collect();
    let mut o = Options::default();
    let mut i = 0;
    let mut positional = Vec::new();
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if arg == "--" {
            positional.extend(args[i..].iter().cloned());
            break;
        }
        if !arg.starts_with('-') || arg == "-" {
            positional.push(arg.to_string());
            continue;
        }
        // Split `--opt=value` and `-sVALUE`.
        let (name, attached) = if let Some(long) = arg.strip_prefix("--") {
            match long.split_once('=') {
                Some((n, v)) => (format!("--{n}"), Some(v.to_string())),
                None => (arg.to_string(), None),
            }
        } else if arg.len() > 2 {
            (arg[..2].to_string(), Some(arg[2..].to_string()))
        } else {
            (arg.to_string(), None)
        };
        let flag = |o: &mut Options, attached: &Option<String>| -> Result<(), CliError> {
            if attached.is_some() {
                return Err(usage_err(format!("{name} takes no value")));
            }
            match name.as_str() {
                "-a" | "--all" => o.all = true,
                "--json" => o.json = true,
                "--server" => o.server = true,
                "-e" | "--events" => o.events = true,
                "-R" | "--rdma_cm" | "--rdma-cm" => o.perftest = true,
                _ => unreachable!("flag list"),
            }
            Ok(())
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "-V" | "--version" => return Ok(Command::Version),
            "-a" | "--all" | "--json" | "--server" | "-e" | "--events" | "-R" | "--rdma_cm"
            | "--rdma-cm" => {
                flag(&mut o, &attached)?;
                continue;
            }
            _ => {}
        }
        let value = match attached {
            Some(v) => v,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| usage_err(format!("{name} needs a value")))?;
                i += 1;
                v.clone()
            }
        };
        match name.as_str() {
            "-s" | "--size" => {
                let s = parse_size(&value)
                    .ok_or_else(|| usage_err(format!("{name}: '{value}' is not a size")))?;
                if s == 0 || s > MAX_SIZE {
                    return Err(usage_err(format!(
                        "{name}: {s} is out of range (1 .. {MAX_SIZE} bytes)"
                    )));
                }
                o.size = Some(s);
            }
            "-n" | "--iters" => {
                let n: u64 = number(&name, &value)?;
                if n == 0 {
                    return Err(usage_err(format!("{name}: at least 1 iteration")));
                }
                o.iters = Some(n);
            }
            "-D" | "--duration" => {
                let d: f64 = number(&name, &value)?;
                if !(d.is_finite() && d > 0.0 && d <= 86_400.0) {
                    return Err(usage_err(format!(
                        "{name}: '{value}' is not a duration in seconds (0 .. 86400]"
                    )));
                }
                o.duration = Some(d);
            }
            "-t" | "--tx-depth" => {
                let t: u32 = number(&name, &value)?;
                if t == 0 || t > MAX_DEPTH {
                    return Err(usage_err(format!("{name}: 1 .. {MAX_DEPTH}")));
                }
                o.tx_depth = Some(t);
            }
            "-Q" | "--cq-mod" => {
                let q: u32 = number(&name, &value)?;
                if q == 0 || q > MAX_DEPTH {
                    return Err(usage_err(format!("{name}: 1 .. {MAX_DEPTH}")));
                }
                o.cq_mod = Some(q);
            }
            "-I" | "--inline-size" => {
                let v: u32 = number(&name, &value)?;
                if v > 1024 {
                    return Err(usage_err(format!("{name}: at most 1024 bytes")));
                }
                o.inline = Some(v);
            }
            "-m" | "--mtu" => {
                o.mtu = Some(parse_mtu(&value).ok_or_else(|| {
                    usage_err(format!(
                        "{name}: 256, 512, 1024, 2048 or 4096, not '{value}'"
                    ))
                })?);
            }
            "--plot" => o.plot = Some(PathBuf::from(value)),
            "--bind" => {
                o.bind =
                    Some(value.parse().map_err(|_| {
                        usage_err(format!("{name}: '{value}' is not an IPv4 address"))
                    })?);
            }
            "-p" | "--port" => {
                let p: u16 = number(&name, &value)?;
                if p == 0 {
                    return Err(usage_err(format!("{name}: 1 .. 65535")));
                }
                o.port = Some(p);
            }
            "--fabric" => match device_open::fabric::parse_fabric(&value) {
                Ok(device_open::fabric::Fabric::Udp(p)) => o.fabric_port = Some(p),
                Ok(device_open::fabric::Fabric::Eth { local, remote }) => {
                    o.eth = Some((local, remote))
                }
                Err(e) => return Err(usage_err(format!("{name}: {e}"))),
            },
            "--fabric-port" => {
                let p: u16 = number(&name, &value)?;
                if p == 0 {
                    return Err(usage_err(format!("{name}: 1 .. 65535")));
                }
                o.fabric_port = Some(p);
            }
            "--timeout" => {
                let t: f64 = number(&name, &value)?;
                if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
                    return Err(usage_err(format!(
                        "{name}: '{value}' is not a duration in seconds (0 .. 86400]"
                    )));
                }
                o.timeout = Some(t);
            }
            "-d" | "--device" => o.device = Some(value),
            "-q" | "--qps" => {
                let q: u32 = number(&name, &value)?;
                if q == 0 || q > MAX_QPS {
                    return Err(usage_err(format!("{name}: 1 .. {MAX_QPS}")));
                }
                o.qps = Some(q);
            }
            _ => return Err(usage_err(format!("unknown option '{arg}'"))),
        }
    }

    let mut pos = positional.into_iter();
    if let Some(first) = pos.next() {
        match Test::from_name(&first) {
            Some(t) => o.test = Some(t),
            None if looks_like_address(&first) => o.peer = Some(first),
            None => {
                return Err(usage_err(format!(
                    "unknown test '{first}' (one of: {})",
                    Test::ALL.map(|t| t.name()).join(", ")
                )));
            }
        }
    }
    if let Some(next) = pos.next() {
        if o.peer.is_some() {
            return Err(usage_err(format!("unexpected argument '{next}'")));
        }
        o.peer = Some(next);
    }
    if let Some(extra) = pos.next() {
        return Err(usage_err(format!("unexpected argument '{extra}'")));
    }
    check(&o)?;
    Ok(Command::Run(o))
}

/// Consistency checks, then the modes that cannot run yet.
fn check(o: &Options) -> Result<(), CliError> {
    if o.iters.is_some() && o.duration.is_some() {
        return Err(usage_err("-n and -D are exclusive"));
    }
    if o.size.is_some() && o.all {
        return Err(usage_err("-s and -a are exclusive"));
    }
    if let Some(p) = &o.plot
        && p.as_os_str().is_empty()
    {
        return Err(usage_err("--plot needs a file name"));
    }
    match o.test {
        None => {
            if o.size.is_some() || o.all {
                return Err(usage_err(
                    "-s and -a need a test; the default suite runs fixed sizes",
                ));
            }
        }
        Some(Test::AtomicLat) => {
            if o.size.is_some_and(|s| s != 8) {
                return Err(usage_err("atomic_lat: atomics are 8 bytes"));
            }
        }
        Some(_) => {}
    }
    if let Some(t) = o.test
        && o.inline.is_some_and(|i| i > 0)
        && !t.can_inline()
    {
        return Err(usage_err(format!(
            "{}: -I applies to SEND and WRITE tests only",
            t.name()
        )));
    }
    if let Some(t) = o.test
        && t.is_lat()
        && (o.tx_depth.is_some() || o.cq_mod.is_some())
    {
        return Err(usage_err(format!(
            "{}: -t and -Q apply to bandwidth tests (latency tests keep one message in flight)",
            t.name()
        )));
    }
    let device = o.device.as_deref().unwrap_or("emu");
    let family: Family = device
        .parse()
        .map_err(|e| usage_err(format!("--device {e}")))?;
    family
        .available()
        .map_err(|e| usage_err(format!("--device {device}: {e}")))?;
    let peer = match &o.peer {
        None => None,
        Some(p) => Some(p.parse::<Ipv4Addr>().map_err(|_| {
            usage_err(format!(
                "peer '{p}': not an IPv4 address (no name lookup here)"
            ))
        })?),
    };
    if o.server && peer.is_some() {
        return Err(usage_err("--server and a peer address are exclusive"));
    }
    let remote = o.server || peer.is_some();
    if !remote {
        if device != "emu" && device != "efa" {
            return Err(usage_err(format!(
                "--device {device}: a real NIC runs one end: add --server or a peer address \
                 (the embedded mode runs both ends on two emulated NICs: emu or efa)"
            )));
        }
        if o.bind.is_some() || o.port.is_some() || o.fabric_port.is_some() || o.timeout.is_some() {
            return Err(usage_err(
                "--bind, -p, --fabric-port and --timeout apply to --server and client mode",
            ));
        }
    }
    if o.events {
        if !remote {
            return Err(usage_err(
                "-e: the embedded mode drives both NICs from one thread, which cannot sleep: \
                 use --server and PEER",
            ));
        }
        match o.test {
            None if !o.server => {
                return Err(usage_err(
                    "-e needs a test (the default suite runs write_lat, whose pings are seen \
                     in memory, not in a CQ)",
                ));
            }
            Some(Test::WriteLat) => {
                return Err(usage_err(
                    "write_lat: -e does not apply (the pings are seen in memory, not in a CQ)",
                ));
            }
            _ => {}
        }
        if o.qps.is_some_and(|q| q > 1) {
            return Err(usage_err(
                "-e with -q: one QP only (the QPs share the connection manager, which lends a \
                 connection's completion channels under its lock)",
            ));
        }
    }
    if o.perftest {
        let tests = "send_lat, send_bw, write_lat, write_bw or read_bw";
        match o.test {
            Some(Test::SendLat | Test::SendBw | Test::WriteLat | Test::WriteBw | Test::ReadBw) => {}
            _ => return Err(usage_err(format!("-R needs a test: {tests}"))),
        }
        if !remote {
            return Err(usage_err(
                "-R: perftest's exchange is between two processes: add --server or a peer address",
            ));
        }
        if o.all
            || o.duration.is_some()
            || o.qps.is_some_and(|q| q > 1)
            || o.events
            || o.json
            || o.plot.is_some()
            || o.inline.is_some_and(|i| i > 0)
        {
            return Err(usage_err(
                "-R runs one size (-s) for -n iterations on one QP: not with -a, -D, -q, -e, -I, \
                 --json or --plot",
            ));
        }
    }
    if o.eth.is_some() {
        if !remote {
            return Err(usage_err(
                "--fabric eth: is one end of a link: add --server or a peer address",
            ));
        }
        if device != "emu" {
            return Err(usage_err(format!(
                "--fabric eth: is the emulated NIC's; not with --device {device}"
            )));
        }
        if o.fabric_port.is_some() {
            return Err(usage_err("--fabric eth: and --fabric-port are exclusive"));
        }
    }
    if remote && o.mtu.is_some() {
        return Err(usage_err(
            "-m: in two-process mode the connection manager sets the path MTU",
        ));
    }
    if o.server
        && !o.perftest
        && (o.size.is_some()
            || o.all
            || o.iters.is_some()
            || o.duration.is_some()
            || o.tx_depth.is_some()
            || o.cq_mod.is_some()
            || o.inline.is_some()
            || o.plot.is_some()
            || o.qps.is_some())
    {
        return Err(usage_err(
            "--server takes the test parameters from the client: give -s, -a, -n, -D, -t, -Q, \
             -I, -q and --plot to the client",
        ));
    }
    if device == "emu" && o.eth.is_none() {
        for (what, ip) in [("--bind", o.bind), ("peer", peer)] {
            if let Some(ip) = ip
                && !ip.is_loopback()
            {
                return Err(usage_err(format!(
                    "{what} {ip}: emulated NICs live on 127.0.0.0/8 (test traffic never leaves \
                     the machine)"
                )));
            }
        }
    }
    if let (Some(p), Some(b)) = (peer, o.bind.or(Some(crate::remote::DEFAULT_CLIENT_IP)))
        && p == b
    {
        return Err(usage_err(format!(
            "peer {p} is this NIC's own address: give the client another one with --bind"
        )));
    }
    Ok(())
}

impl Options {
    /// Where the two ends run.
    pub fn mode(&self) -> Mode {
        match self.peer.as_deref().and_then(|p| p.parse().ok()) {
            Some(ip) => Mode::Client(ip),
            None if self.server => Mode::Server,
            None => Mode::Embedded,
        }
    }

    /// The device family (`--device`; checked by [`parse`]).
    pub fn family(&self) -> Family {
        self.device
            .as_deref()
            .unwrap_or("emu")
            .parse()
            .unwrap_or(Family::Emu)
    }

    /// QPs, one per thread (`-q`).
    pub fn qps(&self) -> u32 {
        self.qps.unwrap_or(1)
    }

    /// Local NIC, ports and timeout of the two-process mode.
    pub fn net(&self) -> crate::remote::Net {
        use crate::remote::*;
        let local = self.bind.unwrap_or(if self.server {
            DEFAULT_SERVER_IP
        } else {
            DEFAULT_CLIENT_IP
        });
        Net {
            local,
            port: self.port.unwrap_or(DEFAULT_CM_PORT),
            fabric_port: self.fabric_port.unwrap_or(DEFAULT_FABRIC_PORT),
            timeout: Duration::from_secs_f64(self.timeout.unwrap_or(DEFAULT_TIMEOUT_S)),
            events: self.events,
            srd: matches!(self.family(), device_open::Family::Efa(_)),
        }
    }

    /// The sizes to run for `test`.
    pub fn sizes(&self, test: Test) -> Vec<usize> {
        if test == Test::AtomicLat {
            vec![8]
        } else if self.all {
            ALL_SIZES.map(|p| 1usize << p).collect()
        } else {
            vec![self.size.unwrap_or(test.default_size())]
        }
    }

    /// How long each size runs.
    pub fn plan(&self) -> Plan {
        match self.duration {
            Some(d) => Plan::Duration(Duration::from_secs_f64(d)),
            None => Plan::Iters(self.iters.unwrap_or(DEFAULT_ITERS)),
        }
    }

    /// Bandwidth queue depth.
    pub fn tx_depth(&self) -> u32 {
        self.tx_depth.unwrap_or(DEFAULT_TX_DEPTH)
    }

    /// Bandwidth completion moderation (never above the depth, or the queue would stall).
    pub fn cq_mod(&self) -> u32 {
        self.cq_mod.unwrap_or(DEFAULT_CQ_MOD).min(self.tx_depth())
    }

    /// Inline threshold for `test`.
    pub fn inline(&self, test: Test) -> u32 {
        if test.can_inline() {
            self.inline.unwrap_or(test.default_inline())
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Options {
        match parse(args.iter().copied()) {
            Ok(Command::Run(o)) => o,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    fn err(args: &[&str]) -> CliError {
        match parse(args.iter().copied()) {
            Err(e) => e,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn defaults_and_values() {
        let o = run(&[]);
        assert_eq!(o.test, None);
        assert_eq!(o.plan(), Plan::Iters(1000));
        let o = run(&["write_bw", "-s", "4K", "-n50", "--tx-depth=16", "--json"]);
        assert_eq!(o.test, Some(Test::WriteBw));
        assert_eq!(o.sizes(Test::WriteBw), vec![4096]);
        assert_eq!(o.plan(), Plan::Iters(50));
        assert_eq!((o.tx_depth(), o.cq_mod()), (16, 16));
        assert!(o.json);
        let o = run(&["send_lat", "-a", "-D", "0.5"]);
        let sizes = o.sizes(Test::SendLat);
        assert_eq!(
            (sizes.len(), sizes[0], *sizes.last().unwrap()),
            (23, 2, 8 << 20)
        );
        assert_eq!(o.plan(), Plan::Duration(Duration::from_millis(500)));
        assert_eq!(o.inline(Test::SendLat), 236);
        assert_eq!(o.inline(Test::ReadLat), 0);
        assert_eq!(run(&["atomic_lat", "-a"]).sizes(Test::AtomicLat), vec![8]);
        assert_eq!(run(&["read_lat"]).sizes(Test::ReadLat), vec![2]);
        assert_eq!(run(&["read_bw"]).sizes(Test::ReadBw), vec![65536]);
    }

    #[test]
    fn usage_errors() {
        for bad in [
            &["nope"][..],
            &["write_bw", "-s"],
            &["write_bw", "-s", "0"],
            &["write_bw", "-s", "2G"],
            &["write_bw", "-n", "0"],
            &["write_bw", "-n", "5", "-D", "1"],
            &["write_bw", "-s", "8", "-a"],
            &["-s", "8"],
            &["atomic_lat", "-s", "16"],
            &["read_lat", "-I", "64"],
            &["send_lat", "-t", "4"],
            &["write_bw", "--bogus"],
            &["write_bw", "--json=1"],
            &["write_bw", "-m", "1500"],
            &["write_bw", "-d", "mlx5_0"],
            &["write_bw", "1.2.3.4", "extra"],
        ] {
            assert!(matches!(err(bad), CliError::Usage(_)), "{bad:?}");
        }
    }

    #[test]
    fn modes() {
        assert_eq!(run(&[]).mode(), Mode::Embedded);
        let o = run(&["write_bw", "--server"]);
        assert_eq!(o.mode(), Mode::Server);
        assert_eq!(o.net().local, Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!((o.net().port, o.net().fabric_port), (18515, 4791));
        let o = run(&[
            "write_bw",
            "127.0.0.2",
            "--bind",
            "127.0.7.1",
            "-p",
            "9",
            "--fabric-port",
            "47001",
        ]);
        assert_eq!(o.mode(), Mode::Client(Ipv4Addr::new(127, 0, 0, 2)));
        assert_eq!(o.net().local, Ipv4Addr::new(127, 0, 7, 1));
        assert_eq!((o.net().port, o.net().fabric_port), (9, 47001));
        let o = run(&["127.0.0.9", "--timeout", "2.5"]);
        assert_eq!(o.test, None);
        assert_eq!(o.net().timeout, Duration::from_millis(2500));
        let o = run(&["send_lat", "--server", "--device", "vfio:0000:01:00.0"]);
        assert_eq!(o.family(), Family::Vfio("0000:01:00.0".into()));
        // the emulated EFA opens (device-open); an EFA by name does not
        let o = run(&["write_bw", "--server", "--device", "efa"]);
        assert_eq!(o.family(), Family::Efa(None));
        assert!(matches!(
            err(&["write_bw", "--server", "--device", "efa:rdmap0s6"]),
            CliError::Usage(m) if m.contains("not available")
        ));
        assert_eq!(run(&["write_bw", "--device", "efa"]).mode(), Mode::Embedded);
        assert_eq!(run(&["write_bw", "-q", "4"]).qps(), 4);
        for bad in [
            &["write_bw", "-q", "0"][..],
            &["write_bw", "-q", "17"],
            &["write_bw", "--server", "-q", "2"],
        ] {
            assert!(matches!(err(bad), CliError::Usage(_)), "{bad:?}");
        }
        for bad in [
            &["write_bw", "--server", "127.0.0.2"][..],
            &["send_lat", "--device", "vfio:0000:01:00.0"],
            &["write_bw", "--bind", "127.0.0.5"],
            &["write_bw", "-p", "7"],
            &["write_bw", "10.0.0.1"],
            &["write_bw", "127.0.0.2", "--bind", "10.0.0.1"],
            &["write_bw", "127.0.0.1"],
            &["write_bw", "--server", "-s", "64"],
            &["write_bw", "--server", "-n", "5"],
            &["write_bw", "127.0.0.2", "-m", "1024"],
            &["write_bw", "host.example"],
            &["write_bw", "--server", "--timeout", "0"],
            &["write_bw", "--server", "--device", "vfio:zz"],
        ] {
            assert!(matches!(err(bad), CliError::Usage(_)), "{bad:?}");
        }
    }

    #[test]
    fn help() {
        assert!(matches!(parse(["-h"]), Ok(Command::Help)));
        assert!(matches!(parse(["write_bw", "--help"]), Ok(Command::Help)));
        assert!(usage().contains("atomic_lat"));
    }
}

//! librdmacm's example programs on the stack's public API: `rdma_server` and `rdma_client`
//! (a synchronous RC endpoint each, one 16-byte SEND each way), `udaddy` (UD ids on an event
//! channel, SIDR, messages both ways with immediate data) and `ucmatose` (N RC connections
//! on an event channel, messages both ways, disconnect). Each binary behaves and prints as
//! rdma-core's program of the same name (librdmacm/examples) does, so that either end can be
//! the original; what they add goes to stderr.
//!
//! They run on an emulated ConnectX-class NIC (the mlx5 driver, our connection manager) on
//! an Ethernet link in QEMU's socket-netdev format ([`nic_testbed::EthNic`]), as
//! `rping --fabric eth:` does, which is how they meet rdma-core's programs on Linux soft-RoCE
//! in a guest. The programs never fill the neighbour table themselves: address resolution
//! goes through the connection manager, which asks the port (ARP), as a kernel's
//! `rdma_resolve_addr` does.
//!
//! Every binary takes, besides its C options:
//!
//! ```text
//! --fabric eth:LOCAL,REMOTE   the link: our UDP socket 127.0.0.1:LOCAL, the peer's :REMOTE (required)
//! --ip ADDR                   this NIC's IPv4 address on the link (default: -b if given)
//! --mac MAC                   this NIC's MAC (default 02:00 and the address's 4 bytes)
//! --timeout SECS              a blocking call or a wait for completions gives up (default 60)
//! ```
//!
//! This library holds what the four share: those options ([`Common`]), a small `getopt`
//! ([`getopt`]), the NIC ([`start_nic`]) and the per-connection verbs objects the two
//! event-channel programs make themselves ([`Node`]).
//!
//! ```
//! use cm_examples::{getopt, split_common};
//! let args: Vec<String> = ["-s", "10.0.0.2", "--fabric", "eth:1000,1001", "-C5"]
//!     .iter().map(|s| s.to_string()).collect();
//! let (common, rest) = split_common(args).unwrap();
//! assert_eq!(common.fabric, Some((1000, 1001)));
//! let opts = getopt(&rest, "s:C:").unwrap();
//! assert_eq!(opts, vec![('s', "10.0.0.2".to_string()), ('C', "5".to_string())]);
//! ```

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::{Cm, CmConfig, CmId, CmPd, DeviceId};
pub use nic_testbed::{EthDevice, EthNic};
use verbs::{AccessFlags, Buffer, MemoryRegion, Provider, WorkCompletion};

/// The options every program takes besides its C ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Common {
    /// `--fabric eth:LOCAL,REMOTE`.
    pub fabric: Option<(u16, u16)>,
    /// `--ip`.
    pub ip: Option<Ipv4Addr>,
    /// `--mac`.
    pub mac: Option<[u8; 6]>,
    /// `--timeout` in seconds.
    pub timeout_s: u64,
}

/// The text of the common options, for usage messages.
pub const COMMON_USAGE: &str = "\t--fabric eth:LOCAL,REMOTE (required)\n\t[--ip address] (default: -b)\n\t[--mac MAC]\n\t[--timeout seconds] (default 60)";

fn parse_fabric(v: &str) -> Result<(u16, u16), String> {
    match device_open::fabric::parse_fabric(v)? {
        device_open::fabric::Fabric::Eth { local, remote } => Ok((local, remote)),
        _ => Err(format!(
            "invalid fabric {v:?}: eth:LOCAL,REMOTE (these programs run on an Ethernet link)"
        )),
    }
}

/// Takes the common options out of `args`; the rest, in order, is the program's.
pub fn split_common(args: Vec<String>) -> Result<(Common, Vec<String>), String> {
    let mut c = Common {
        fabric: None,
        ip: None,
        mac: None,
        timeout_s: 60,
    };
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        if !matches!(name.as_str(), "--fabric" | "--ip" | "--mac" | "--timeout") {
            rest.push(a);
            continue;
        }
        let v = match inline {
            Some(v) => v,
            None => it.next().ok_or_else(|| format!("{name} needs a value"))?,
        };
        match name.as_str() {
            "--fabric" => c.fabric = Some(parse_fabric(&v)?),
            "--ip" => c.ip = Some(v.parse().map_err(|_| format!("invalid address {v:?}"))?),
            "--mac" => c.mac = Some(device_open::fabric::parse_mac(&v)?),
            _ => {
                c.timeout_s = v
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("invalid timeout {v:?}"))?
            }
        }
    }
    Ok((c, rest))
}

/// POSIX `getopt` for short options as the C programs use it: `spec` lists the letters, a
/// `:` after one takes a value (`-p 7471` or `-p7471`). Stops at the first operand or `--`.
/// An unknown letter or a missing value is an error naming it.
pub fn getopt(args: &[String], spec: &str) -> Result<Vec<(char, String)>, String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        if a == "--" {
            break;
        }
        let Some(letters) = a.strip_prefix('-').filter(|l| !l.is_empty()) else {
            return Err(format!("unexpected argument {a:?}"));
        };
        for (at, ch) in letters.char_indices() {
            let pos = spec
                .find(ch)
                .filter(|_| ch != ':')
                .ok_or_else(|| format!("invalid option -- '{ch}'"))?;
            if spec[pos + 1..].starts_with(':') {
                let inline = &letters[at + ch.len_utf8()..];
                let v = if !inline.is_empty() {
                    inline.to_string()
                } else {
                    i += 1;
                    args.get(i)
                        .cloned()
                        .ok_or_else(|| format!("option requires an argument -- '{ch}'"))?
                };
                out.push((ch, v));
                break;
            }
            out.push((ch, String::new()));
        }
        i += 1;
    }
    Ok(out)
}

/// C's `atoi`: the leading decimal digits (with a sign), 0 when there are none.
pub fn atoi(s: &str) -> i32 {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| {
            (n * 10 + i64::from(d - b'0')).min(i64::from(i32::MAX))
        });
    (if neg { -n } else { n }) as i32
}

/// The MAC of a NIC at `ip` unless `--mac` says otherwise: 02:00 and the address.
pub fn default_mac(ip: Ipv4Addr) -> [u8; 6] {
    device_open::mac_for(ip)
}

/// Starts this process's NIC at `ip` on the link of `--fabric`, in a connection manager
/// whose blocking calls give up after `--timeout`; its neighbour table starts empty.
pub fn start_nic(c: &Common, ip: Ipv4Addr) -> Result<EthNic, String> {
    let (local, remote) = c
        .fabric
        .ok_or("--fabric eth:LOCAL,REMOTE is required (the NIC's Ethernet link)")?;
    let cfg = CmConfig {
        wait_limit_ns: Some(c.timeout_s.saturating_mul(1_000_000_000)),
        ..CmConfig::default()
    };
    device_open::fabric::eth_nic(ip, local, remote, c.mac, cfg)
}

/// Shuts the NIC down; reports on stderr what the device still held (nothing, normally).
pub fn stop_nic(nic: EthNic, prog: &str) {
    match nic.shutdown() {
        Ok(live) if live == Default::default() => {}
        Ok(live) => eprintln!("{prog}: device objects left at shutdown: {live:?}"),
        Err(e) => eprintln!("{prog}: shutdown: {e}"),
    }
}

/// Waits for completions: calls `poll` until it reports `want` in all, yielding the CPU
/// between empty polls; ETIMEDOUT-like error after `timeout`.
pub fn poll_until(
    want: usize,
    timeout: Duration,
    mut poll: impl FnMut(&mut [WorkCompletion]) -> Result<usize, String>,
    mut each: impl FnMut(&WorkCompletion) -> Result<(), String>,
) -> Result<(), String> {
    let end = Instant::now() + timeout;
    let mut wc = [WorkCompletion::default(); 8];
    let mut done = 0;
    while done < want {
        let n = poll(&mut wc)?;
        for w in &wc[..n] {
            each(w)?;
        }
        done += n;
        if n == 0 {
            if Instant::now() > end {
                return Err(format!("{done} of {want} completions after {timeout:?}"));
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    Ok(())
}

/// The verbs objects of one connection of `udaddy` / `ucmatose` (`struct cmatest_node`):
/// a PD of its own, a send and a receive CQ (one CQ for both when `shared_cq`), the QP on
/// the id, and registered message memory.
pub struct Node<P: Provider> {
    /// The id (`cma_id`).
    pub id: CmId<P>,
    /// The node's PD.
    pub pd: Option<CmPd>,
    /// Send CQ.
    pub send_cq: Option<Arc<P::Cq>>,
    /// Receive CQ (the same handle as `send_cq` for a shared CQ).
    pub recv_cq: Option<Arc<P::Cq>>,
    /// Message memory.
    pub mem: Option<Buffer>,
    /// Its registration.
    pub mr: Option<P::Mr>,
    /// The peer's address handle (UD).
    pub ah: Option<P::Ah>,
    /// The peer's QP number (UD).
    pub remote_qpn: u32,
    /// The peer's Q_Key (UD).
    pub remote_qkey: u32,
    /// Connected (ESTABLISHED, or accepted for UD).
    pub connected: bool,
}

impl<P: Provider> Node<P> {
    /// A node for `id`, with nothing made yet.
    pub fn new(id: CmId<P>) -> Node<P> {
        Node {
            id,
            pd: None,
            send_cq: None,
            recv_cq: None,
            mem: None,
            mr: None,
            ah: None,
            remote_qpn: 0,
            remote_qkey: 0,
            connected: false,
        }
    }

    /// The id's device (`cma_id->verbs`); an error before address resolution bound it.
    pub fn dev(&self) -> Result<DeviceId, String> {
        self.id
            .device()
            .ok_or_else(|| "the id is bound to no device".into())
    }

    fn cm(&self) -> &Cm<P> {
        self.id.cm()
    }

    /// `init_node`: PD, CQs of `cqe` entries (one shared when `shared_cq`), a QP of
    /// `qp_type` with `wr` work requests each way (one SGE, `sq_sig_all`), then `mem_len`
    /// bytes of registered memory (none for 0). Errors are the C program's messages.
    #[allow(clippy::too_many_arguments)]
    pub fn init(
        &mut self,
        prog: &str,
        qp_type: verbs::QpType,
        cqe: u32,
        wr: u32,
        shared_cq: bool,
        sq_sig_all: bool,
        mem_len: usize,
    ) -> Result<(), String> {
        let cm = self.cm().clone();
        let dev = self.dev()?;
        let pd = cm
            .alloc_pd(dev)
            .map_err(|_| format!("{prog}: unable to allocate PD"))?;
        self.pd = Some(pd);
        let mk = || -> Result<Arc<P::Cq>, String> {
            cm.with_provider(dev, |p| p.create_cq(cqe, 0, None))
                .map_err(|e| format!("{e:?}"))?
                .map(Arc::new)
                .map_err(|_| format!("{prog}: unable to create CQ"))
        };
        let scq = mk()?;
        let rcq = if shared_cq { scq.clone() } else { mk()? };
        self.send_cq = Some(scq.clone());
        self.recv_cq = Some(rcq.clone());
        let mut attr = cm::QpInitAttr {
            qp_type,
            send_cq: Some(scq),
            recv_cq: Some(rcq),
            srq: None,
            cap: verbs::QpCap {
                max_send_wr: wr,
                max_recv_wr: wr,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all,
        };
        self.id
            .create_qp(self.pd.as_ref(), &mut attr)
            .map_err(|e| format!("{prog}: unable to create QP: {e:?}"))?;
        if mem_len > 0 {
            let mem = cm
                .with_provider(dev, |p| p.alloc_buf(mem_len))
                .map_err(|e| format!("{e:?}"))?
                .map_err(|_| "failed message allocation".to_string())?;
            let pd = self.pd.as_ref().ok_or("no PD")?;
            let mr = cm
                .with_pd(pd, |p, pd| {
                    p.reg_mr(pd, mem.clone(), AccessFlags::LOCAL_WRITE)
                })
                .map_err(|e| format!("{e:?}"))?
                .map_err(|_| "failed to reg MR".to_string())?;
            self.mem = Some(mem);
            self.mr = Some(mr);
        }
        Ok(())
    }

    /// The registered memory's device address, length and lkey.
    pub fn sge(&self, len: u32) -> Result<verbs::Sge, String> {
        let mr = self.mr.as_ref().ok_or("no message memory")?;
        Ok(verbs::Sge {
            addr: mr.addr(),
            length: len,
            lkey: mr.lkey(),
        })
    }

    /// `destroy_node`: AH, QP, CQs, MR, PD, then the id.
    pub fn destroy(mut self) {
        let cm = self.cm().clone();
        let Ok(dev) = self.dev() else {
            self.id.destroy_id();
            return;
        };
        if let Some(ah) = self.ah.take() {
            let _ = cm.with_provider(dev, |p| p.destroy_ah(ah).map_err(|e| e.error));
        }
        let _ = self.id.destroy_qp();
        let scq = self.send_cq.take();
        let rcq = self.recv_cq.take();
        for cq in [scq, rcq].into_iter().flatten() {
            if let Ok(cq) = Arc::try_unwrap(cq) {
                let _ = cm.with_provider(dev, |p| p.destroy_cq(cq).map_err(|e| e.error));
            }
        }
        if let Some(mr) = self.mr.take() {
            let _ = cm.dereg_mr(dev, mr);
        }
        self.mem = None;
        if let Some(pd) = self.pd.take() {
            let _ = cm.dealloc_pd(pd);
        }
        self.id.destroy_id();
    }
}

/// The program's static memory (`mem`, a [`verbs::StaticBytes`] taken once) as a buffer the
/// id's device reaches ([`CmId::map_buf`]), as the C programs register their static arrays;
/// where the device's DMA cannot map it (NotSupported), device memory of the same size.
pub fn static_or_device<P: Provider>(
    id: &CmId<P>,
    mem: &'static mut [u8],
) -> Result<Buffer, cm::Error> {
    let len = mem.len();
    match id.map_buf(mem) {
        Err(cm::Error::NotSupported) => id.alloc_buf(len),
        r => r,
    }
}

/// librdmacm's `rdma_event_str`.
pub fn event_str(e: cm::EventType) -> &'static str {
    use cm::EventType::*;
    match e {
        AddrResolved => "RDMA_CM_EVENT_ADDR_RESOLVED",
        AddrError => "RDMA_CM_EVENT_ADDR_ERROR",
        RouteResolved => "RDMA_CM_EVENT_ROUTE_RESOLVED",
        RouteError => "RDMA_CM_EVENT_ROUTE_ERROR",
        ConnectRequest => "RDMA_CM_EVENT_CONNECT_REQUEST",
        ConnectResponse => "RDMA_CM_EVENT_CONNECT_RESPONSE",
        ConnectError => "RDMA_CM_EVENT_CONNECT_ERROR",
        Unreachable => "RDMA_CM_EVENT_UNREACHABLE",
        Rejected => "RDMA_CM_EVENT_REJECTED",
        Established => "RDMA_CM_EVENT_ESTABLISHED",
        Disconnected => "RDMA_CM_EVENT_DISCONNECTED",
        DeviceRemoval => "RDMA_CM_EVENT_DEVICE_REMOVAL",
        MulticastJoin => "RDMA_CM_EVENT_MULTICAST_JOIN",
        MulticastError => "RDMA_CM_EVENT_MULTICAST_ERROR",
        AddrChange => "RDMA_CM_EVENT_ADDR_CHANGE",
        TimewaitExit => "RDMA_CM_EVENT_TIMEWAIT_EXIT",
    }
}

/// The message the ports send (the C programs send whatever their buffers hold): byte `i`
/// is `'a' + (i + seed) % 26`, so a receiver can tell which bytes it got.
pub fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + ((i + seed) % 26) as u8).collect()
}

/// The exit status of a C `main` returning `ret` (its low 8 bits).
pub fn exit_code(ret: i32) -> std::process::ExitCode {
    std::process::ExitCode::from((ret & 0xff) as u8)
}

/// The NIC address: `--ip`, else `-b`'s.
pub fn nic_ip(c: &Common, bind: Option<&str>) -> Result<Ipv4Addr, String> {
    if let Some(ip) = c.ip {
        return Ok(ip);
    }
    match bind {
        Some(b) => b
            .parse()
            .map_err(|_| format!("-b {b:?}: not an IPv4 address")),
        None => Err("this NIC's address is needed: --ip ADDR (or -b ADDR)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn getopt_as_posix() {
        assert_eq!(
            getopt(&v(&["-s", "a", "-p7471", "-m"]), "s:p:m").unwrap(),
            vec![
                ('s', "a".into()),
                ('p', "7471".into()),
                ('m', String::new())
            ]
        );
        assert!(getopt(&v(&["-x"]), "s:").unwrap_err().contains("'x'"));
        assert!(getopt(&v(&["-s"]), "s:").unwrap_err().contains("requires"));
        assert!(getopt(&v(&["foo"]), "s:").is_err());
        assert_eq!(atoi("12x"), 12);
        assert_eq!(atoi("x"), 0);
        assert_eq!(atoi("-3"), -3);
    }

    #[test]
    fn common_options_come_out() {
        let (c, rest) = split_common(v(&[
            "-C",
            "3",
            "--fabric=eth:5,6",
            "--ip",
            "10.0.0.1",
            "--mac",
            "02:00:00:00:00:09",
            "--timeout",
            "9",
        ]))
        .unwrap();
        assert_eq!(rest, v(&["-C", "3"]));
        assert_eq!(c.fabric, Some((5, 6)));
        assert_eq!(c.ip, Some(Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(c.mac, Some([2, 0, 0, 0, 0, 9]));
        assert_eq!(c.timeout_s, 9);
        for bad in [
            &["--fabric", "eth:5,5"][..],
            &["--fabric", "udp:5"],
            &["--mac", "1:2"],
            &["--timeout", "0"],
            &["--ip"],
        ] {
            assert!(split_common(v(bad)).is_err(), "{bad:?}");
        }
    }
}

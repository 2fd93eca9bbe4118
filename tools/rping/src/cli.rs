//! The command line: rping's options (`-s`, `-c`, `-a`, `-I`, `-p`, `-C`, `-S`, `-v`, `-V`, `-d`)
//! plus `--fabric` and `--timeout`, their defaults and limits, and the usage text.

use std::net::Ipv4Addr;

use crate::exchange::RPING_BUFSIZE;

/// rping's default port.
pub(crate) const DEFAULT_PORT: u16 = 7174;

/// rping's default ping size (`cb->size = 64`).
pub(crate) const DEFAULT_SIZE: usize = 64;

/// rping's `RPING_MIN_BUFSIZE`: `sizeof(stringify(INT_MAX)) + sizeof(RPING_MSG_FMT)`, the
/// macro expanded first (`"2147483647"` or `"0x7fffffff"`: 11 bytes) = 11 + 15 = 26.
pub(crate) const MIN_SIZE: usize = "2147483647".len() + 1 + "rdma-ping-%d: ".len() + 1;

/// rping's largest ping (`RPING_BUFSIZE - 1`).
pub(crate) const MAX_SIZE: usize = RPING_BUFSIZE - 1;

/// The RoCEv2 UDP port: the emulated fabric's default.
pub(crate) const DEFAULT_FABRIC_PORT: u16 = 4791;

/// How long a blocking CM call waits for the peer by default, in seconds.
pub(crate) const DEFAULT_TIMEOUT_S: u64 = 60;

pub(crate) const USAGE: &str =
    "usage: rping [-v] [-V] [-d] [-e] [-C count] [-S size] [-p port]        (embedded)
       rping -s -a addr [options] [fabric]                       (server)
       rping -c -a addr [-I src] [options] [fabric]              (client)
  -s          server: one emulated NIC at addr; serves one connection until the client
              disconnects (-C does not limit it; any ping size up to 65535 is taken)
  -c          client: one emulated NIC at src, connects to the server at addr
  -a addr     server: this NIC's address (udp fabric: default 127.0.0.2);
              client: the server's address
  -I src      client: this NIC's address (udp fabric: default 127.0.0.1, in addr's /24)
  -v          print each ping's data (client \"ping data: ...\", server \"server ping data: ...\")
  -V          validate: the client compares sink and source (always; reported with -V),
              the server checks each READ against rping's pattern
  -d          debug output (the message exchange)
  -e          event mode: wait for each completion on the CQ's completion channel, the
              thread sleeping until the NIC's interrupt (rdma-core's rping always does;
              without -e this rping polls its CQs, the poll-mode default of this stack)
  -C count    number of pings (default 10; 0: until interrupted)
  -S size     ping data size (default 64, range 26..65535)
  -p port     port (default 7174)
  --timeout SECS   give up when the peer does not answer for SECS (default 60; the
                   server also waits this long for a connection)
fabric (server and client):
  --fabric udp:PORT        the UDP fabric on 127.0.0.0/8, PORT the same on both ends
                           (default udp:4791; --fabric-port PORT is the same)
  --fabric eth:LOCAL,REMOTE  an Ethernet link in QEMU's socket netdev format: frames from
                           127.0.0.1:LOCAL to 127.0.0.1:REMOTE (QEMU: -netdev socket,
                           udp=127.0.0.1:LOCAL,localaddr=127.0.0.1:REMOTE); addr and src are
                           addresses on that virtual wire, peers are resolved by ARP
  --mac MAC                eth: this NIC's MAC (default 02:00 then the address's 4 bytes)
device (server and client):
  --device DEV             emu (default: an emulated NIC on the fabric above), vfio:BDF (a
                           ConnectX function through VFIO, GID 0 = addr / src), efa (says
                           whether this build has it)";

pub(crate) use device_open::fabric::Fabric;

/// The command line.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Options {
    pub(crate) count: u32,
    pub(crate) size: usize,
    pub(crate) port: u16,
    pub(crate) verbose: bool,
    pub(crate) validate: bool,
    pub(crate) debug: bool,
    /// `-e`: event mode (completions waited for on completion channels).
    pub(crate) events: bool,
    pub(crate) server: bool,
    pub(crate) client: bool,
    pub(crate) addr: Option<Ipv4Addr>,
    pub(crate) src: Option<Ipv4Addr>,
    pub(crate) fabric: Fabric,
    pub(crate) mac: Option<[u8; 6]>,
    pub(crate) timeout_s: u64,
    /// `--device`: the device family of a server or client (default `emu`).
    pub(crate) device: device_open::Family,
}

/// Why the command line was refused (exit status 2).
#[derive(Debug)]
pub(crate) enum CliError {
    Help,
    Bad(String),
}

pub(crate) fn bad<T>(m: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Bad(m.into()))
}

pub(crate) fn parse_port(v: &str, what: &str) -> Result<u16, CliError> {
    device_open::fabric::parse_port(v, what).map_err(CliError::Bad)
}

pub(crate) fn parse_fabric(v: &str) -> Result<Fabric, CliError> {
    device_open::fabric::parse_fabric(v).map_err(CliError::Bad)
}

pub(crate) fn parse_mac(v: &str) -> Result<[u8; 6], CliError> {
    device_open::fabric::parse_mac(v).map_err(CliError::Bad)
}

pub(crate) fn parse_ip(v: &str) -> Result<Ipv4Addr, CliError> {
    v.parse()
        .or_else(|_| bad(format!("{v}: not an IPv4 address")))
}

pub(crate) fn parse(args: &[String]) -> Result<Options, CliError> {
    let mut o = Options {
        count: 10,
        size: DEFAULT_SIZE,
        port: DEFAULT_PORT,
        verbose: false,
        validate: false,
        debug: false,
        events: false,
        server: false,
        client: false,
        addr: None,
        src: None,
        fabric: Fabric::Udp(DEFAULT_FABRIC_PORT),
        mac: None,
        timeout_s: DEFAULT_TIMEOUT_S,
        device: device_open::Family::Emu,
    };
    let mut fabric_set = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| CliError::Bad(format!("option {name} needs a value")))
        };
        match a.as_str() {
            "-v" => o.verbose = true,
            "-V" => o.validate = true,
            "-d" => o.debug = true,
            "-e" => o.events = true,
            "-s" => o.server = true,
            "-c" => o.client = true,
            "-h" | "--help" => return Err(CliError::Help),
            "-a" => o.addr = Some(parse_ip(&value("-a")?)?),
            "-I" => o.src = Some(parse_ip(&value("-I")?)?),
            "--fabric" | "--fabric-port" => {
                let v = value(a)?;
                let f = if a == "--fabric" {
                    parse_fabric(&v)?
                } else {
                    Fabric::Udp(parse_port(&v, "fabric port")?)
                };
                if fabric_set && f != o.fabric {
                    return bad("--fabric / --fabric-port given twice");
                }
                fabric_set = true;
                o.fabric = f;
            }
            "--mac" => o.mac = Some(parse_mac(&value("--mac")?)?),
            "--device" => {
                let v = value("--device")?;
                o.device = v
                    .parse()
                    .map_err(|e| CliError::Bad(format!("--device {e}")))?;
            }
            "--timeout" => {
                let v = value("--timeout")?;
                o.timeout_s = v
                    .parse()
                    .ok()
                    .filter(|&t| (1..=86_400).contains(&t))
                    .ok_or_else(|| CliError::Bad(format!("invalid timeout {v:?} (1..86400 s)")))?;
            }
            "-C" => {
                let v = value("-C")?;
                o.count = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid count {v:?}")))?;
            }
            "-S" => {
                let v = value("-S")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid size {v:?}")))?;
                if !(MIN_SIZE..=MAX_SIZE).contains(&n) {
                    return bad(format!(
                        "Invalid size {n} (valid range is {MIN_SIZE} to {MAX_SIZE})"
                    ));
                }
                o.size = n;
            }
            "-p" => {
                let v = value("-p")?;
                o.port = v
                    .parse()
                    .map_err(|_| CliError::Bad(format!("invalid port {v:?}")))?;
            }
            other => return bad(format!("unknown option {other:?}")),
        }
    }
    check(&o, fabric_set)?;
    Ok(o)
}

/// The rules between options.
pub(crate) fn check(o: &Options, fabric_set: bool) -> Result<(), CliError> {
    if o.server && o.client {
        return bad("-s and -c are exclusive");
    }
    if o.client && o.addr.is_none() {
        return bad("-c needs the server's address (-a addr)");
    }
    if !o.server && !o.client {
        if o.addr.is_some() || o.src.is_some() {
            return bad("-a and -I need -s or -c (with neither, both ends run in this process)");
        }
        if fabric_set || o.mac.is_some() {
            return bad("--fabric and --mac need -s or -c (embedded mode has its own fabric)");
        }
        if o.device != device_open::Family::Emu {
            return bad("--device needs -s or -c (embedded mode runs two emulated NICs)");
        }
    }
    if o.src.is_some() && !o.client {
        return bad("-I applies to the client (-c)");
    }
    let addrs = [o.addr, o.src].into_iter().flatten();
    match o.fabric {
        Fabric::Udp(_) => {
            if o.mac.is_some() {
                return bad("--mac applies to the Ethernet fabric (--fabric eth:LOCAL,REMOTE)");
            }
            for ip in addrs {
                if !ip.is_loopback() {
                    return bad(format!(
                        "{ip}: not in 127.0.0.0/8 (the UDP fabric never leaves the machine; \
                         --fabric eth:LOCAL,REMOTE takes addresses on a virtual wire)"
                    ));
                }
            }
        }
        Fabric::Eth { .. } => {
            if o.server && o.addr.is_none() {
                return bad(
                    "-s on the Ethernet fabric needs this NIC's address on the wire (-a addr)",
                );
            }
            if o.client && o.src.is_none() {
                return bad(
                    "-c on the Ethernet fabric needs this NIC's address on the wire (-I src)",
                );
            }
            for ip in addrs {
                if !device_open::fabric::wire_address_ok(ip) {
                    return bad(format!(
                        "{ip}: not a unicast address for the virtual wire (the link itself \
                         uses 127.0.0.1)"
                    ));
                }
            }
            if o.client && o.addr == o.src {
                return bad("-a and -I are the same address");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(v: &[&str]) -> Result<Options, CliError> {
        parse(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn sizes_and_defaults() {
        assert_eq!(MIN_SIZE, 26);
        assert!(a(&["-S", "25"]).is_err());
        assert_eq!(a(&["-S", "26"]).unwrap().size, 26);
        assert_eq!(a(&["-S", "65535"]).unwrap().size, 65535);
        assert!(a(&["-S", "65536"]).is_err());
        let d = a(&[]).unwrap();
        // rping's defaults
        assert_eq!((d.count, d.size, d.port), (10, 64, 7174));
        assert_eq!(d.fabric, Fabric::Udp(4791));
    }

    #[test]
    fn devices() {
        let o = a(&["-s", "-a", "127.0.0.2", "--device", "vfio:0000:3b:00.0"]).unwrap();
        assert_eq!(o.device, device_open::Family::Vfio("0000:3b:00.0".into()));
        assert_eq!(a(&["-s"]).unwrap().device, device_open::Family::Emu);
        assert!(matches!(
            a(&["--device", "vfio:0000:3b:00.0"]),
            Err(CliError::Bad(_))
        ));
        assert!(matches!(
            a(&["-s", "--device", "nonsense"]),
            Err(CliError::Bad(_))
        ));
    }

    #[test]
    fn fabrics() {
        let o = a(&["-s", "-a", "10.77.0.1", "--fabric", "eth:48030,48031"]).unwrap();
        assert_eq!(
            o.fabric,
            Fabric::Eth {
                local: 48030,
                remote: 48031
            }
        );
        let o = a(&[
            "-c",
            "-a",
            "10.77.0.2",
            "-I",
            "10.77.0.1",
            "--fabric",
            "eth:1,2",
            "--mac",
            "02:00:00:77:00:01",
        ])
        .unwrap();
        assert_eq!(o.mac, Some([2, 0, 0, 0x77, 0, 1]));
        assert_eq!(
            a(&["-s", "--fabric", "udp:47000"]).unwrap().fabric,
            Fabric::Udp(47000)
        );
        assert_eq!(
            a(&["-s", "--fabric-port", "47000"]).unwrap().fabric,
            Fabric::Udp(47000)
        );
        for bad in [
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:1"][..],
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:1,1"],
            &["-s", "-a", "10.77.0.1", "--fabric", "eth:0,1"],
            &["-s", "-a", "10.77.0.1", "--fabric", "tcp:1"],
            &["-s", "--fabric", "eth:1,2"],
            &["-s", "-a", "127.0.0.1", "--fabric", "eth:1,2"],
            &["-s", "-a", "224.0.0.1", "--fabric", "eth:1,2"],
            &["-c", "-a", "10.77.0.2", "--fabric", "eth:1,2"],
            &[
                "-c",
                "-a",
                "10.77.0.2",
                "-I",
                "10.77.0.2",
                "--fabric",
                "eth:1,2",
            ],
            &["-s", "--mac", "02:00:00:00:00:01"],
            &[
                "-s",
                "-a",
                "10.77.0.1",
                "--fabric",
                "eth:1,2",
                "--mac",
                "01:00:00:00:00:01",
            ],
            &[
                "-s",
                "-a",
                "10.77.0.1",
                "--fabric",
                "eth:1,2",
                "--mac",
                "02:00:00:00:01",
            ],
            &["--fabric", "eth:1,2"],
            &["-s", "--fabric", "udp:1", "--fabric-port", "2"],
        ] {
            assert!(a(bad).is_err(), "{bad:?}");
        }
    }
}

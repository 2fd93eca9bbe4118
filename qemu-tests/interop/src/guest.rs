//! The soft-RoCE guest: a Debian kernel with `rdma_rxe`, busybox, rdma-core's `rping` (and
//! `rdma`, perftest's `ib_write_bw`) with their shared libraries, built at test time with
//! [`guest_kit`] from Debian packages cached under the workspace's `target/`.
//!
//! The guest's NIC is virtio-net on a QEMU socket netdev (`-netdev socket,udp=…`): its frames
//! reach the host's [`roce_wire::fabric::EthLink`] as UDP datagrams on 127.0.0.1. `/init`
//! brings eth0 up at [`GUEST_IP`], pings the host once (real ARP both ways), adds `rxe0` on
//! eth0 and runs the command line's `mode` (see [`Mode`]); every step prints a marker line on
//! the serial console, which the host reads.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use guest_kit::{Initramfs, Kit, Qemu};

/// The guest's address on the virtual wire.
pub const GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The host NIC's address on the virtual wire.
pub const HOST_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The guest NIC's MAC (QEMU's default prefix).
pub const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x12, 0x34, 0x56];
/// The host NIC's MAC (locally administered).
pub const HOST_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x77, 0x00, 0x01];

/// The packages the guest is built from (the kernel and busybox come from [`Kit`]).
pub const PACKAGES: &[&str] = &[
    "rdma-core",
    "ibverbs-providers",
    "rdmacm-utils",
    "perftest",
    "libibverbs1",
    "librdmacm1",
    "iproute2",
    "libnl-3-200",
    "libnl-route-3-200",
    "libibumad3",
    "libpci3",
    "libmnl0",
    "libc6",
    "libgcc-s1",
    "libbsd0",
    "libmd0",
    "libcap2",
    "libudev1",
    "zlib1g",
    "libelf1",
    // nvme-cli (discovery) and what its libraries need
    "nvme-cli",
    "libnvme1",
    "libjson-c5",
    "libssl3",
    "libdbus-1-3",
    "libsystemd0",
    "libgcrypt20",
    "libgpg-error0",
    "liblzma5",
    "libzstd1",
    "liblz4-1",
];

/// Modules loaded in the guest (their dependencies come along).
pub const MODULES: &[&str] = &[
    "virtio_net",
    "virtio_pci",
    "crc32_generic",
    "configfs",
    "rdma_ucm",
    "rdma_rxe",
    // NVMe over Fabrics: the kernel's initiator and target, a RAM disk, ext2 (through ext4)
    "nvme_rdma",
    "nvmet_rdma",
    "brd",
    "ext4",
    "crc32c_generic",
];

/// Executables copied into the guest (absolute paths inside the packages' trees).
const BINARIES: &[&str] = &[
    "usr/bin/rping",
    "usr/bin/ucmatose",
    "usr/bin/udaddy",
    "usr/bin/rdma_server",
    "usr/bin/rdma_client",
    "usr/bin/ib_write_bw",
    "usr/bin/ib_send_bw",
    "usr/sbin/nvme",
    "usr/bin/ib_send_lat",
    "usr/bin/ib_write_lat",
    "usr/bin/ib_read_bw",
];

/// What the guest runs after rxe is up (`mode=` on the kernel command line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// `rping -s -a GUEST -v -V -C count` (the host connects).
    Server {
        /// `-C`.
        count: u32,
    },
    /// `rping -c -a HOST -v -V -C count -S size -p port`.
    Client {
        /// `-C`.
        count: u32,
        /// `-S`.
        size: usize,
        /// `-p`.
        port: u16,
    },
    /// librdmacm's examples against the host's ports, one after the other (see
    /// [`EXAMPLE_STEPS`]): each guest server prints `STEP listening` once started and
    /// `STEP rc=N` after its output; each guest client first waits until the host's NIC
    /// answers a ping (the host starts its server process when the step before ends), and is
    /// retried (up to 40 times, a second apart) until it succeeds; its last run's output and
    /// `STEP rc=N runs=M` are printed.
    Examples {
        /// Connections of the ucmatose steps (`-c`).
        connections: u32,
        /// Messages of the udaddy and ucmatose steps (`-C`).
        count: u32,
    },
    /// Linux's NVMe-oF initiator (nvme-rdma) against the target at HOST:4420: `nvme discover`,
    /// connect to `nqn` through `/dev/nvme-fabrics`, a pattern written and read back with
    /// O_DIRECT, mke2fs, mount, files written, unmount, disconnect, connect again, the files
    /// checked, disconnect (markers `NVME ...`).
    NvmeHost {
        /// The subsystem NQN.
        nqn: String,
    },
    /// Linux's NVMe-oF target (nvmet-rdma) at GUEST:4420 serving `nqn` from `/dev/ram0`
    /// (brd, 16 MiB, 512-byte blocks) through configfs; waits until the host has written
    /// [`HOST_DONE`] at LBA 0, then checks [`pattern`] at byte [`PATTERN_OFFSET`] (reads of the
    /// RAM disk after dropping the page cache: brd wants 512-byte aligned buffers for O_DIRECT,
    /// which busybox's dd does not give).
    NvmeTarget {
        /// The subsystem NQN.
        nqn: String,
    },
    /// Both directions in one boot: `rping -s -a GUEST -v -V -C count` (the host's client
    /// connects), then, once `peer` (a second host process on the wire) answers a ping,
    /// `rping -c -a peer -v -V -C count` (default size 64, port 7174) against the host's
    /// server; a run the host's server rejected or could not be reached in is tried again
    /// (up to 5 runs, a second apart: the server may answer pings a moment before it
    /// listens).
    ServerThenClient {
        /// `-C` of both runs.
        count: u32,
        /// The host's server, on the wire.
        peer: Ipv4Addr,
    },
    /// perftest with `-R`: first `ib_<test> -R -F -s size -n iters` as the server for each
    /// of `serve` in turn (each announced by `perftest server <test> listening`), then as
    /// the client of 10.77.0.1 for each of `connect`, the k-th on CM port `port + k` (a
    /// client retries until the server there answers, each try gated by a ping).
    Perftest {
        /// Tests the guest serves (`write_bw`, `send_lat`, ...).
        serve: Vec<String>,
        /// Tests the guest runs as the client.
        connect: Vec<String>,
        /// `-s`.
        size: usize,
        /// `-n`.
        iters: u32,
        /// The first client's CM port.
        port: u16,
    },
}

/// What a host writes at LBA 0 of the guest target's namespace when it is done.
pub const HOST_DONE: &str = "INTEROP-HOST-DONE";
/// Where the pattern of the target scenario lies (bytes; 64 KiB-aligned).
pub const PATTERN_OFFSET: u64 = 1 << 20;
/// Length of the pattern of both NVMe scenarios (bytes).
pub const PATTERN_LEN: usize = 256 * 1024;

/// The pattern both NVMe scenarios write: the start of busybox's `seq -w 0 99999` (five
/// digits and a newline per number), [`PATTERN_LEN`] bytes.
pub fn pattern() -> Vec<u8> {
    let mut v = Vec::with_capacity(PATTERN_LEN + 6);
    let mut i = 0u32;
    while v.len() < PATTERN_LEN {
        v.extend_from_slice(format!("{i:05}\n").as_bytes());
        i += 1;
    }
    v.truncate(PATTERN_LEN);
    v
}

/// The steps of [`Mode::Examples`], in order: (marker name, the guest runs the server).
/// `rdma_server` runs twice (a restarted host client meets the same guest CM); the host
/// side is the port of the same program in the other role.
pub const EXAMPLE_STEPS: &[(&str, bool)] = &[
    ("rdma_server-1", true),
    ("rdma_server-2", true),
    ("rdma_client", false),
    ("udaddy-server", true),
    ("udaddy-client", false),
    ("ucmatose-server", true),
    ("ucmatose-client", false),
];

impl Mode {
    fn cmdline(&self) -> String {
        match self {
            Mode::Server { count } => format!("mode=server count={count}"),
            Mode::ServerThenClient { count, peer } => {
                format!("mode=both count={count} peer={peer}")
            }
            Mode::Client { count, size, port } => {
                format!("mode=client count={count} size={size} port={port}")
            }
            Mode::Examples { connections, count } => {
                format!("mode=examples conns={connections} count={count}")
            }
            Mode::NvmeHost { nqn } => format!("mode=nvme_host nqn={nqn}"),
            Mode::NvmeTarget { nqn } => format!("mode=nvme_target nqn={nqn}"),
            Mode::Perftest {
                serve,
                connect,
                size,
                iters,
                port,
            } => {
                let list = |v: &[String]| {
                    if v.is_empty() {
                        "none".to_string()
                    } else {
                        v.join(",")
                    }
                };
                format!(
                    "mode=perftest pserve={} pconnect={} size={size} count={iters} port={port}",
                    list(serve),
                    list(connect)
                )
            }
        }
    }
}

/// The `/init` body (after guest-kit's prologue: proc, sysfs, devtmpfs, modules).
const INIT_BODY: &str = r#"t(){ echo "INTEROP [$(cut -d' ' -f1 /proc/uptime)] $*"; }
mount -t configfs none /sys/kernel/config 2>/dev/null
ip link set lo up
ip link set eth0 up
ip addr add 10.77.0.2/24 dev eth0
i=0; while [ "$(cat /sys/class/net/eth0/carrier 2>/dev/null)" != 1 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
t "eth0 up mac=$(cat /sys/class/net/eth0/address) mtu=$(cat /sys/class/net/eth0/mtu)"
ping -c 1 -W 5 10.77.0.1 >/dev/null 2>&1 && t "ping ok" || t "ping failed"
ip neigh show dev eth0 | sed 's/^/INTEROP neigh: /'
rdma link add rxe0 type rxe netdev eth0 && t "rxe0 added"
t "rxe0 state=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)"
case "$mode" in
server)
  rping -s -a 10.77.0.2 -v -V -C $count > /tmp/rping.out 2> /tmp/rping.err &
  P=$!
  sleep 1
  t "rping server listening"
  wait $P; rc=$?
  cat /tmp/rping.out; sed 's/^/rping stderr: /' /tmp/rping.err
  t "rping server rc=$rc" ;;
client)
  t "rping client start"
  timeout 60 rping -c -a 10.77.0.1 -v -V -C $count -S $size -p $port > /tmp/rping.out 2> /tmp/rping.err; rc=$?
  cat /tmp/rping.out; sed 's/^/rping stderr: /' /tmp/rping.err
  t "rping client rc=$rc" ;;
examples)
  serve(){ name=$1; shift; "$@" > /tmp/ex.out 2>&1 & P=$!; sleep 1; t "$name listening"; wait $P; rc=$?; sed "s/^/$name: /" /tmp/ex.out; t "$name rc=$rc"; }
  client(){ name=$1; shift; i=0; while :; do w=0; until ping -c 1 -W 1 10.77.0.1 >/dev/null 2>&1 || [ $w -ge 60 ]; do w=$((w+1)); done; timeout 60 "$@" > /tmp/ex.out 2>&1; rc=$?; i=$((i+1)); [ $rc = 0 ] || [ $i -ge 40 ] && break; sleep 1; done; sed "s/^/$name: /" /tmp/ex.out; t "$name rc=$rc runs=$i"; }
  serve rdma_server-1 rdma_server
  serve rdma_server-2 rdma_server
  client rdma_client rdma_client -s 10.77.0.1
  serve udaddy-server udaddy -C $count
  client udaddy-client udaddy -s 10.77.0.1 -C $count
  serve ucmatose-server ucmatose -c $conns -C $count
  client ucmatose-client ucmatose -s 10.77.0.1 -c $conns -C $count ;;
nvme_host)
  mount -t debugfs none /sys/kernel/debug 2>/dev/null
  # the initiator's debug messages name why it recovers (a disconnect, a timeout)
  for m in nvme_rdma nvme_core; do echo "module $m +p" > /sys/kernel/debug/dynamic_debug/control 2>/dev/null; done
  HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:6e766d66-6775-6573-7400-000000000001
  mkdir -p /etc/nvme /mnt; echo $HOSTNQN > /etc/nvme/hostnqn
  seq -w 0 99999 | head -c 262144 > /tmp/pat
  nvme discover -t rdma -a 10.77.0.1 -s 4420 -q $HOSTNQN > /tmp/disc.out 2>&1; rc=$?
  sed 's/^/NVME discover: /' /tmp/disc.out
  t "NVME discover rc=$rc"
  conn(){
    printf 'transport=rdma,traddr=10.77.0.1,trsvcid=4420,nqn=%s,hostnqn=%s' $nqn $HOSTNQN > /dev/nvme-fabrics && t "NVME connect ok" || t "NVME connect failed"
    i=0; D=; while [ -z "$D" ] && [ $i -lt 300 ]; do D=$(ls /dev/nvme*n1 2>/dev/null | head -1); [ -z "$D" ] && sleep 0.1; i=$((i+1)); done
    C=/sys/class/nvme/$(basename $D | sed 's/n1$//')
    t "NVME namespace $D sectors=$(cat /sys/block/$(basename $D)/size 2>/dev/null) state=$(cat $C/state) transport=$(cat $C/transport) subsysnqn=$(cat $C/subsysnqn) queues=$(cat $C/queue_count) sqsize=$(cat $C/sqsize) kato=$(cat $C/kato) cntlid=$(cat $C/cntlid)"
  }
  disc(){ echo 1 > $C/delete_controller && t "NVME disconnected" || t "NVME disconnect failed"; }
  conn
  if [ -n "$D" ]; then
    dd if=/tmp/pat of=$D bs=4k count=16 seek=256 oflag=direct 2>/dev/null; r1=$?
    dd if=/tmp/pat of=$D bs=64k seek=32 oflag=direct 2>/dev/null; r2=$?
    dd if=/tmp/pat of=$D bs=256k count=1 seek=16 oflag=direct 2>/dev/null; r3=$?
    t "NVME dd write rc=$r1,$r2,$r3"
    dd if=$D of=/tmp/b1 bs=4k count=16 skip=256 iflag=direct 2>/dev/null
    dd if=$D of=/tmp/b2 bs=64k count=4 skip=32 iflag=direct 2>/dev/null
    dd if=$D of=/tmp/b3 bs=256k count=1 skip=16 iflag=direct 2>/dev/null
    head -c 65536 /tmp/pat > /tmp/pat64
    cmp /tmp/pat64 /tmp/b1 && cmp /tmp/pat /tmp/b2 && cmp /tmp/pat /tmp/b3 && t "NVME pattern read back ok" || t "NVME pattern mismatch"
    mke2fs -q $D > /tmp/mkfs.out 2>&1 && t "NVME mke2fs ok" || { sed 's/^/NVME mke2fs: /' /tmp/mkfs.out; t "NVME mke2fs failed"; }
    mount -t ext2 $D /mnt && t "NVME mounted" || t "NVME mount failed"
    cp /tmp/pat /mnt/pattern; seq 1 5000 > /mnt/numbers; mkdir /mnt/dir; echo "nvmf interop" > /mnt/dir/hello
    dd if=/dev/urandom of=/mnt/random bs=64k count=8 2>/dev/null
    (cd /mnt && md5sum pattern numbers dir/hello random) > /tmp/sums
    sed 's/^/NVME sum: /' /tmp/sums
    umount /mnt && t "NVME unmounted" || t "NVME umount failed"
    disc
    i=0; while [ -e $D ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
    conn
    mount -t ext2 $D /mnt && t "NVME mounted again" || t "NVME mount again failed"
    (cd /mnt && md5sum -c /tmp/sums) > /tmp/check.out 2>&1 && t "NVME files intact" || { sed 's/^/NVME check: /' /tmp/check.out; t "NVME files damaged"; }
    umount /mnt && t "NVME unmounted again"
    disc
  fi
  dmesg | grep -iE "nvme|rdma" | grep -v "no usable path" | sed 's/^/NVME dmesg: /' | tail -80 ;;
nvme_target)
  S=/sys/kernel/config/nvmet/subsystems/$nqn
  P=/sys/kernel/config/nvmet/ports/1
  mkdir $S && echo 1 > $S/attr_allow_any_host
  mkdir $S/namespaces/1 && printf /dev/ram0 > $S/namespaces/1/device_path && echo 1 > $S/namespaces/1/enable
  mkdir $P && echo rdma > $P/addr_trtype && echo ipv4 > $P/addr_adrfam && echo 10.77.0.2 > $P/addr_traddr && echo 4420 > $P/addr_trsvcid
  ln -s $S $P/subsystems/$nqn && t "NVMET listening" || t "NVMET setup failed"
  i=0; while [ $i -lt 600 ]; do
    echo 3 > /proc/sys/vm/drop_caches
    [ "$(dd if=/dev/ram0 bs=512 count=1 2>/dev/null | head -c 17)" = INTEROP-HOST-DONE ] && break
    sleep 0.2; i=$((i+1))
  done
  t "NVMET host done after $i polls"
  seq -w 0 99999 | head -c 262144 > /tmp/pat
  echo 3 > /proc/sys/vm/drop_caches
  dd if=/dev/ram0 of=/tmp/back bs=64k skip=16 count=4 2>/dev/null
  cmp /tmp/pat /tmp/back && t "NVMET pattern ok" || t "NVMET pattern mismatch"
  dmesg | grep -iE "nvme|rdma" | sed 's/^/NVMET dmesg: /' | tail -40 ;;
both)
  rping -s -a 10.77.0.2 -v -V -C $count > /tmp/rping.out 2> /tmp/rping.err &
  P=$!
  sleep 1
  t "rping server listening"
  wait $P; rc=$?
  cat /tmp/rping.out; sed 's/^/rping stderr: /' /tmp/rping.err
  t "rping server rc=$rc"
  i=0; until ping -c 1 -W 1 $peer >/dev/null 2>&1 || [ $i -ge 90 ]; do i=$((i+1)); done
  t "peer $peer answers after $i pings"
  n=1; while :; do
    t "rping client run $n"
    timeout 60 rping -c -a $peer -v -V -C $count > /tmp/rping.out 2> /tmp/rping.err; rc=$?
    [ $rc = 0 ] || [ $n -ge 5 ] && break
    grep -q -e REJECTED -e UNREACHABLE -e ADDR_ERROR /tmp/rping.err || break
    sed 's/^/rping retry after: /' /tmp/rping.err; n=$((n+1)); sleep 1
  done
  cat /tmp/rping.out; sed 's/^/rping stderr: /' /tmp/rping.err
  t "rping client rc=$rc" ;;
perftest)
  for tc in $(echo $pserve | tr , ' '); do
    [ "$tc" = none ] && continue
    ib_$tc -R -F -s $size -n $count > /tmp/p.out 2> /tmp/p.err &
    P=$!
    sleep 1
    t "perftest server $tc listening"
    wait $P; rc=$?
    sed "s/^/perftest $tc: /" /tmp/p.out; sed "s/^/perftest $tc stderr: /" /tmp/p.err
    t "perftest server $tc rc=$rc"
  done
  p=$port
  for tc in $(echo $pconnect | tr , ' '); do
    [ "$tc" = none ] && continue
    rc=1; i=0
    while [ $i -lt 40 ]; do
      i=$((i+1))
      ping -c 1 -W 1 10.77.0.1 >/dev/null 2>&1 || continue
      timeout 60 ib_$tc -R -F -s $size -n $count -p $p 10.77.0.1 > /tmp/p.out 2> /tmp/p.err; rc=$?
      [ $rc = 0 ] && break
      sleep 0.5
    done
    sed "s/^/perftest $tc: /" /tmp/p.out; sed "s/^/perftest $tc stderr: /" /tmp/p.err
    t "perftest client $tc rc=$rc tries=$i"
    p=$((p+1))
  done ;;
esac
for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "INTEROP counter $(basename $c)=$(cat $c)"; done 2>/dev/null | grep -v '=0$'
t "done"
"#;

/// Why the guest could not be built or run.
#[derive(Debug)]
pub struct GuestError(pub String);

impl std::fmt::Display for GuestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for GuestError {}

impl From<guest_kit::Error> for GuestError {
    fn from(e: guest_kit::Error) -> Self {
        GuestError(e.0)
    }
}

fn gerr(s: impl Into<String>) -> GuestError {
    GuestError(s.into())
}

/// The `DT_NEEDED` entries of an ELF64 little-endian file (empty for a static one).
pub fn elf_needed(elf: &[u8]) -> Result<Vec<String>, String> {
    let u16_at = |o: usize| -> Result<u16, String> {
        elf.get(o..o + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .ok_or_else(|| "truncated ELF".to_string())
    };
    let u64_at = |o: usize| -> Result<u64, String> {
        let b = elf.get(o..o + 8).ok_or("truncated ELF")?;
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        Ok(u64::from_le_bytes(w))
    };
    if elf.get(..6) != Some(&[0x7f, b'E', b'L', b'F', 2, 1]) {
        return Err("not an ELF64 little-endian file".into());
    }
    let phoff = usize::try_from(u64_at(0x20)?).map_err(|_| "bad e_phoff")?;
    let phentsize = usize::from(u16_at(0x36)?);
    let phnum = usize::from(u16_at(0x38)?);
    let mut loads = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum {
        let p = phoff + i * phentsize;
        let ty = u32::from(u16_at(p)?) | (u32::from(u16_at(p + 2)?) << 16);
        let off = u64_at(p + 8)?;
        let vaddr = u64_at(p + 16)?;
        let filesz = u64_at(p + 32)?;
        match ty {
            1 => loads.push((vaddr, off, filesz)),
            2 => dynamic = Some((off, filesz)),
            _ => {}
        }
    }
    let Some((doff, dsize)) = dynamic else {
        return Ok(Vec::new());
    };
    let to_off = |vaddr: u64| {
        loads
            .iter()
            .find(|(va, _, sz)| vaddr >= *va && vaddr < va + sz)
            .map(|(va, off, _)| vaddr - va + off)
    };
    let mut strtab = None;
    let mut needed = Vec::new();
    let mut at = usize::try_from(doff).map_err(|_| "bad dynamic offset")?;
    let end = at + usize::try_from(dsize).map_err(|_| "bad dynamic size")?;
    while at + 16 <= end {
        let tag = u64_at(at)?;
        let val = u64_at(at + 8)?;
        match tag {
            0 => break,
            1 => needed.push(val),
            5 => strtab = to_off(val),
            _ => {}
        }
        at += 16;
    }
    let strtab = strtab.ok_or("no DT_STRTAB")?;
    needed
        .into_iter()
        .map(|n| {
            let s = usize::try_from(strtab + n).map_err(|_| "bad string offset")?;
            let bytes = elf.get(s..).ok_or("string outside the file")?;
            let len = bytes
                .iter()
                .position(|&b| b == 0)
                .ok_or("unterminated string")?;
            Ok(String::from_utf8_lossy(&bytes[..len]).into_owned())
        })
        .collect()
}

/// Library directories searched in each package tree.
const LIB_DIRS: &[&str] = &["lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu"];

/// Adds `files` (host path → guest path) and the closure of their shared libraries, found in
/// the `roots` trees' library directories, to `init` (symlinks are followed: each library is
/// stored under its soname).
fn add_with_libs(
    init: &mut Initramfs,
    roots: &[PathBuf],
    files: &[(PathBuf, String)],
) -> Result<Vec<String>, GuestError> {
    let mut libs: BTreeMap<String, (PathBuf, String)> = BTreeMap::new();
    for r in roots {
        for d in LIB_DIRS {
            let Ok(rd) = fs::read_dir(r.join(d)) else {
                continue;
            };
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.contains(".so") {
                    libs.entry(name.clone())
                        .or_insert((e.path(), format!("{d}/{name}")));
                }
            }
        }
    }
    let mut todo: Vec<(PathBuf, String)> = files.to_vec();
    let mut done: BTreeSet<String> = BTreeSet::new();
    let mut missing = Vec::new();
    while let Some((src, dst)) = todo.pop() {
        if !done.insert(dst.clone()) {
            continue;
        }
        let data = fs::read(&src).map_err(|e| gerr(format!("read {}: {e}", src.display())))?;
        let needed = elf_needed(&data).map_err(|e| gerr(format!("{}: {e}", src.display())))?;
        init.bytes(&dst, 0o755, data);
        for n in needed {
            match libs.get(&n) {
                Some((p, d)) => todo.push((p.clone(), d.clone())),
                None => {
                    if !missing.contains(&n) {
                        missing.push(n)
                    }
                }
            }
        }
    }
    Ok(missing)
}

/// A built guest: kernel and initramfs paths.
#[derive(Clone, Debug)]
pub struct Image {
    /// The PVH kernel.
    pub vmlinux: PathBuf,
    /// The initramfs.
    pub initrd: PathBuf,
}

/// Builds (or reuses) the guest image in the kit's cache.
pub fn build() -> Result<Image, GuestError> {
    let kit = Kit::new(Kit::default_cache_dir())?;
    let kernel = kit.kernel()?;
    let busybox = kit.busybox()?;
    let roots = kit.extract_all(PACKAGES)?;
    // named after everything that goes in, so a change rebuilds it
    let recipe = format!("{INIT_BODY}{PACKAGES:?}{MODULES:?}{BINARIES:?}{roots:?}");
    let name = format!(
        "interop-{}-{:016x}.cpio",
        kernel.version,
        fxhash(recipe.as_bytes())
    );
    let initrd = kit.dir().join(&name);
    let _l = kit.lock()?;
    if initrd.exists() {
        return Ok(Image {
            vmlinux: kernel.vmlinux,
            initrd,
        });
    }
    // older builds of this image
    if let Ok(rd) = fs::read_dir(kit.dir()) {
        for e in rd.flatten() {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with("interop-") && n.ends_with(".cpio") && n != name {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    let mut init = Initramfs::new();
    init.busybox(&busybox)?;
    init.modules(&kernel, MODULES)?;
    let find = |rel: &str| roots.iter().map(|r| r.join(rel)).find(|p| p.exists());
    let mut files: Vec<(PathBuf, String)> = Vec::new();
    for b in BINARIES {
        let p = find(b).ok_or_else(|| gerr(format!("{b} is in none of the packages")))?;
        files.push((p, (*b).to_string()));
    }
    // iproute2's `rdma` (in /usr/bin or /sbin depending on the version)
    let rdma = ["usr/bin/rdma", "sbin/rdma", "usr/sbin/rdma", "bin/rdma"]
        .iter()
        .find_map(|b| find(b).map(|p| (p, (*b).to_string())))
        .ok_or_else(|| gerr("iproute2 has no rdma tool"))?;
    // busybox has an `ip`; iproute2's `rdma` must not be shadowed by anything
    files.push(rdma);
    // the rxe verbs provider (dlopen'ed by libibverbs) and its driver file
    let provider_dir = "usr/lib/x86_64-linux-gnu/libibverbs";
    let rxe = roots
        .iter()
        .filter_map(|r| fs::read_dir(r.join(provider_dir)).ok())
        .flat_map(|rd| rd.flatten())
        .find(|e| e.file_name().to_string_lossy().starts_with("librxe-rdmav"))
        .ok_or_else(|| gerr("ibverbs-providers has no librxe"))?;
    files.push((
        rxe.path(),
        format!("{provider_dir}/{}", rxe.file_name().to_string_lossy()),
    ));
    // the dynamic loader at the path binaries name
    let ld = find("lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
        .ok_or_else(|| gerr("libc6 has no ld-linux-x86-64.so.2"))?;
    files.push((ld.clone(), "lib64/ld-linux-x86-64.so.2".into()));
    // libgcc_s is dlopen'ed by glibc for pthread_cancel / unwinding
    let gcc = find("lib/x86_64-linux-gnu/libgcc_s.so.1")
        .or_else(|| find("usr/lib/x86_64-linux-gnu/libgcc_s.so.1"))
        .ok_or_else(|| gerr("libgcc-s1 has no libgcc_s.so.1"))?;
    files.push((gcc, "lib/x86_64-linux-gnu/libgcc_s.so.1".into()));
    let missing = add_with_libs(&mut init, &roots, &files)?;
    let missing: Vec<&String> = missing
        .iter()
        .filter(|m| !m.starts_with("ld-linux"))
        .collect();
    if !missing.is_empty() {
        return Err(gerr(format!("shared libraries not found: {missing:?}")));
    }
    let driver_dir = "etc/libibverbs.d";
    let driver = find(&format!("{driver_dir}/rxe.driver"))
        .ok_or_else(|| gerr("ibverbs-providers has no rxe.driver"))?;
    init.file(&driver, &format!("{driver_dir}/rxe.driver"))?;
    init.init_script(INIT_BODY);
    init.write(&initrd)?;
    Ok(Image {
        vmlinux: kernel.vmlinux,
        initrd,
    })
}

/// A 64-bit FNV-1a hash (names the cached initramfs after the script it holds).
fn fxhash(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A running guest.
pub struct Guest {
    child: Child,
    serial: PathBuf,
}

impl Guest {
    /// Boots `image` running `mode`, its NIC on the socket netdev whose host end is `host`
    /// (the [`roce_wire::fabric::EthLink`]'s `local`) and guest end `guest` (its `remote`).
    /// The serial console goes to `serial`.
    pub fn boot(
        image: &Image,
        mode: &Mode,
        host: SocketAddrV4,
        guest: SocketAddrV4,
        serial: &Path,
    ) -> Result<Guest, GuestError> {
        let _ = fs::remove_file(serial);
        let mut q = Qemu::new(
            image.vmlinux.clone(),
            image.initrd.clone(),
            serial.to_path_buf(),
        );
        // The NVMe scenarios make and mount a file system over soft-RoCE under TCG; both
        // rping directions in one boot take longer too.
        q.timeout_secs = match mode {
            Mode::NvmeHost { .. } | Mode::NvmeTarget { .. } => 420,
            Mode::ServerThenClient { .. } => 300,
            _ => 180,
        };
        q.append = format!("quiet {}", mode.cmdline());
        let m = GUEST_MAC;
        q.extra = vec![
            "-netdev".into(),
            format!("socket,id=n0,udp={host},localaddr={guest}"),
            "-device".into(),
            format!(
                "virtio-net-pci,netdev=n0,mac={:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
        ];
        let child = q
            .command()
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| gerr(format!("cannot start QEMU: {e}")))?;
        Ok(Guest {
            child,
            serial: serial.to_path_buf(),
        })
    }

    /// The serial output so far.
    pub fn output(&self) -> String {
        fs::read(&self.serial)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// Waits until the serial output contains `marker` (Err with the output on timeout or
    /// if QEMU exits first).
    pub fn wait_for(&mut self, marker: &str, timeout: Duration) -> Result<(), GuestError> {
        let end = Instant::now() + timeout;
        loop {
            if self.output().contains(marker) {
                return Ok(());
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                return Err(gerr(format!(
                    "QEMU exited ({st}) before {marker:?}; serial:\n{}",
                    self.output()
                )));
            }
            if Instant::now() >= end {
                return Err(gerr(format!(
                    "no {marker:?} after {timeout:?}; serial:\n{}",
                    self.output()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for QEMU to exit (the guest powers off after its mode); returns the serial
    /// output.
    pub fn finish(mut self, timeout: Duration) -> Result<String, GuestError> {
        let end = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                if !st.success() {
                    let mut err = String::new();
                    if let Some(mut e) = self.child.stderr.take() {
                        use std::io::Read;
                        let _ = e.read_to_string(&mut err);
                    }
                    return Err(gerr(format!(
                        "QEMU exited with {st}: {err}\nserial:\n{}",
                        self.output()
                    )));
                }
                return Ok(self.output());
            }
            if Instant::now() >= end {
                return Err(gerr(format!(
                    "guest still running after {timeout:?}; serial:\n{}",
                    self.output()
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Guest {
    /// Stops a guest still running (a failed test): SIGTERM to `timeout`, which passes it on
    /// to QEMU and follows it with SIGKILL after its `-k` grace (a SIGKILL to `timeout` itself
    /// would leave QEMU orphaned), then waits for `timeout`, which exits only once QEMU has.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = std::process::Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string())
                .status();
            let _ = self.child.wait();
        }
        let _ = fs::remove_file(&self.serial);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needed_of_a_real_binary() {
        // This test binary is dynamically linked against libc.
        let me = std::env::current_exe().unwrap();
        let needed = elf_needed(&fs::read(me).unwrap()).unwrap();
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
        assert!(elf_needed(b"#!/bin/sh\n").is_err());
        assert!(elf_needed(&[0x7f, b'E', b'L', b'F', 2, 1, 0]).is_err());
    }
}

//! Fabrics: what carries frames between emulated NICs.
//!
//! A NIC [attaches](Fabric::attach) to a fabric at an IPv4 address and gets a [`Port`]. It
//! sends whole frames (IPv4 header … ICRC, as [`crate::packet::Packet::encode`] makes them)
//! and receives whole frames, whatever the backend:
//!
//! * [`InProcessFabric`]: a deterministic in-memory network with a clock of its own (virtual
//!   by default) and seeded fault injection.
//! * [`UdpFabric`]: one UDP socket per port on a loopback address (127.0.0.0/8), so NICs in
//!   different processes (or behind QEMU) reach each other. Only the UDP payload (BTH … ICRC)
//!   crosses the socket.
//! * [`EthLink`]: raw Ethernet frames over a pair of loopback UDP sockets in the format of
//!   QEMU's `-netdev socket,udp=` backend, so a NIC talks to a QEMU guest's NIC; the port has
//!   a MAC and an IPv4 address on that virtual wire and does ARP.
//!
//! Frames are routed by their IPv4 destination address; their source address must be the
//! port's own. Undeliverable frames (no port at the destination) are dropped silently, as on a
//! real network. Receiving never validates a frame: decode it with
//! [`crate::packet::Packet::decode`], which catches corruption.
//!
//! A sender may also hand a port a [`Segment`]: consecutive packets of one RC message whose
//! payload is read when the receiver takes them in (segmentation offload). The in-process
//! fabric carries it whole over a path that does nothing to single frames, and cuts it into
//! real frames (ICRC and all) wherever frames can be lost, duplicated, corrupted, reordered
//! or jittered; the socket fabrics always send its frames ([`Port::send_segment`]'s default).

mod eth;
mod inproc;
mod rng;
mod segment;
mod udp;

use std::boxed::Box;
use std::fmt;
use std::io;
use std::net::Ipv4Addr;
use std::time::Duration;
use std::vec::Vec;

pub use eth::{ArpConfig, CAPTURE_LIMIT, Captured, EthHandle, EthLink, EthPort, EthStats};
pub use inproc::{FabricStats, FaultConfig, InProcessFabric, InProcessPort};
pub use rng::SplitMix64;
pub use segment::{PayloadGone, Segment, SegmentPayload, SegmentShape};
pub use udp::{UdpFabric, UdpPort};

use crate::packet::WireError;

/// Why a fabric operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FabricError {
    /// The address is outside 127.0.0.0/8 and the backend ([`UdpFabric`]) only allows
    /// loopback: test traffic must never leave the machine.
    NotLoopback(Ipv4Addr),
    /// Another port is already attached at this address.
    AddrInUse(Ipv4Addr),
    /// The frame's IPv4 source address is not the sending port's address.
    SourceMismatch {
        /// The port's address.
        port: Ipv4Addr,
        /// The frame's source address.
        frame: Ipv4Addr,
    },
    /// The frame is not an IPv4/UDP frame the backend can route.
    Malformed(WireError),
    /// A socket operation failed.
    Io(io::ErrorKind),
    /// A segment's payload could not be read while cutting it into frames.
    PayloadGone,
    /// The OS refused the socket receive buffer a socket fabric asks for
    /// ([`SOCKET_RCVBUF`], `SO_RCVBUF`).
    ReceiveBuffer {
        /// Bytes asked for.
        bytes: u32,
        /// The OS's error.
        error: io::ErrorKind,
    },
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotLoopback(a) => write!(f, "{a} is not in 127.0.0.0/8"),
            Self::AddrInUse(a) => write!(f, "{a} is already attached"),
            Self::SourceMismatch { port, frame } => {
                write!(f, "frame source {frame} is not the port address {port}")
            }
            Self::Malformed(e) => write!(f, "malformed frame: {e}"),
            Self::Io(k) => write!(f, "socket error: {k}"),
            Self::PayloadGone => write!(f, "the segment's payload is no longer readable"),
            Self::ReceiveBuffer { bytes, error } => write!(
                f,
                "the OS refused a socket receive buffer (SO_RCVBUF) of {bytes} bytes: {error}"
            ),
        }
    }
}

impl std::error::Error for FabricError {}

/// Receive buffer the socket fabrics ask for on their sockets (`SO_RCVBUF`): bursts of a
/// large message (a 1 MiB WRITE is a thousand 1 KiB-MTU datagrams) overflow the OS's default
/// (about 208 KiB on Linux) when the receiving NIC's poller is late, and each lost datagram
/// costs an RC retransmission. Linux caps the request at `net.core.rmem_max` silently (and
/// reports twice the granted size, its bookkeeping included); only a refusal is an error.
pub const SOCKET_RCVBUF: u32 = 4 << 20;

/// Asks for `bytes` of receive buffer on `socket`; returns the size the OS reports after.
pub(crate) fn set_receive_buffer(
    socket: &std::net::UdpSocket,
    bytes: u32,
) -> Result<usize, FabricError> {
    use std::os::fd::AsRawFd;
    let v = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    // SAFETY: `socket` is an open socket for the call; the option value is a live c_int of
    // the length passed, read by the kernel only during the call.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw const v).cast::<libc::c_void>(),
            core::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(FabricError::ReceiveBuffer {
            bytes,
            error: io::Error::last_os_error().kind(),
        });
    }
    receive_buffer(socket)
}

/// The receive buffer size the OS reports for `socket` (`SO_RCVBUF`).
pub fn receive_buffer(socket: &std::net::UdpSocket) -> Result<usize, FabricError> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = core::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `socket` is open; `v` and `len` are live for the call and `len` is `v`'s size,
    // so the kernel writes at most that many bytes.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&raw mut v).cast::<libc::c_void>(),
            &raw mut len,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error().into());
    }
    Ok(usize::try_from(v).unwrap_or(0))
}

impl From<io::Error> for FabricError {
    fn from(e: io::Error) -> Self {
        Self::Io(e.kind())
    }
}

/// A network that NICs attach to.
pub trait Fabric: Send + Sync {
    /// Attaches a NIC at `addr`. The address is released when the port is dropped.
    fn attach(&self, addr: Ipv4Addr) -> Result<Box<dyn Port>, FabricError>;
}

/// A NIC's attachment to a fabric.
///
/// All methods take `&self`; a port may be shared between a sending and a receiving thread
/// (`Arc<dyn Port>`).
pub trait Port: Send + Sync {
    /// The address the port is attached at.
    fn addr(&self) -> Ipv4Addr;

    /// Sends a frame (IPv4 header … ICRC) to the frame's destination address. Succeeding
    /// means the fabric took the frame, not that it will arrive.
    fn send(&self, frame: Vec<u8>) -> Result<(), FabricError>;

    /// The next frame that has arrived, without waiting.
    fn recv(&self) -> Result<Option<Vec<u8>>, FabricError>;

    /// The next frame, waiting up to `timeout` of wall-clock time for one to arrive.
    fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, FabricError>;

    /// Whether the port carries [segments](Segment) as one unit (at least on some paths), so
    /// that a sender gains by building them. Default: no.
    fn takes_segments(&self) -> bool {
        false
    }

    /// Sends a segment. The default cuts it into its packets' frames and [sends](Port::send)
    /// each, in PSN order; a port that [takes segments](Port::takes_segments) carries it
    /// whole where nothing on the path works on single frames.
    fn send_segment(&self, seg: Segment) -> Result<(), FabricError> {
        let mut frame = Vec::new();
        for j in 0..seg.count() {
            seg.encode_packet(j, &mut frame)
                .unwrap_or(Err(PayloadGone))
                .map_err(|_| FabricError::PayloadGone)?;
            self.send(std::mem::take(&mut frame))?;
        }
        Ok(())
    }

    /// The next frame or segment that has arrived, without waiting. The default is
    /// [`Port::recv`]'s frame.
    fn recv_any(&self) -> Result<Option<Received>, FabricError> {
        Ok(self.recv()?.map(Received::Frame))
    }
}

/// What [`Port::recv_any`] hands out.
#[derive(Debug)]
pub enum Received {
    /// A whole frame (IPv4 header … ICRC).
    Frame(Vec<u8>),
    /// A segment that crossed the fabric as one unit.
    Segment(Segment),
}

/// Whether `addr` is in 127.0.0.0/8.
pub const fn is_loopback(addr: Ipv4Addr) -> bool {
    addr.octets()[0] == 127
}

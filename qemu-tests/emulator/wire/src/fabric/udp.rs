//! The UDP-socket fabric: emulated NICs on loopback addresses.

use std::boxed::Box;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use std::vec;
use std::vec::Vec;

use super::{Fabric, FabricError, Port, is_loopback};
use crate::packet::{
    ROCE_V2_UDP_DPORT, frame_to_udp_payload, peek_ipv4_addrs, udp_payload_to_frame,
};

/// A fabric of UDP sockets on 127.0.0.0/8.
///
/// Each port is a socket bound to `addr:port` (every port of one fabric uses the same UDP
/// port number; tests pick a distinct address per NIC and a port number of their own so
/// parallel tests do not collide). Sending a frame sends its UDP payload (BTH … ICRC) to
/// `dst:port`; receiving rebuilds a frame around the datagram.
///
/// The ICRC covers the IPv4 identification and the UDP source port, which a socket cannot
/// carry. So a frame crosses the socket in the UDP-payload form of
/// [`crate::packet::Packet::encode_udp_payload`] with the *socket's* port as source port:
/// the sender rewrites the ICRC for that form (keeping any error it had, so corruption is
/// still caught), and the receiver rebuilds the frame with IP ID 0, TOS 0, TTL 64, source
/// port = the sender's socket port and destination port 4791. A frame's own TOS, TTL, IP ID
/// and UDP source port are therefore not preserved.
///
/// Any address outside 127.0.0.0/8 is refused, for binding and as a destination
/// ([`FabricError::NotLoopback`]): test traffic never leaves the machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpFabric {
    port: u16,
}

impl Default for UdpFabric {
    /// The RoCEv2 port, 4791.
    fn default() -> Self {
        Self::new(ROCE_V2_UDP_DPORT)
    }
}

impl UdpFabric {
    /// A fabric whose sockets use UDP port `port`.
    pub const fn new(port: u16) -> Self {
        Self { port }
    }

    /// The UDP port number.
    pub const fn port(&self) -> u16 {
        self.port
    }

    /// Binds a socket at `addr:port` and returns the concrete port type. The socket asks for
    /// a receive buffer of [`super::SOCKET_RCVBUF`] bytes ([`FabricError::ReceiveBuffer`] if
    /// the OS refuses it).
    pub fn bind(&self, addr: Ipv4Addr) -> Result<UdpPort, FabricError> {
        if !is_loopback(addr) {
            return Err(FabricError::NotLoopback(addr));
        }
        let socket = UdpSocket::bind(SocketAddrV4::new(addr, self.port)).map_err(|e| {
            if e.kind() == io::ErrorKind::AddrInUse {
                FabricError::AddrInUse(addr)
            } else {
                FabricError::from(e)
            }
        })?;
        socket.set_nonblocking(true)?;
        super::set_receive_buffer(&socket, super::SOCKET_RCVBUF)?;
        Ok(UdpPort {
            socket,
            addr,
            port: self.port,
            rx: Mutex::new(RxState {
                buf: vec![0u8; 1 << 16],
                blocking: false,
            }),
        })
    }
}

impl Fabric for UdpFabric {
    fn attach(&self, addr: Ipv4Addr) -> Result<Box<dyn Port>, FabricError> {
        Ok(Box::new(self.bind(addr)?))
    }
}

struct RxState {
    buf: Vec<u8>,
    /// Whether the socket is currently in blocking mode (with a read timeout).
    blocking: bool,
}

/// A NIC's port on a [`UdpFabric`]: one UDP socket.
pub struct UdpPort {
    socket: UdpSocket,
    addr: Ipv4Addr,
    port: u16,
    /// Serialises receivers (the socket's blocking mode is shared state).
    rx: Mutex<RxState>,
}

impl UdpPort {
    /// The socket's receive buffer as the OS reports it (`SO_RCVBUF`; the fabric asked for
    /// [`super::SOCKET_RCVBUF`]).
    pub fn receive_buffer(&self) -> Result<usize, FabricError> {
        super::receive_buffer(&self.socket)
    }

    fn rx(&self) -> MutexGuard<'_, RxState> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The UDP port number of the socket.
    pub fn udp_port(&self) -> u16 {
        self.port
    }

    /// Receives one datagram in the socket's current mode; `Ok(None)` when none is there.
    fn recv_one(&self, rx: &mut RxState) -> Result<Option<Vec<u8>>, FabricError> {
        loop {
            let (n, from) = match self.socket.recv_from(&mut rx.buf) {
                Ok(r) => r,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                // Interrupted, or an ICMP error about an earlier datagram (nobody bound at its
                // destination): a lost datagram on a lossy fabric, not a receive error.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let SocketAddr::V4(from) = from else {
                continue;
            };
            if !is_loopback(*from.ip()) {
                continue;
            }
            match udp_payload_to_frame(*from.ip(), self.addr, from.port(), &rx.buf[..n]) {
                Ok(frame) => return Ok(Some(frame)),
                // Cannot happen for a datagram that fit a 64 KiB buffer; drop it if it does.
                Err(_) => continue,
            }
        }
    }
}

impl Port for UdpPort {
    fn addr(&self) -> Ipv4Addr {
        self.addr
    }

    fn send(&self, frame: Vec<u8>) -> Result<(), FabricError> {
        let (src, dst) = peek_ipv4_addrs(&frame)
            .ok_or(FabricError::Malformed(crate::packet::WireError::NotIpv4))?;
        if !is_loopback(dst) {
            return Err(FabricError::NotLoopback(dst));
        }
        if src != self.addr {
            return Err(FabricError::SourceMismatch {
                port: self.addr,
                frame: src,
            });
        }
        let payload = frame_to_udp_payload(&frame, self.port).map_err(FabricError::Malformed)?;
        loop {
            match self
                .socket
                .send_to(&payload, SocketAddrV4::new(dst, self.port))
            {
                Ok(_) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn recv(&self) -> Result<Option<Vec<u8>>, FabricError> {
        let mut rx = self.rx();
        if rx.blocking {
            self.socket.set_nonblocking(true)?;
            rx.blocking = false;
        }
        self.recv_one(&mut rx)
    }

    fn recv_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>, FabricError> {
        if timeout.is_zero() {
            return self.recv();
        }
        let mut rx = self.rx();
        if !rx.blocking {
            self.socket.set_nonblocking(false)?;
            rx.blocking = true;
        }
        self.socket.set_read_timeout(Some(timeout))?;
        self.recv_one(&mut rx)
    }
}

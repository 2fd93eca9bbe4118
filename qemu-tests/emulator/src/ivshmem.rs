//! The server side of QEMU's `ivshmem-doorbell` protocol, so that the device behind a QEMU
//! guest delivers real MSI-X messages (`docs/ivshmem-doorbell.md` describes the protocol).
//!
//! QEMU's `ivshmem-doorbell` PCI function (1af4:1110, like `ivshmem-plain`) gets its shared
//! memory (BAR2) and its interrupt eventfds from a server on a UNIX socket instead of a
//! memory backend. [`DoorbellServer`] is that server: it hands every guest that connects
//! the BAR file and one eventfd per MSI-X vector, and [`DoorbellServer::raise`] writes the
//! eventfd of a vector, which QEMU turns into the MSI-X message the guest programmed into the
//! function's MSI-X table (BAR1). Pass [`DoorbellServer::sink`] to
//! [`Device::set_interrupt_sink`](crate::Device::set_interrupt_sink) and an armed EQ's vector
//! reaches the guest.
//!
//! The server announces no peers of its own: the guest's doorbell register has nobody to
//! ring, and the device never needs to be woken (it polls). One guest is served at a time; a
//! guest that disconnects is forgotten (its eventfds closed) and the next one to connect gets
//! fresh eventfds.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::InterruptSink;

/// The protocol version the server announces (QEMU accepts only 0).
pub const PROTOCOL_VERSION: i64 = 0;
/// The message that carries the shared-memory file descriptor.
pub const SHM_MESSAGE: i64 = -1;
/// The peer ID given to the guest.
pub const GUEST_ID: u16 = 1;

/// What the server did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellStats {
    /// Guests that connected and were set up.
    pub guests: u64,
    /// Vectors delivered to a guest (eventfd written).
    pub delivered: u64,
    /// Raises with no guest connected, or naming a vector the guest has no eventfd for.
    pub dropped: u64,
}

#[derive(Debug, Default)]
struct Shared {
    /// The connected guest's eventfds, one per vector.
    guest: Mutex<Option<Vec<OwnedFd>>>,
    guests: AtomicU64,
    delivered: AtomicU64,
    dropped: AtomicU64,
}

/// An `ivshmem-doorbell` server for one shared-memory file (see the module docs).
#[derive(Debug)]
pub struct DoorbellServer {
    path: PathBuf,
    shared: Arc<Shared>,
}

/// Sends one protocol message: `value` as 8 little-endian bytes, with `fd` attached
/// (SCM_RIGHTS) if given.
fn send_message(sock: RawFd, value: i64, fd: Option<RawFd>) -> io::Result<()> {
    let bytes = value.to_le_bytes();
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // Room for one control message carrying one descriptor, aligned for cmsghdr.
    let mut control = [0u64; 8];
    // SAFETY: all-zero is a valid msghdr (null pointers, zero lengths).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if let Some(fd) = fd {
        let fd_len = std::mem::size_of::<RawFd>() as u32;
        // SAFETY: CMSG_SPACE only computes a size.
        let space = unsafe { libc::CMSG_SPACE(fd_len) } as usize;
        assert!(space <= std::mem::size_of_val(&control));
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points at `control`, at least `space` bytes and aligned for
        // cmsghdr (u64), so the first header and its data (CMSG_LEN(fd_len) <= space bytes)
        // are inside it; unaligned writes are used for the descriptor.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_len) as _;
            std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<RawFd>(), fd);
        }
    }
    loop {
        // SAFETY: `msg` points at `iov` (8 live bytes) and, if set, `control`, both alive
        // for the call; sendmsg only reads them.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n == bytes.len() as isize {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
}

/// A new non-blocking, close-on-exec eventfd.
fn eventfd() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes no pointers; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Adds 1 to an eventfd's counter (what a peer does to interrupt).
fn signal(fd: &OwnedFd) -> bool {
    let one = 1u64.to_ne_bytes();
    // SAFETY: writes 8 bytes from a live local buffer to a descriptor we own.
    let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    // EAGAIN: the counter is at its maximum, the interrupt is pending anyway.
    n == 8 || io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// The setup a new client gets: version, its ID, the shared memory, then its own eventfds
/// (interrupt setup), one message per vector.
fn greet(sock: &UnixStream, shm: &File, vectors: &[OwnedFd]) -> io::Result<()> {
    let s = sock.as_raw_fd();
    send_message(s, PROTOCOL_VERSION, None)?;
    send_message(s, i64::from(GUEST_ID), None)?;
    send_message(s, SHM_MESSAGE, Some(shm.as_raw_fd()))?;
    for v in vectors {
        send_message(s, i64::from(GUEST_ID), Some(v.as_raw_fd()))?;
    }
    Ok(())
}

impl DoorbellServer {
    /// Listens on the UNIX socket `path` (which must not exist) and serves `shm` (the BAR
    /// file; QEMU maps it whole as BAR2, so its size must be a power of two) with `vectors`
    /// eventfds per guest, on a thread of its own. QEMU can connect as soon as this returns.
    pub fn start(path: &Path, shm: File, vectors: u16) -> io::Result<DoorbellServer> {
        if vectors == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "an ivshmem-doorbell server needs at least one vector",
            ));
        }
        let listener = UnixListener::bind(path)?;
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        std::thread::Builder::new()
            .name("ivshmem-server".into())
            .spawn(move || serve(listener, shm, vectors, &sh))?;
        Ok(DoorbellServer {
            path: path.to_path_buf(),
            shared,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a guest is connected.
    pub fn connected(&self) -> bool {
        lock(&self.shared.guest).is_some()
    }

    /// Signals MSI-X vector `vector` of the connected guest (its eventfd for that vector);
    /// counted as dropped when no guest is connected or it has no such vector.
    pub fn raise(&self, vector: u16) {
        raise(&self.shared, vector)
    }

    /// A sink for [`Device::set_interrupt_sink`](crate::Device::set_interrupt_sink).
    pub fn sink(&self) -> InterruptSink {
        let sh = self.shared.clone();
        Arc::new(move |v| raise(&sh, v))
    }

    /// Counters so far.
    pub fn stats(&self) -> DoorbellStats {
        DoorbellStats {
            guests: self.shared.guests.load(Ordering::Relaxed),
            delivered: self.shared.delivered.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
        }
    }
}

impl Drop for DoorbellServer {
    fn drop(&mut self) {
        // The accept thread stays blocked until the process exits; the socket node goes now
        // so nobody new finds it.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn raise(sh: &Shared, vector: u16) {
    let ok = lock(&sh.guest)
        .as_ref()
        .and_then(|fds| fds.get(usize::from(vector)))
        .is_some_and(signal);
    let c = if ok { &sh.delivered } else { &sh.dropped };
    c.fetch_add(1, Ordering::Relaxed);
}

/// Accepts guests one after another; each is set up, then watched until it hangs up.
fn serve(listener: UnixListener, shm: File, vectors: u16, sh: &Shared) {
    for conn in listener.incoming() {
        let Ok(mut sock) = conn else { continue };
        let fds: io::Result<Vec<OwnedFd>> = (0..vectors).map(|_| eventfd()).collect();
        let Ok(fds) = fds else { continue };
        if greet(&sock, &shm, &fds).is_err() {
            continue;
        }
        *lock(&sh.guest) = Some(fds);
        sh.guests.fetch_add(1, Ordering::Relaxed);
        // The client never sends; end of file (or an error) means it is gone.
        let mut b = [0u8; 64];
        while matches!(sock.read(&mut b), Ok(n) if n > 0) {}
        *lock(&sh.guest) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Receives one message: its value and the descriptor that came with it.
    fn recv_message(sock: RawFd) -> (i64, Option<OwnedFd>) {
        let mut bytes = [0u8; 8];
        let mut iov = libc::iovec {
            iov_base: bytes.as_mut_ptr().cast(),
            iov_len: 8,
        };
        let mut control = [0u64; 8];
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at live buffers of the stated sizes.
        let n = unsafe { libc::recvmsg(sock, &mut msg, 0) };
        assert_eq!(n, 8, "one whole message");
        let mut fd = None;
        // SAFETY: the kernel filled `control` (msg_controllen says how much); the header
        // macros stay inside it.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            if !c.is_null() && (*c).cmsg_type == libc::SCM_RIGHTS {
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<RawFd>());
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
        }
        (i64::from_le_bytes(bytes), fd)
    }

    fn read_counter(fd: &OwnedFd) -> Option<u64> {
        let mut b = [0u8; 8];
        // SAFETY: reads 8 bytes into a live local buffer.
        let n = unsafe { libc::read(fd.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
        (n == 8).then(|| u64::from_ne_bytes(b))
    }

    #[test]
    fn a_client_gets_the_setup_and_its_vectors_fire() {
        let base = std::env::temp_dir().join(format!("ivshmem-test-{}", std::process::id()));
        let sock = base.with_extension("sock");
        let shm_path = base.with_extension("shm");
        let _ = std::fs::remove_file(&sock);
        std::fs::write(&shm_path, vec![0u8; 8192]).unwrap();
        let shm = File::open(&shm_path).unwrap();
        let server = DoorbellServer::start(&sock, shm, 3).unwrap();
        // nobody connected: dropped
        server.raise(0);
        assert_eq!(server.stats().dropped, 1);

        let c = UnixStream::connect(&sock).unwrap();
        let fd = c.as_raw_fd();
        assert_eq!(recv_message(fd).0, PROTOCOL_VERSION);
        let (id, none) = recv_message(fd);
        assert_eq!((id, none.is_none()), (i64::from(GUEST_ID), true));
        let (m, shm_fd) = recv_message(fd);
        assert_eq!(m, SHM_MESSAGE);
        let mut f = File::from(shm_fd.expect("the shared memory comes with -1"));
        assert_eq!(f.metadata().unwrap().len(), 8192, "the BAR file itself");
        let mut first = [1u8; 4];
        f.read_exact(&mut first).unwrap();
        assert_eq!(first, [0; 4]);
        let vectors: Vec<OwnedFd> = (0..3)
            .map(|_| {
                let (m, fd) = recv_message(fd);
                assert_eq!(m, i64::from(GUEST_ID), "interrupt setup names the guest");
                fd.expect("an eventfd per vector")
            })
            .collect();
        let t = std::time::Instant::now();
        while !server.connected() {
            assert!(t.elapsed().as_secs() < 30, "the server never saw the guest");
            std::thread::yield_now();
        }
        // a raise is one count on that vector's eventfd, and nothing on the others
        let sink = server.sink();
        sink(2);
        server.raise(2);
        server.raise(0);
        server.raise(3); // no such vector
        assert_eq!(read_counter(&vectors[2]), Some(2));
        assert_eq!(read_counter(&vectors[0]), Some(1));
        assert_eq!(read_counter(&vectors[1]), None, "vector 1 never fired");
        let st = server.stats();
        assert_eq!((st.guests, st.delivered, st.dropped), (1, 3, 2));

        // the guest hangs up: raises are dropped until the next one connects
        drop(c);
        let t = std::time::Instant::now();
        while server.connected() {
            assert!(t.elapsed().as_secs() < 30, "the hang-up went unnoticed");
            std::thread::yield_now();
        }
        server.raise(0);
        assert_eq!(server.stats().dropped, 3);
        drop(server);
        assert!(!sock.exists(), "socket removed");
        let _ = std::fs::remove_file(&shm_path);
        assert!(DoorbellServer::start(&sock, File::open("/dev/null").unwrap(), 0).is_err());
    }
}

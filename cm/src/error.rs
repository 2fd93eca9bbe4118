//! The connection manager's error type: each variant is the errno librdmacm reports in that
//! case ([`Error::errno`]), or an `EAI_*` code where `rdma_getaddrinfo` returns one.

/// `rdma_getaddrinfo` failures that glibc's `getaddrinfo` reports: librdmacm returns these
/// codes verbatim as its return value and leaves `errno` alone (values are glibc's).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GaiError {
    /// `EAI_NONAME` (−2): the node is not a numeric address and there is no DNS here.
    NoName,
    /// `EAI_FAMILY` (−6): an address family this library does not resolve (IPv6, AF_IB).
    Family,
    /// `EAI_SOCKTYPE` (−7): the QP type and the port space's protocol do not go together
    /// (an RC QP with the UDP port space, a UD QP with the TCP one).
    SockType,
    /// `EAI_SERVICE` (−8): the service is not a port number in 0..=65535 (there is no
    /// services database to look names up in).
    Service,
}

impl GaiError {
    /// The `EAI_*` value (negative, as glibc defines them).
    pub const fn code(self) -> i32 {
        match self {
            GaiError::NoName => -2,
            GaiError::Family => -6,
            GaiError::SockType => -7,
            GaiError::Service => -8,
        }
    }
}

/// A connection-manager error. [`errno`](Error::errno) is the value librdmacm leaves in
/// `errno` when the corresponding call returns −1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// EPERM (1): a library-side failure reported through an event with status −1 (the QP
    /// could not be moved to RTR/RTS after a REP), or a UD peer answered SIDR status 1
    /// (nobody listens).
    Permission,
    /// ENOENT (2): no such entry (no SA service record; a UD peer rejected: SIDR status 2).
    NoEntry,
    /// EIO (5): the device failed.
    Io,
    /// EAGAIN (11): nothing there yet on a non-blocking channel, or the device is out of a
    /// resource for now.
    Again,
    /// ENOMEM (12): out of memory or device resources.
    NoMemory,
    /// EBUSY (16): the object is still in use (a PD with QPs or MRs, a device with ids).
    Busy,
    /// ENODEV (19): no RDMA device for the address, or the device is gone.
    NoDevice,
    /// EINVAL (22): an argument is not valid, or the id is not in a state the call accepts
    /// (bind twice, connect before resolving, a second QP, an unbound id, ...).
    InvalidArgument,
    /// ENOSYS (38): an option level or name `rdma_set_option` does not know (the kernel's
    /// answer).
    NotImplemented,
    /// EOPNOTSUPP (95): not supported (RAI_SA with a node name, ...).
    NotSupported,
    /// EAFNOSUPPORT (97): an address family this library does not do (IPv6).
    AfNotSupported,
    /// EADDRINUSE (98): that address and port are taken.
    AddrInUse,
    /// EADDRNOTAVAIL (99): the address is not on any device, or a port conflict involving a
    /// wildcard address, or no ephemeral port left.
    AddrNotAvailable,
    /// ECONNREFUSED (111): the peer rejected the connection (REJ, whatever its reason).
    ConnectionRefused,
    /// ETIMEDOUT (110): the peer did not answer (REQ/REP/DREQ retries exhausted), or an
    /// address did not resolve in time.
    TimedOut,
    /// EHOSTUNREACH (113): no route to the host.
    HostUnreachable,
    /// An `EAI_*` code of `rdma_getaddrinfo` (errno is not set: [`errno`](Error::errno) is 0,
    /// [`return_value`](Error::return_value) is the code).
    Gai(GaiError),
    /// Another errno, passed through from an event status.
    Other(i32),
}

impl Error {
    /// The errno librdmacm sets (0 for [`Error::Gai`], which does not set errno).
    pub const fn errno(self) -> i32 {
        match self {
            Error::Permission => 1,
            Error::NoEntry => 2,
            Error::Io => 5,
            Error::Again => 11,
            Error::NoMemory => 12,
            Error::Busy => 16,
            Error::NoDevice => 19,
            Error::InvalidArgument => 22,
            Error::NotImplemented => 38,
            Error::NotSupported => 95,
            Error::AfNotSupported => 97,
            Error::AddrInUse => 98,
            Error::AddrNotAvailable => 99,
            Error::TimedOut => 110,
            Error::ConnectionRefused => 111,
            Error::HostUnreachable => 113,
            Error::Gai(_) => 0,
            Error::Other(e) => e,
        }
    }

    /// What the C function returns: −1 (with errno set), or the `EAI_*` code.
    pub const fn return_value(self) -> i32 {
        match self {
            Error::Gai(g) => g.code(),
            _ => -1,
        }
    }

    /// The variant for a positive errno value (event statuses carry −errno).
    pub const fn from_errno(e: i32) -> Error {
        match e {
            1 => Error::Permission,
            2 => Error::NoEntry,
            5 => Error::Io,
            11 => Error::Again,
            12 => Error::NoMemory,
            16 => Error::Busy,
            19 => Error::NoDevice,
            22 => Error::InvalidArgument,
            38 => Error::NotImplemented,
            95 => Error::NotSupported,
            97 => Error::AfNotSupported,
            98 => Error::AddrInUse,
            99 => Error::AddrNotAvailable,
            110 => Error::TimedOut,
            111 => Error::ConnectionRefused,
            113 => Error::HostUnreachable,
            e => Error::Other(e),
        }
    }
}

impl From<verbs::Error> for Error {
    fn from(e: verbs::Error) -> Error {
        Error::from_errno(e.errno())
    }
}

impl From<verbs::PostError> for Error {
    fn from(e: verbs::PostError) -> Error {
        e.error.into()
    }
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Gai(g) => write!(f, "{g:?} (EAI {})", g.code()),
            e => write!(f, "{e:?} (errno {})", e.errno()),
        }
    }
}

impl core::error::Error for Error {}

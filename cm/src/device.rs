//! The devices of a manager: their identity ([`DeviceId`], [`DeviceInfo`]), their protection
//! domains ([`CmPd`]) and the neighbour table's entries ([`Neighbor`]).

use core::net::Ipv4Addr;

use verbs::{Gid, Mtu, Provider};

use crate::slab::{Key, Slab};
use crate::transport::DevTransport;

/// What address resolution (ARP, here a table) knows of an IPv4 neighbour. Its connection
/// manager is reached where the device's transport says (the MAD transport: its GSI QP, QP1,
/// as on any RoCE node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Neighbor {
    /// Its Ethernet address.
    pub mac: [u8; 6],
}

/// How a device's port finds its neighbours' Ethernet addresses (a kernel's ARP): given to
/// the manager per device ([`Cm::set_neighbor_resolver`](crate::Cm::set_neighbor_resolver)).
/// `resolve_addr` (and `create_ep`) asks it for a destination the neighbour table does not
/// know, on every pass of the progress engine until it answers or the call's timeout passes
/// (ADDR_ERROR with −ETIMEDOUT, as Linux's address resolution reports an unanswered ARP).
pub trait NeighborResolver: Send + Sync {
    /// What the port knows of `ip`, without waiting: `Ok(Some(..))` when it knows the MAC
    /// (the manager enters it in its table); `Ok(None)` while it does not, after asking the
    /// wire (an ARP request; a repeat while a request is in flight, or while the port's own
    /// retries run, sends nothing new); `Err` when `ip` cannot be reached from this port at
    /// all (no route: [`Error::HostUnreachable`](crate::Error::HostUnreachable), or
    /// ENETUNREACH as `Error::Other(101)`), which fails the resolution at once with that
    /// errno (an error without one counts as EHOSTUNREACH).
    fn resolve_neighbor(&self, ip: Ipv4Addr) -> Result<Option<Neighbor>, crate::Error>;
}

/// A device of a [`Cm`](crate::Cm).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId {
    pub(crate) cm: u32,
    pub(crate) key: Key,
}

/// What a [`Cm`](crate::Cm) knows about one of its devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device.
    pub id: DeviceId,
    /// IPv4 address (from GID 0).
    pub ip: Ipv4Addr,
    /// GID 0.
    pub gid: Gid,
    /// Ethernet address.
    pub mac: [u8; 6],
    /// Node GUID used in CM messages (the EUI-64 of the MAC).
    pub guid: u64,
    /// The QP number peers reach the manager at: with the MAD transport, the GSI QP, so
    /// [`mad::GSI_QPN`](crate::mad::GSI_QPN) (1).
    pub cm_qpn: u32,
    /// Active MTU of port 1.
    pub active_mtu: Mtu,
}

/// A protection domain of a [`Cm`](crate::Cm) device (an `ibv_pd` obtained from the CM's context; a PD
/// of another device, or of another `Cm`, is refused with EINVAL where librdmacm refuses a PD
/// of another `ibv_context`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CmPd {
    pub(crate) dev: DeviceId,
    pub(crate) key: Key,
}

impl CmPd {
    /// The device it belongs to.
    pub fn device(&self) -> DeviceId {
        self.dev
    }
}

pub(crate) struct PdRec<P: Provider> {
    pub pd: P::Pd,
    /// QPs and passive endpoints using it.
    pub users: u32,
}

pub(crate) struct Dev<P: Provider> {
    /// The device's `max_qp_rd_atom` (`query_device`), saturated to the 8 bits the CM
    /// messages carry: what a connection offers as responder resources by default, and the
    /// most it may ask for.
    pub max_responder_resources: u8,
    /// The device's `max_qp_init_rd_atom`, likewise: the default and largest initiator depth.
    pub max_initiator_depth: u8,
    /// Shared with the data paths of the device's ids.
    pub provider: alloc::sync::Arc<P>,
    pub ip: Ipv4Addr,
    pub gid: Gid,
    pub mac: [u8; 6],
    pub guid: u64,
    pub mtu: Mtu,
    pub agent: u32,
    pub pds: Slab<PdRec<P>>,
    pub default_pd: Option<Key>,
    /// Bound ids (each holds one reference; the default PD lives while there is one).
    pub refcnt: u32,
    /// CQs ids created that the caller still held when their QP was destroyed (from the
    /// attributes `create_qp` wrote back), with their channels: destroyed once the caller
    /// let go of them.
    pub held_cqs: alloc::vec::Vec<crate::resources::AutoCq<P>>,
    /// How its connection messages travel (the MAD transport on its GSI QP).
    pub transport: Option<DevTransport<P>>,
    /// Its port's address resolution, if the application gave one.
    pub resolver: Option<alloc::sync::Arc<dyn NeighborResolver>>,
    /// Asynchronous events the engine read, for [`Cm::get_async_event`](crate::Cm::get_async_event).
    pub async_events: alloc::collections::VecDeque<verbs::AsyncEvent>,
}

/// Asynchronous events a device keeps for the application (older ones are dropped).
pub(crate) const ASYNC_EVENT_QUEUE: usize = 256;

/// EUI-64 node GUID of a MAC.
pub(crate) const fn guid_of(mac: [u8; 6]) -> u64 {
    u64::from_be_bytes([
        mac[0] ^ 0x02,
        mac[1],
        mac[2],
        0xFF,
        0xFE,
        mac[3],
        mac[4],
        mac[5],
    ])
}

impl<P: Provider> Dev<P> {
    /// Destroys the held CQs nobody else holds any more (then their channels).
    pub(crate) fn release_held_cqs(&mut self) {
        if self.held_cqs.is_empty() {
            return;
        }
        let p = &*self.provider;
        let mut keep = alloc::vec::Vec::new();
        for a in self.held_cqs.drain(..) {
            match alloc::sync::Arc::try_unwrap(a.cq) {
                Ok(cq) => match p.destroy_cq(cq) {
                    Ok(()) => {
                        if let Some(c) = a.channel {
                            let _ = p.destroy_comp_channel(c);
                        }
                    }
                    // busy (a QP of the caller's uses it): try again later
                    Err(e) => {
                        if let Some(cq) = e.object {
                            keep.push(crate::resources::AutoCq {
                                cq: alloc::sync::Arc::new(cq),
                                channel: a.channel,
                            });
                        }
                    }
                },
                Err(cq) => keep.push(crate::resources::AutoCq {
                    cq,
                    channel: a.channel,
                }),
            }
        }
        self.held_cqs = keep;
    }
}

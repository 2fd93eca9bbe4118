//! `rdma_set_option` (`docs/cm.md#options`): the option levels and names with
//! librdmacm's values, and what the kernel's `ucma_set_option` does with each.

use verbs::{AccessFlags, Provider, QpAttr, QpAttrMask, QpState, QpType};

use crate::config::RDMA_UDP_QKEY;
use crate::conn::Fsm;
use crate::error::Error;
use crate::event::{EventParam, EventType};
use crate::qp::{Connect, cm_access, rtr_attr, rts_attr};
use crate::slab::Key;
use crate::state::{State, mtu_from_code};

/// `RDMA_OPTION_ID`: options of the id (`rdma_set_option` level 0).
pub const OPTION_ID: i32 = 0;
/// `RDMA_OPTION_IB`: InfiniBand options (level 1).
pub const OPTION_IB: i32 = 1;
/// `RDMA_OPTION_ID_TOS` (u8): type of service, the traffic class of paths resolved afterwards.
pub const OPTION_ID_TOS: i32 = 0;
/// `RDMA_OPTION_ID_REUSEADDR` (int): share the bound port with other ids that set it.
pub const OPTION_ID_REUSEADDR: i32 = 1;
/// `RDMA_OPTION_ID_AFONLY` (int): bind only the address family given (IPv6 ids).
pub const OPTION_ID_AFONLY: i32 = 2;
/// `RDMA_OPTION_ID_ACK_TIMEOUT` (u8): the QP's local ACK timeout exponent.
pub const OPTION_ID_ACK_TIMEOUT: i32 = 3;
/// `RDMA_OPTION_IB_PATH` (array of `struct ibv_path_data`): set the route from path records.
pub const OPTION_IB_PATH: i32 = 1;

/// Size of `struct ibv_path_data`: flags (u32), reserved (u32), `struct ibv_path_record`
/// (64 bytes).
pub const PATH_DATA_SIZE: usize = 72;
/// `IBV_PATH_FLAG_GMP | IBV_PATH_FLAG_PRIMARY | IBV_PATH_FLAG_BIDIRECTIONAL`: the record the
/// kernel takes (it ignores every other one).
pub const PATH_FLAGS_GMP_PRIMARY_BIDIR: u32 = 0x01 | 0x02 | 0x08 | 0x20;

/// The options set on an id ([`CmId::options`](crate::CmId::options)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdOptions {
    /// `RDMA_OPTION_ID_TOS`, if set.
    pub tos: Option<u8>,
    /// `RDMA_OPTION_ID_REUSEADDR`.
    pub reuseaddr: bool,
    /// `RDMA_OPTION_ID_AFONLY`.
    pub afonly: bool,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`, if set.
    pub ack_timeout: Option<u8>,
}

/// An `int` option value (native byte order, 4 bytes; another length is EINVAL).
fn int_opt(v: &[u8]) -> Result<i32, Error> {
    let b: [u8; 4] = v.try_into().map_err(|_| Error::InvalidArgument)?;
    Ok(i32::from_ne_bytes(b))
}

/// A `u8` option value (1 byte; another length is EINVAL).
fn u8_opt(v: &[u8]) -> Result<u8, Error> {
    match v {
        [b] => Ok(*b),
        _ => Err(Error::InvalidArgument),
    }
}

impl<P: Provider> State<P> {
    pub(crate) fn options(&self, k: Key) -> Option<IdOptions> {
        let s = self.ids.get(k)?;
        Some(IdOptions {
            tos: s.tos,
            reuseaddr: s.reuseaddr,
            afonly: s.afonly,
            ack_timeout: s.ack_timeout,
        })
    }

    /// `rdma_set_option` → the kernel's `ucma_set_option_level`. `Ok(true)` when a route was
    /// set (IB_PATH): a synchronous caller has the ROUTE_RESOLVED event as its `event`.
    pub(crate) fn set_option(
        &mut self,
        k: Key,
        level: i32,
        name: i32,
        val: &[u8],
    ) -> Result<bool, Error> {
        let s = self.ids.get_mut(k).ok_or(Error::InvalidArgument)?;
        match (level, name) {
            (OPTION_ID, OPTION_ID_TOS) => {
                // `rdma_set_service_type`: accepted in any state
                s.tos = Some(u8_opt(val)?);
            }
            (OPTION_ID, OPTION_ID_REUSEADDR) => {
                // `rdma_set_reuseaddr`: on in any state but listening, off only while idle
                let on = int_opt(val)? != 0;
                if !((on && s.fsm != Fsm::Listen) || s.fsm == Fsm::Idle) {
                    return Err(Error::InvalidArgument);
                }
                s.reuseaddr = on;
            }
            (OPTION_ID, OPTION_ID_AFONLY) => {
                // `rdma_set_afonly`: idle or bound ids only
                let on = int_opt(val)? != 0;
                if !matches!(s.fsm, Fsm::Idle | Fsm::AddrBound) {
                    return Err(Error::InvalidArgument);
                }
                s.afonly = on;
            }
            (OPTION_ID, OPTION_ID_ACK_TIMEOUT) => {
                // `rdma_set_ack_timeout`: RC ids only
                let t = u8_opt(val)?;
                if s.qp_type != verbs::QpType::Rc || t > 31 {
                    return Err(Error::InvalidArgument);
                }
                s.ack_timeout = Some(t);
            }
            (OPTION_IB, OPTION_IB_PATH) => {
                self.set_ib_path(k, val)?;
                return Ok(true);
            }
            _ => return Err(Error::NotImplemented),
        }
        Ok(false)
    }

    /// The kernel's `ucma_set_ib_path` + `rdma_set_ib_path` on a RoCE port: the length must
    /// be a multiple of 72 and one record flagged GMP | PRIMARY | BIDIRECTIONAL, the id bound
    /// to a device and its address resolved (else EINVAL). As on RoCE the L2 side (GIDs, MAC)
    /// comes from address resolution; the record gives the traffic class, hop limit, flow
    /// label, SL, MTU (capped by the port's) and packet life time. ROUTE_RESOLVED follows.
    fn set_ib_path(&mut self, k: Key, val: &[u8]) -> Result<(), Error> {
        if val.is_empty() || !val.len().is_multiple_of(PATH_DATA_SIZE) {
            return Err(Error::InvalidArgument);
        }
        let rec = val
            .chunks_exact(PATH_DATA_SIZE)
            .find(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]) == PATH_FLAGS_GMP_PRIMARY_BIDIR)
            .ok_or(Error::InvalidArgument)?;
        let r = &rec[8..];
        let s = self.ids.get(k).ok_or(Error::InvalidArgument)?;
        if s.fsm != Fsm::AddrResolved {
            return Err(Error::InvalidArgument);
        }
        let (Some(d), Some(src), Some(dst), Some(nb)) = (s.dev, s.src, s.dst, s.peer) else {
            return Err(Error::InvalidArgument);
        };
        let mut route = self
            .synth_route(d, *dst.ip(), nb.mac, src.port(), dst.port())
            .ok_or(Error::NoDevice)?;
        let fl_hop = u32::from_be_bytes([r[44], r[45], r[46], r[47]]);
        route.flow_label = (fl_hop >> 8) & 0xF_FFFF;
        route.hop_limit = fl_hop as u8;
        route.traffic_class = r[48];
        route.sl = (u16::from_be_bytes([r[52], r[53]]) & 0xF) as u8;
        let mtu = mtu_from_code(r[54] & 0x3F).ok_or(Error::InvalidArgument)?;
        route.mtu = route.mtu.min(mtu);
        route.local_ack_timeout = ((r[56] & 0x3F) + 1).min(31);
        if let Some(s) = self.ids.get_mut(k) {
            s.route = Some(route);
            s.fsm = Fsm::RouteResolved;
        }
        self.push_event(k, EventType::RouteResolved, 0, EventParam::None, None);
        Ok(())
    }
}

impl<P: Provider> State<P> {
    /// `rdma_init_qp_attr`: the attributes (and mask) that move the id's QP to `state`, as
    /// the manager itself applies them.
    pub(crate) fn init_qp_attr(
        &self,
        k: Key,
        state: QpState,
    ) -> Result<(QpAttr, QpAttrMask), Error> {
        let s = self.ids.get(k).ok_or(Error::InvalidArgument)?;
        if s.dev.is_none() {
            return Err(Error::InvalidArgument);
        }
        if state == QpState::Init {
            let mut a = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                pkey_index: 0,
                ..QpAttr::default()
            };
            return Ok(if crate::qp::datagram(s.qp_type) {
                a.qkey = RDMA_UDP_QKEY;
                (
                    a,
                    QpAttrMask::STATE
                        | QpAttrMask::PKEY_INDEX
                        | QpAttrMask::PORT
                        | QpAttrMask::QKEY,
                )
            } else {
                a.qp_access_flags = if s.fsm == Fsm::ReqRcvd {
                    cm_access(s.responder_resources)
                } else {
                    AccessFlags::empty()
                };
                let m = QpAttrMask::STATE
                    | QpAttrMask::PKEY_INDEX
                    | QpAttrMask::PORT
                    | QpAttrMask::ACCESS_FLAGS;
                (a, m)
            });
        }
        if s.qp_type != QpType::Rc {
            return Err(Error::InvalidArgument);
        }
        let c = &s.conn;
        let connect = if c.active {
            if !matches!(s.fsm, Fsm::RepRcvd | Fsm::Established) {
                return Err(Error::InvalidArgument);
            }
            Connect {
                route: s.rts_route(),
                dest_qpn: c.remote_qpn,
                rq_psn: c.local_psn,
                sq_psn: c.remote_psn,
                max_dest_rd_atomic: c.peer_initiator_depth,
                max_rd_atomic: c.peer_responder_resources,
                retry_cnt: c.retry_count,
                rnr_retry: c.peer_rnr_retry,
                access: cm_access(s.responder_resources),
            }
        } else {
            let Some(req) = c.req.as_deref() else {
                return Err(Error::InvalidArgument);
            };
            if !matches!(s.fsm, Fsm::ReqRcvd | Fsm::RepSent | Fsm::Established) {
                return Err(Error::InvalidArgument);
            }
            Connect {
                route: s.rts_route(),
                dest_qpn: c.remote_qpn,
                rq_psn: c.local_psn,
                sq_psn: c.remote_psn,
                max_dest_rd_atomic: s.responder_resources,
                max_rd_atomic: s.initiator_depth,
                retry_cnt: req.retry_count,
                rnr_retry: req.rnr_retry_count,
                access: cm_access(s.responder_resources),
            }
        };
        match state {
            QpState::Rtr => Ok(rtr_attr(&connect)),
            QpState::Rts => Ok(rts_attr(&connect)),
            _ => Err(Error::InvalidArgument),
        }
    }
}

//! [`DataPath`]: posts and polls on an id's QP that take the id's own lock only.

use alloc::vec::Vec;

use verbs::{PostError, Provider, RecvWr, SendWr, UdDest, WorkCompletion};

use crate::error::Error;
use crate::resources::{IdPath, PathCell};

/// The data path of a [`CmId`](crate::CmId) ([`CmId::data_path`](crate::CmId::data_path)):
/// `ibv_post_send`, `ibv_post_recv`, `ibv_post_srq_recv` and `ibv_poll_cq` on the id's QP, its
/// SRQ and its QP's CQs.
///
/// Each call takes the id's own lock (which the progress engine also takes, briefly, to move
/// the QP through its transitions), never the manager's lock nor a device-wide one: threads
/// that each drive their own connections do not contend. The provider is shared by the
/// device's ids; the provider serialises pollers of a CQ that several QPs share.
///
/// The handle follows the id: after `destroy_qp` (or the id's destruction) its calls fail with
/// EINVAL; a QP created on the id later is used. Clones share the id's lock.
pub struct DataPath<P: Provider> {
    pub(crate) cell: PathCell<P>,
}

impl<P: Provider> Clone for DataPath<P> {
    fn clone(&self) -> Self {
        DataPath {
            cell: self.cell.clone(),
        }
    }
}

impl<P: Provider> core::fmt::Debug for DataPath<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("DataPath").finish_non_exhaustive()
    }
}

/// EINVAL for a post to an id without a QP (or SRQ), as the first request refused.
const NO_QUEUE: PostError = PostError {
    error: verbs::Error::InvalidArgument,
    bad_wr: 0,
};

impl<P: Provider> DataPath<P> {
    fn with<R>(&self, f: impl FnOnce(&mut IdPath<P>) -> R) -> R {
        f(&mut self.cell.lock())
    }

    /// The QP number, while the id has a QP.
    pub fn qp_num(&self) -> Option<u32> {
        self.with(|p| p.qp.as_ref().map(|q| verbs::QueuePair::qp_num(&q.qp)))
    }

    /// `ibv_post_send` on the id's QP. EINVAL (`bad_wr` 0) without a QP. On an SRD id whose
    /// service resolution completed, work requests that name no destination go to the peer.
    pub fn post_send<'a>(&self, wrs: &[SendWr<'a, P::Ah>]) -> Result<(), PostError> {
        self.with(|p| {
            let (Some(prov), Some(q)) = (p.provider.as_deref(), p.qp.as_mut()) else {
                return Err(NO_QUEUE);
            };
            match &q.peer {
                Some(d) if wrs.iter().any(|w| w.dest.is_none()) => {
                    let fill = |w: &SendWr<'a, P::Ah>| SendWr {
                        wr_id: w.wr_id,
                        opcode: w.opcode,
                        flags: w.flags,
                        sg_list: w.sg_list,
                        inline_data: w.inline_data,
                        imm_data: w.imm_data,
                        remote: w.remote,
                        dest: Some(match &w.dest {
                            Some(x) => UdDest {
                                ah: x.ah,
                                remote_qpn: x.remote_qpn,
                                remote_qkey: x.remote_qkey,
                            },
                            None => UdDest {
                                ah: &d.ah,
                                remote_qpn: d.qpn,
                                remote_qkey: d.qkey,
                            },
                        }),
                    };
                    // one work request (the helpers', rperf's): no allocation
                    if let [w] = wrs {
                        return prov.post_send(&mut q.qp, core::slice::from_ref(&fill(w)));
                    }
                    let filled: Vec<SendWr<'_, P::Ah>> = wrs.iter().map(fill).collect();
                    prov.post_send(&mut q.qp, &filled)
                }
                _ => prov.post_send(&mut q.qp, wrs),
            }
        })
    }

    /// `ibv_post_recv` on the id's QP. EINVAL (`bad_wr` 0) without a QP.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.with(|p| {
            let (Some(prov), Some(q)) = (p.provider.as_deref(), p.qp.as_mut()) else {
                return Err(NO_QUEUE);
            };
            prov.post_recv(&mut q.qp, wrs)
        })
    }

    /// `ibv_post_srq_recv` on the id's SRQ ([`CmId::create_srq`](crate::CmId::create_srq)),
    /// else on the SRQ the id's QP receives from. EINVAL (`bad_wr` 0) without either.
    pub fn post_srq_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.with(|p| {
            let prov = p.provider.as_deref().ok_or(NO_QUEUE)?;
            let srq = p
                .srq
                .as_deref()
                .or(p.qp.as_ref().and_then(|q| q.user.srq.as_deref()))
                .ok_or(NO_QUEUE)?;
            prov.post_srq_recv(srq, wrs)
        })
    }

    /// `ibv_poll_cq` on the CQ the id's QP sends to (the id's or the caller's). EINVAL
    /// without a QP.
    pub fn poll_send_cq(&self, wc: &mut [WorkCompletion]) -> Result<usize, Error> {
        self.with(|p| {
            let (Some(prov), Some(q)) = (p.provider.as_deref(), p.qp.as_ref()) else {
                return Err(Error::InvalidArgument);
            };
            let cq = q.send_cq().ok_or(Error::InvalidArgument)?;
            prov.poll_cq(cq, wc).map_err(Error::from)
        })
    }

    /// `ibv_poll_cq` on the CQ the id's QP receives to. EINVAL without a QP.
    pub fn poll_recv_cq(&self, wc: &mut [WorkCompletion]) -> Result<usize, Error> {
        self.with(|p| {
            let (Some(prov), Some(q)) = (p.provider.as_deref(), p.qp.as_ref()) else {
                return Err(Error::InvalidArgument);
            };
            let cq = q.recv_cq().ok_or(Error::InvalidArgument)?;
            prov.poll_cq(cq, wc).map_err(Error::from)
        })
    }

    /// One round of `rdma_get_send_comp` / `rdma_get_recv_comp` on the CQ the id created:
    /// poll; arm and poll again; drain the channel's event. `None`: nothing yet.
    pub(crate) fn try_comp(
        &self,
        send: bool,
        armed: &mut bool,
    ) -> Option<Result<WorkCompletion, Error>> {
        let mut g = self.cell.lock();
        let p = &mut *g;
        let Some(prov) = p.provider.as_deref() else {
            return Some(Err(Error::InvalidArgument));
        };
        let auto = p.qp.as_mut().and_then(|q| {
            if send {
                q.send_cq.as_mut()
            } else {
                q.recv_cq.as_mut()
            }
        });
        let Some(a) = auto else {
            return Some(Err(Error::InvalidArgument));
        };
        let mut wc = [WorkCompletion::default()];
        let mut poll = |cq: &P::Cq| match prov.poll_cq(cq, &mut wc) {
            Ok(0) => None,
            Ok(_) => Some(Ok(wc[0])),
            Err(e) => Some(Err(Error::from(e))),
        };
        if let Some(r) = poll(&a.cq) {
            return Some(r);
        }
        if !*armed && a.channel.is_some() {
            if let Err(e) = prov.req_notify_cq(&a.cq, false) {
                return Some(Err(e.into()));
            }
            *armed = true;
            if let Some(r) = poll(&a.cq) {
                return Some(r);
            }
        }
        if let Some(ch) = a.channel.as_mut() {
            match prov.get_cq_event(ch) {
                // the event re-enables arming: poll again on the next round
                Ok(Some(_)) => *armed = false,
                Ok(None) => {}
                Err(e) => return Some(Err(e.into())),
            }
        }
        None
    }

    /// Sleeps until the completion channel of the CQ the id created for sends (`send`) or
    /// receives has an event, at most `timeout_ns` ([`Provider::wait_cq_event`]). The channel
    /// is taken out of the id's data path for the wait, so the id's lock is not held while the
    /// thread sleeps (posts and the engine's transitions go on meanwhile); it is put back
    /// after, or destroyed if its CQ went away meanwhile.
    ///
    /// `Ok(true)`: it waited (an event, which re-enables arming: `*armed` becomes false; or
    /// the timeout). `Ok(false)`: nothing to wait on (no channel) or the provider cannot
    /// wait (NotSupported): the caller spins instead.
    pub(crate) fn sleep_on_channel(
        &self,
        send: bool,
        armed: &mut bool,
        timeout_ns: u64,
    ) -> Result<bool, Error> {
        fn slot<P: Provider>(
            p: &mut IdPath<P>,
            send: bool,
        ) -> Option<&mut crate::resources::AutoCq<P>> {
            p.qp.as_mut().and_then(|q| {
                if send {
                    q.send_cq.as_mut()
                } else {
                    q.recv_cq.as_mut()
                }
            })
        }
        let (prov, mut ch) = {
            let mut g = self.cell.lock();
            let p = &mut *g;
            let Some(prov) = p.provider.clone() else {
                return Ok(false);
            };
            let Some(ch) = slot(p, send).and_then(|a| a.channel.take()) else {
                return Ok(false);
            };
            (prov, ch)
        };
        let r = prov.wait_cq_event(&mut ch, timeout_ns);
        let back = {
            let mut g = self.cell.lock();
            match slot(&mut g, send) {
                Some(a) if a.channel.is_none() => {
                    a.channel = Some(ch);
                    None
                }
                _ => Some(ch),
            }
        };
        if let Some(orphan) = back {
            // its CQ was destroyed while we waited; a failed destroy leaks it
            let _ = prov.destroy_comp_channel(orphan);
        }
        match r {
            Ok(Some(_)) => {
                *armed = false;
                Ok(true)
            }
            Ok(None) => Ok(true),
            Err(verbs::Error::NotSupported) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

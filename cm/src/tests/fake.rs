//! An in-memory [`Provider`] for the manager's own tests: devices on one simulated RoCE
//! network ([`Net`]), UD and GSI datagrams delivered at once to the destination QP's posted
//! receives (with the 40-byte GRH area a RoCEv2 UD receive gets), completions, completion
//! channels, QP states. RC QPs are brought up but carry no traffic.
//!
//! Knobs: a node can be cut off (everything sent to it is lost), and a datagram longer than
//! the receive buffer either moves the receiving QP to the error state (a device that treats
//! it as the QP's error; the default, to exercise the manager's recovery) or is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::vec::Vec;

use verbs::{
    AccessFlags, AhAttr, AsyncEvent, Buffer, CompletionQueue, CqEvent, DestroyError, DeviceAttr,
    DmaMemory, Error, Gid, MemRegion, MemoryRegion, Mtu, PortAttr, PostError, Provider, QpAttr,
    QpAttrMask, QpCap, QpInitAttr, QpState, QpType, QueuePair, RecvWr, SendWr, SharedReceiveQueue,
    SrqAttr, WcOpcode, WcStatus, WorkCompletion,
};

const GSI_QKEY: u32 = 0x8001_0000;
const GRH: usize = 40;

/// Heap memory posing as DMA memory (device address = CPU address).
struct Heap {
    p: *mut u8,
    len: usize,
}

impl Drop for Heap {
    fn drop(&mut self) {
        // SAFETY: `p` came from `Box::into_raw` of a boxed slice of `len` bytes.
        drop(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(self.p, self.len)) });
    }
}

// SAFETY: the allocation is owned and valid until drop, never referenced (all accesses go
// through `Buffer`), and every method returns fixed values.
unsafe impl DmaMemory for Heap {
    fn as_ptr(&self) -> *mut u8 {
        self.p
    }
    fn len(&self) -> usize {
        self.len
    }
    fn device_addr(&self) -> u64 {
        self.p as u64
    }
    fn address_space(&self) -> usize {
        0
    }
}

// SAFETY: the pointer is owned; all accesses go through `Buffer`.
unsafe impl Send for Heap {}
// SAFETY: as above.
unsafe impl Sync for Heap {}

struct QpSim {
    ty: QpType,
    state: QpState,
    qkey: u32,
    send_cq: u32,
    recv_cq: u32,
    rq: VecDeque<(u64, Vec<verbs::Sge>)>,
}

struct CqSim {
    ctx: u64,
    q: VecDeque<WorkCompletion>,
    armed: bool,
    channel: Option<u32>,
}

struct Node {
    ip: [u8; 4],
    attr: DeviceAttr,
    next: u32,
    qps: HashMap<u32, QpSim>,
    cqs: HashMap<u32, CqSim>,
    mrs: HashMap<u32, Buffer>,
    channels: HashMap<u32, VecDeque<CqEvent>>,
    cut_off: bool,
    async_events: VecDeque<AsyncEvent>,
}

impl Node {
    fn id(&mut self) -> u32 {
        self.next += 1;
        self.next
    }

    fn complete(&mut self, cq: u32, wc: WorkCompletion) {
        let Some(c) = self.cqs.get_mut(&cq) else {
            return;
        };
        c.q.push_back(wc);
        if c.armed
            && let Some(ch) = c.channel
        {
            c.armed = false;
            let ev = CqEvent {
                cqn: cq,
                cq_context: c.ctx,
            };
            if let Some(q) = self.channels.get_mut(&ch) {
                q.push_back(ev);
            }
        }
    }

    /// Moves a QP to ERR, flushing its posted receives.
    fn qp_error(&mut self, qpn: u32) {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return;
        };
        q.state = QpState::Err;
        let rq: Vec<_> = q.rq.drain(..).collect();
        let cq = q.recv_cq;
        for (wr_id, _) in rq {
            self.complete(
                cq,
                WorkCompletion {
                    wr_id,
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    qp_num: qpn,
                    ..WorkCompletion::default()
                },
            );
        }
    }

    fn read(&self, sge: &verbs::Sge, out: &mut Vec<u8>) -> bool {
        let Some(b) = self.mrs.get(&sge.lkey) else {
            return false;
        };
        let Some(off) = sge.addr.checked_sub(b.addr()) else {
            return false;
        };
        let mut v = vec![0u8; sge.length as usize];
        if b.read(off as usize, &mut v).is_err() {
            return false;
        }
        out.extend_from_slice(&v);
        true
    }

    /// Scatters `data` into the receive's SGEs; false if it does not fit.
    fn scatter(&self, sges: &[verbs::Sge], data: &[u8]) -> bool {
        let room: usize = sges.iter().map(|s| s.length as usize).sum();
        if data.len() > room {
            return false;
        }
        let mut at = 0;
        for s in sges {
            if at == data.len() {
                break;
            }
            let n = (s.length as usize).min(data.len() - at);
            let Some(b) = self.mrs.get(&s.lkey) else {
                return false;
            };
            let off = (s.addr - b.addr()) as usize;
            if b.write(off, &data[at..at + n]).is_err() {
                return false;
            }
            at += n;
        }
        true
    }
}

/// The simulated network: its nodes and knobs.
#[derive(Default)]
pub struct NetState {
    nodes: Vec<Node>,
    /// A datagram longer than the receive buffer drops instead of failing the QP.
    pub drop_too_long: bool,
    /// Datagrams sent (any QP).
    pub datagrams: u64,
    /// Every MAD sent on a GSI QP: (sender's address, full MAD bytes).
    pub mads: Vec<([u8; 4], Vec<u8>)>,
    /// MADs of this attribute ID are lost (counted in `mads` all the same).
    pub drop_attr: Option<u16>,
}

/// A shared network of fake devices.
#[derive(Clone, Default)]
pub struct Net(Arc<Mutex<NetState>>);

impl Net {
    /// The network's state (knobs, counters).
    pub fn state(&self) -> MutexGuard<'_, NetState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new device at `ip` with the given read/atomic limits.
    pub fn device(&self, ip: [u8; 4], max_qp_rd_atom: u32, max_qp_init_rd_atom: u32) -> Fake {
        let mut st = self.state();
        st.nodes.push(Node {
            ip,
            attr: DeviceAttr {
                max_qp: 1024,
                max_qp_wr: 1024,
                max_sge: 4,
                max_cq: 1024,
                max_cqe: 4096,
                max_qp_rd_atom,
                max_qp_init_rd_atom,
                phys_port_cnt: 1,
                ..DeviceAttr::default()
            },
            next: 100,
            qps: HashMap::new(),
            cqs: HashMap::new(),
            mrs: HashMap::new(),
            channels: HashMap::new(),
            cut_off: false,
            async_events: VecDeque::new(),
        });
        Fake {
            net: self.clone(),
            node: st.nodes.len() - 1,
        }
    }

    /// Queues an asynchronous event on the device at `ip`.
    pub fn raise(&self, ip: [u8; 4], ev: AsyncEvent) {
        for n in self.state().nodes.iter_mut().filter(|n| n.ip == ip) {
            n.async_events.push_back(ev);
        }
    }

    /// The attribute IDs of the MADs the node at `ip` sent, in order.
    pub fn mads_from(&self, ip: [u8; 4]) -> Vec<u16> {
        self.state()
            .mads
            .iter()
            .filter(|(i, m)| *i == ip && m.len() >= 18)
            .map(|(_, m)| u16::from_be_bytes([m[16], m[17]]))
            .collect()
    }

    /// Cuts a node off (true) or reconnects it.
    pub fn cut_off(&self, ip: [u8; 4], on: bool) {
        for n in self.state().nodes.iter_mut().filter(|n| n.ip == ip) {
            n.cut_off = on;
        }
    }

    /// The state of QP `qpn` of the node at `ip`.
    pub fn qp_state(&self, ip: [u8; 4], qpn: u32) -> Option<QpState> {
        let st = self.state();
        let n = st.nodes.iter().find(|n| n.ip == ip)?;
        n.qps.get(&qpn).map(|q| q.state)
    }

    /// Live objects of the node at `ip`: (QPs, CQs, MRs, channels).
    pub fn live(&self, ip: [u8; 4]) -> (usize, usize, usize, usize) {
        let st = self.state();
        let n = st.nodes.iter().find(|n| n.ip == ip).expect("node");
        (n.qps.len(), n.cqs.len(), n.mrs.len(), n.channels.len())
    }
}

/// A fake device (the provider).
pub struct Fake {
    net: Net,
    node: usize,
}

/// Protection domain.
pub struct Pd(#[allow(dead_code)] u32);

/// Memory region.
pub struct Mr {
    lkey: u32,
    addr: u64,
    len: u64,
    buf: Option<Buffer>,
}

impl MemoryRegion for Mr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.lkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn length(&self) -> u64 {
        self.len
    }
    fn buffer(&self) -> Option<&Buffer> {
        self.buf.as_ref()
    }
}

/// Completion queue.
pub struct Cq {
    n: u32,
    ctx: u64,
    cqe: u32,
}

impl CompletionQueue for Cq {
    fn cqe(&self) -> u32 {
        self.cqe
    }
    fn cqn(&self) -> u32 {
        self.n
    }
    fn cq_context(&self) -> u64 {
        self.ctx
    }
}

/// Queue pair.
pub struct Qp {
    n: u32,
    ty: QpType,
    state: QpState,
    cap: QpCap,
}

impl QueuePair for Qp {
    fn qp_num(&self) -> u32 {
        self.n
    }
    fn qp_type(&self) -> QpType {
        self.ty
    }
    fn state(&self) -> QpState {
        self.state
    }
    fn cap(&self) -> QpCap {
        self.cap
    }
}

/// SRQs are not simulated (creating one is EOPNOTSUPP).
pub struct Srq;

impl SharedReceiveQueue for Srq {
    fn srq_num(&self) -> u32 {
        0
    }
    fn attr(&self) -> SrqAttr {
        SrqAttr::default()
    }
}

/// Address handle.
pub struct Ah(AhAttr);

/// Completion channel.
pub struct Channel(u32);

impl Fake {
    fn with<R>(&self, f: impl FnOnce(&mut NetState, usize) -> R) -> R {
        f(&mut self.net.state(), self.node)
    }

    fn node<R>(&self, f: impl FnOnce(&mut Node) -> R) -> R {
        self.with(|st, i| f(&mut st.nodes[i]))
    }
}

impl Provider for Fake {
    type Pd = Pd;
    type Mr = Mr;
    type Cq = Cq;
    type Qp = Qp;
    type Srq = Srq;
    type Ah = Ah;
    type CompChannel = Channel;

    fn query_device(&self) -> Result<DeviceAttr, Error> {
        Ok(self.node(|n| n.attr))
    }

    fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        if port != 1 {
            return Err(Error::InvalidArgument);
        }
        Ok(PortAttr {
            max_mtu: Mtu::Mtu4096,
            active_mtu: Mtu::Mtu1024,
            gid_tbl_len: 1,
            pkey_tbl_len: 1,
            ..PortAttr::default()
        })
    }

    fn query_gid(&self, port: u8, index: u16) -> Result<Gid, Error> {
        if port != 1 || index != 0 {
            return Err(Error::InvalidArgument);
        }
        Ok(Gid::from_ipv4(self.node(|n| n.ip)))
    }

    fn alloc_pd(&self) -> Result<Pd, Error> {
        Ok(Pd(self.node(|n| n.id())))
    }

    fn dealloc_pd(&self, _pd: Pd) -> Result<(), DestroyError<Pd>> {
        Ok(())
    }

    fn alloc_buf(&self, len: usize) -> Result<Buffer, Error> {
        if len == 0 {
            return Err(Error::InvalidArgument);
        }
        let p = Box::into_raw(vec![0u8; len].into_boxed_slice()) as *mut u8;
        Ok(Buffer::new(Heap { p, len }))
    }

    fn reg_mr(&self, _pd: &Pd, mem: Buffer, _access: AccessFlags) -> Result<Mr, Error> {
        let lkey = self.node(|n| {
            let k = n.id();
            n.mrs.insert(k, mem.clone());
            k
        });
        Ok(Mr {
            lkey,
            addr: mem.addr(),
            len: mem.len() as u64,
            buf: Some(mem),
        })
    }

    unsafe fn reg_mr_raw(
        &self,
        _pd: &Pd,
        _mem: &MemRegion<'_>,
        _access: AccessFlags,
    ) -> Result<Mr, Error> {
        Err(Error::NotSupported)
    }

    fn dereg_mr(&self, mr: Mr) -> Result<(), DestroyError<Mr>> {
        self.node(|n| n.mrs.remove(&mr.lkey));
        Ok(())
    }

    fn create_comp_channel(&self) -> Result<Channel, Error> {
        Ok(Channel(self.node(|n| {
            let k = n.id();
            n.channels.insert(k, VecDeque::new());
            k
        })))
    }

    fn destroy_comp_channel(&self, channel: Channel) -> Result<(), DestroyError<Channel>> {
        let busy = self.node(|n| n.cqs.values().any(|c| c.channel == Some(channel.0)));
        if busy {
            return Err(DestroyError::keep(Error::Busy, channel));
        }
        self.node(|n| n.channels.remove(&channel.0));
        Ok(())
    }

    fn get_cq_event(&self, channel: &mut Channel) -> Result<Option<CqEvent>, Error> {
        self.node(|n| {
            n.channels
                .get_mut(&channel.0)
                .map(|q| q.pop_front())
                .ok_or(Error::InvalidArgument)
        })
    }

    fn create_cq(&self, cqe: u32, ctx: u64, channel: Option<&Channel>) -> Result<Cq, Error> {
        let n = self.node(|n| {
            let k = n.id();
            n.cqs.insert(
                k,
                CqSim {
                    ctx,
                    q: VecDeque::new(),
                    armed: false,
                    channel: channel.map(|c| c.0),
                },
            );
            k
        });
        Ok(Cq { n, ctx, cqe })
    }

    fn destroy_cq(&self, cq: Cq) -> Result<(), DestroyError<Cq>> {
        let busy = self.node(|n| {
            n.qps
                .values()
                .any(|q| q.send_cq == cq.n || q.recv_cq == cq.n)
        });
        if busy {
            return Err(DestroyError::keep(Error::Busy, cq));
        }
        self.node(|n| n.cqs.remove(&cq.n));
        Ok(())
    }

    fn poll_cq(&self, cq: &Cq, wc: &mut [WorkCompletion]) -> Result<usize, Error> {
        self.node(|n| {
            let c = n.cqs.get_mut(&cq.n).ok_or(Error::InvalidArgument)?;
            let mut k = 0;
            while k < wc.len() {
                match c.q.pop_front() {
                    Some(w) => {
                        wc[k] = w;
                        k += 1;
                    }
                    None => break,
                }
            }
            Ok(k)
        })
    }

    fn req_notify_cq(&self, cq: &Cq, _solicited_only: bool) -> Result<(), Error> {
        self.node(|n| {
            if let Some(c) = n.cqs.get_mut(&cq.n) {
                c.armed = true;
            }
        });
        Ok(())
    }

    fn create_qp(&self, _pd: &Pd, attr: &QpInitAttr<'_, Cq, Srq>) -> Result<(Qp, QpCap), Error> {
        if attr.srq.is_some() {
            return Err(Error::NotSupported);
        }
        let n = self.node(|n| {
            let qpn = if attr.qp_type == QpType::Gsi {
                if n.qps.contains_key(&1) {
                    return Err(Error::Again);
                }
                1
            } else {
                n.id()
            };
            n.qps.insert(
                qpn,
                QpSim {
                    ty: attr.qp_type,
                    state: QpState::Reset,
                    qkey: 0,
                    send_cq: attr.send_cq.n,
                    recv_cq: attr.recv_cq.n,
                    rq: VecDeque::new(),
                },
            );
            Ok(qpn)
        })?;
        let qp = Qp {
            n,
            ty: attr.qp_type,
            state: QpState::Reset,
            cap: attr.cap,
        };
        Ok((qp, attr.cap))
    }

    fn modify_qp(&self, qp: &mut Qp, attr: &QpAttr, mask: QpAttrMask) -> Result<(), Error> {
        verbs::check_modify(qp.ty, qp.state, attr, mask)?;
        self.node(|n| {
            if !n.qps.contains_key(&qp.n) {
                return Err(Error::InvalidArgument);
            }
            if mask.contains(QpAttrMask::QKEY)
                && let Some(q) = n.qps.get_mut(&qp.n)
            {
                q.qkey = attr.qkey;
            }
            if mask.contains(QpAttrMask::STATE) {
                match attr.qp_state {
                    QpState::Err => n.qp_error(qp.n),
                    s => {
                        if let Some(q) = n.qps.get_mut(&qp.n) {
                            if s == QpState::Reset {
                                q.rq.clear();
                            }
                            q.state = s;
                        }
                    }
                }
            }
            Ok(())
        })?;
        if mask.contains(QpAttrMask::STATE) {
            qp.state = attr.qp_state;
        }
        Ok(())
    }

    fn query_qp(&self, qp: &Qp) -> Result<QpAttr, Error> {
        let state = self.node(|n| n.qps.get(&qp.n).map(|q| q.state));
        Ok(QpAttr {
            qp_state: state.ok_or(Error::InvalidArgument)?,
            cap: qp.cap,
            ..QpAttr::default()
        })
    }

    fn destroy_qp(&self, qp: Qp) -> Result<(), DestroyError<Qp>> {
        self.node(|n| n.qps.remove(&qp.n));
        Ok(())
    }

    fn post_send(&self, qp: &mut Qp, wrs: &[SendWr<'_, Ah>]) -> Result<(), PostError> {
        self.with(|st, me| {
            for (i, wr) in wrs.iter().enumerate() {
                let bad = |error| PostError { error, bad_wr: i };
                let node = &st.nodes[me];
                let q = node.qps.get(&qp.n).ok_or(bad(Error::InvalidArgument))?;
                if q.state != QpState::Rts {
                    return Err(bad(Error::InvalidArgument));
                }
                let (src_ip, send_cq, src_qkey) = (node.ip, q.send_cq, q.qkey);
                let mut data = Vec::new();
                if !wr.inline_data.is_empty() {
                    data.extend_from_slice(wr.inline_data);
                }
                for s in wr.sg_list {
                    if !node.read(s, &mut data) {
                        return Err(bad(Error::InvalidArgument));
                    }
                }
                if matches!(qp.ty, QpType::Ud | QpType::Gsi) {
                    let d = wr.dest.as_ref().ok_or(bad(Error::InvalidArgument))?;
                    let qkey = if qp.ty == QpType::Gsi {
                        GSI_QKEY
                    } else if d.remote_qkey & 0x8000_0000 != 0 {
                        src_qkey
                    } else {
                        d.remote_qkey
                    };
                    let to = d.ah.0.dgid.ipv4();
                    st.datagrams += 1;
                    let mut lost = false;
                    if qp.ty == QpType::Gsi {
                        let attr = data.get(16..18).map(|a| u16::from_be_bytes([a[0], a[1]]));
                        st.mads.push((src_ip, data.clone()));
                        lost = attr.is_some() && attr == st.drop_attr;
                    }
                    let drop_too_long = st.drop_too_long;
                    if let Some(t) = st
                        .nodes
                        .iter()
                        .position(|n| Some(n.ip) == to && !n.cut_off && !lost)
                    {
                        deliver(
                            &mut st.nodes[t],
                            d.remote_qpn,
                            qkey,
                            src_ip,
                            qp.n,
                            &data,
                            drop_too_long,
                        );
                    }
                }
                st.nodes[me].complete(
                    send_cq,
                    WorkCompletion {
                        wr_id: wr.wr_id,
                        status: WcStatus::Success,
                        opcode: WcOpcode::Send,
                        qp_num: qp.n,
                        ..WorkCompletion::default()
                    },
                );
            }
            Ok(())
        })
    }

    fn post_recv(&self, qp: &mut Qp, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        self.node(|n| {
            let q = n.qps.get_mut(&qp.n).ok_or(PostError {
                error: Error::InvalidArgument,
                bad_wr: 0,
            })?;
            for w in wrs {
                q.rq.push_back((w.wr_id, w.sg_list.to_vec()));
            }
            if q.state == QpState::Err {
                n.qp_error(qp.n);
            }
            Ok(())
        })
    }

    fn create_srq(&self, _pd: &Pd, _attr: &SrqAttr) -> Result<Srq, Error> {
        Err(Error::NotSupported)
    }

    fn destroy_srq(&self, _srq: Srq) -> Result<(), DestroyError<Srq>> {
        Ok(())
    }

    fn post_srq_recv(&self, _srq: &Srq, _wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        Err(PostError {
            error: Error::NotSupported,
            bad_wr: 0,
        })
    }

    fn create_ah(&self, _pd: &Pd, attr: &AhAttr) -> Result<Ah, Error> {
        Ok(Ah(*attr))
    }

    fn destroy_ah(&self, _ah: Ah) -> Result<(), DestroyError<Ah>> {
        Ok(())
    }

    fn get_async_event(&self) -> Result<Option<AsyncEvent>, Error> {
        Ok(self.node(|n| n.async_events.pop_front()))
    }
}

/// A datagram arriving at QP `qpn` of `n`.
fn deliver(
    n: &mut Node,
    qpn: u32,
    qkey: u32,
    src_ip: [u8; 4],
    src_qp: u32,
    data: &[u8],
    drop_too_long: bool,
) {
    let Some(q) = n.qps.get_mut(&qpn) else {
        return;
    };
    if !matches!(q.ty, QpType::Ud | QpType::Gsi) || !matches!(q.state, QpState::Rtr | QpState::Rts)
    {
        return;
    }
    let want = if q.ty == QpType::Gsi {
        GSI_QKEY
    } else {
        q.qkey
    };
    if qkey != want {
        return;
    }
    let Some((wr_id, sges)) = q.rq.front().cloned() else {
        return;
    };
    let cq = q.recv_cq;
    // RoCEv2 over IPv4: 20 zero bytes, then the IPv4 header (source address at 12..16)
    let mut m = vec![0u8; GRH];
    m[20] = 0x45;
    m[32..36].copy_from_slice(&src_ip);
    m.extend_from_slice(data);
    if !n.scatter(&sges, &m) {
        if drop_too_long {
            return;
        }
        if let Some(q) = n.qps.get_mut(&qpn) {
            q.rq.pop_front();
        }
        n.complete(
            cq,
            WorkCompletion {
                wr_id,
                status: WcStatus::LocLenErr,
                opcode: WcOpcode::Recv,
                qp_num: qpn,
                ..WorkCompletion::default()
            },
        );
        n.qp_error(qpn);
        return;
    }
    if let Some(q) = n.qps.get_mut(&qpn) {
        q.rq.pop_front();
    }
    n.complete(
        cq,
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Recv,
            qp_num: qpn,
            byte_len: m.len() as u32,
            src_qp,
            ..WorkCompletion::default()
        },
    );
}

/// Virtual time: each relax moves it by a millisecond.
#[derive(Clone, Default)]
pub struct Clock(Arc<AtomicU64>);

impl crate::Platform for Clock {
    fn relax(&self) {
        self.0.fetch_add(1_000_000, Ordering::Relaxed);
    }
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

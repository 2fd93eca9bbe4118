//! The data-checked SEND / RDMA WRITE / RDMA READ exchange that the guest tool (`vfio-guest`,
//! running the stack through real kernel VFIO in a QEMU Linux guest) and its peers (the same
//! tool in loopback, or the host test process on an emulated NIC of the UDP fabric) run over
//! a connection of the connection manager.
//!
//! Per iteration `i` (seeds derived from the run's seed and `i`):
//!
//! 1. the client fills its RDMA buffer with pattern R and SENDs an advertisement: the
//!    buffer's address, its read and write rkeys, its length, and a payload with pattern S;
//! 2. the server checks the SEND payload (S), RDMA READs the client's buffer and checks it
//!    (R), fills its own buffer with pattern W, RDMA WRITEs it into the client's buffer and
//!    SENDs "done";
//! 3. the client checks its buffer (W) and SENDs "ack" carrying its verdict.
//!
//! Every mismatch is an error naming the first differing byte. Both ends return a
//! [`Report`] of what they checked.

use cm::{AddrInfo, Cm, CmId, ConnParam, QpInitAttr, RaiFlags, getaddrinfo};
use nic_hal::Platform;
use verbs::{Buffer, MemoryRegion, Provider, QpCap, SendFlags, WcOpcode, WcStatus};

/// Bytes of a message buffer (one SEND / receive).
pub const MSG_LEN: usize = 512;
/// Bytes of checked payload in an advertisement.
pub const PAYLOAD_LEN: usize = 256;
/// Offset of the payload in a message.
const PAYLOAD_AT: usize = 64;
/// Default size of the RDMA buffers: larger than a 4 KiB page, so under IOVA = physical
/// address it needs a huge page.
pub const DEFAULT_RDMA_LEN: usize = 16 << 10;

const KIND_ADV: u8 = 1;
const KIND_DONE: u8 = 2;
const KIND_ACK: u8 = 3;
const MAGIC: u32 = 0x5646_4731; // "VFG1"

/// What one end checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// SENDs whose payload was checked by this end (server) or sent (client).
    pub sends: u32,
    /// RDMA WRITEs checked (client: the data landed in its buffer).
    pub writes: u32,
    /// RDMA READs checked (server: the data read matched).
    pub reads: u32,
    /// Bytes moved by RDMA.
    pub rdma_bytes: u64,
}

/// Run parameters shared by both ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Exchange {
    /// Iterations.
    pub iters: u32,
    /// Size of the RDMA buffers.
    pub rdma_len: usize,
    /// Seed of the patterns (both ends must agree).
    pub seed: u64,
}

impl Default for Exchange {
    fn default() -> Self {
        Exchange {
            iters: 3,
            rdma_len: DEFAULT_RDMA_LEN,
            seed: 0x5646_494f,
        }
    }
}

/// The pattern for `seed`: xorshift64* bytes, never all one value.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed ^ 0x9e37_79b9_7f4a_7c15;
    if x == 0 {
        x = 1;
    }
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

fn seeds(ex: &Exchange, i: u32) -> (u64, u64, u64) {
    let b = ex.seed.wrapping_mul(0x100_0000_01b3) ^ u64::from(i) << 32;
    (b ^ 0x5345_4e44, b ^ 0x5245_4144, b ^ 0x5752_4954) // SEND, READ, WRITE
}

/// Where `got` first differs from `want`, as an error message.
pub fn compare(what: &str, got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    Err(format!(
        "{what}: data mismatch at byte {at} of {} (got {:02x?}, want {:02x?})",
        want.len(),
        got.get(at),
        want.get(at)
    ))
}

/// A message: kind, iteration, and for an advertisement the buffer and payload.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Msg {
    kind: u8,
    iter: u32,
    addr: u64,
    rkey_read: u32,
    rkey_write: u32,
    len: u32,
    status: u32,
    payload: Vec<u8>,
}

impl Msg {
    fn new(kind: u8, iter: u32) -> Msg {
        Msg {
            kind,
            iter,
            addr: 0,
            rkey_read: 0,
            rkey_write: 0,
            len: 0,
            status: 0,
            payload: Vec::new(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut m = vec![0u8; MSG_LEN];
        m[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        m[4] = self.kind;
        m[8..12].copy_from_slice(&self.iter.to_be_bytes());
        m[12..20].copy_from_slice(&self.addr.to_be_bytes());
        m[20..24].copy_from_slice(&self.rkey_read.to_be_bytes());
        m[24..28].copy_from_slice(&self.rkey_write.to_be_bytes());
        m[28..32].copy_from_slice(&self.len.to_be_bytes());
        m[32..36].copy_from_slice(&self.status.to_be_bytes());
        m[PAYLOAD_AT..PAYLOAD_AT + self.payload.len()].copy_from_slice(&self.payload);
        m
    }

    fn decode(m: &[u8]) -> Result<Msg, String> {
        if m.len() < MSG_LEN {
            return Err(format!("message of {} bytes, want {MSG_LEN}", m.len()));
        }
        let u32_at = |o: usize| u32::from_be_bytes([m[o], m[o + 1], m[o + 2], m[o + 3]]);
        if u32_at(0) != MAGIC {
            return Err(format!("bad message magic {:#x}", u32_at(0)));
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&m[12..20]);
        Ok(Msg {
            kind: m[4],
            iter: u32_at(8),
            addr: u64::from_be_bytes(a),
            rkey_read: u32_at(20),
            rkey_write: u32_at(24),
            len: u32_at(28),
            status: u32_at(32),
            payload: m[PAYLOAD_AT..PAYLOAD_AT + PAYLOAD_LEN].to_vec(),
        })
    }
}

/// The QP sizes both ends use.
pub fn qp_attr<C, S>() -> QpInitAttr<C, S> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

/// A memory registration call (`CmId::reg_read` and friends).
type RegFn<'a, M> = &'a dyn Fn(Buffer) -> Result<M, cm::Error>;

/// DMA memory and its registration (freed with [`Buf::free`]).
struct Buf<M> {
    mem: Buffer,
    mr: M,
    extra: Option<M>,
}

impl<M: MemoryRegion> Buf<M> {
    fn new<P: Provider<Mr = M>>(
        id: &CmId<P>,
        len: usize,
        reg: impl Fn(Buffer) -> Result<M, cm::Error>,
        second: Option<RegFn<'_, M>>,
    ) -> Result<Buf<M>, String> {
        let mem = id
            .alloc_buf(len)
            .map_err(|e| format!("DMA allocation of {len} bytes: {e}"))?;
        let mr = reg(mem.clone()).map_err(|e| format!("reg_mr: {e}"))?;
        let extra = match second {
            Some(r) => Some(r(mem.clone()).map_err(|e| format!("reg_mr: {e}"))?),
            None => None,
        };
        Ok(Buf { mem, mr, extra })
    }

    fn write(&self, data: &[u8]) -> Result<(), String> {
        self.mem
            .write(0, data)
            .map_err(|e| format!("dma write: {e:?}"))
    }

    fn read(&self, len: usize) -> Result<Vec<u8>, String> {
        let mut v = vec![0u8; len];
        self.mem
            .read(0, &mut v)
            .map_err(|e| format!("dma read: {e:?}"))?;
        Ok(v)
    }
}

fn free<P: Provider>(id: &CmId<P>, b: Buf<P::Mr>) {
    let _ = id.dereg_mr(b.mr);
    if let Some(m) = b.extra {
        let _ = id.dereg_mr(m);
    }
}

fn check(
    what: &str,
    wc: Result<verbs::WorkCompletion, cm::Error>,
) -> Result<verbs::WorkCompletion, String> {
    let wc = wc.map_err(|e| format!("{what}: {e}"))?;
    if wc.status != WcStatus::Success {
        return Err(format!("{what}: completion status {:?}", wc.status));
    }
    Ok(wc)
}

fn send_msg<P: Provider>(id: &CmId<P>, buf: &Buf<P::Mr>, m: &Msg) -> Result<(), String> {
    buf.write(&m.encode())?;
    id.post_send(
        2,
        buf.mr.addr(),
        MSG_LEN as u32,
        &buf.mr,
        SendFlags::SIGNALED,
    )
    .map_err(|e| format!("post_send: {e}"))?;
    let wc = check("send", id.get_send_comp())?;
    if wc.opcode != WcOpcode::Send {
        return Err(format!("send completion has opcode {:?}", wc.opcode));
    }
    Ok(())
}

fn recv_msg<P: Provider>(
    id: &CmId<P>,
    buf: &Buf<P::Mr>,
    kind: u8,
    iter: u32,
) -> Result<Msg, String> {
    let wc = check("recv", id.get_recv_comp())?;
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != MSG_LEN {
        return Err(format!(
            "unexpected receive: {:?} of {} bytes",
            wc.opcode, wc.byte_len
        ));
    }
    let m = Msg::decode(&buf.read(MSG_LEN)?)?;
    id.post_recv(1, buf.mr.addr(), MSG_LEN as u32, &buf.mr)
        .map_err(|e| format!("post_recv: {e}"))?;
    if m.kind != kind || m.iter != iter {
        return Err(format!(
            "expected message kind {kind} of iteration {iter}, got kind {} of iteration {}",
            m.kind, m.iter
        ));
    }
    Ok(m)
}

/// A listening endpoint on `ip:port` (the device with that address must be in `cm`).
pub fn listen<P: Provider>(cm: &Cm<P>, ip: &str, port: u16) -> Result<CmId<P>, String> {
    let passive = AddrInfo {
        ai_flags: RaiFlags::PASSIVE,
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(ip), Some(&port.to_string()), Some(&passive))
        .map_err(|e| format!("getaddrinfo {ip}:{port}: {e}"))?;
    let mut a = qp_attr();
    let id = cm
        .create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("create_ep (listen): {e}"))?;
    if let Err(e) = id.listen(0) {
        id.destroy_ep();
        return Err(format!("listen: {e}"));
    }
    Ok(id)
}

/// An endpoint from `src` to `dst:port`, not yet connected.
pub fn client_ep<P: Provider>(
    cm: &Cm<P>,
    src: &str,
    dst: &str,
    port: u16,
) -> Result<CmId<P>, String> {
    let hints = AddrInfo {
        ai_src_addr: Some(
            format!("{src}:0")
                .parse()
                .map_err(|e| format!("source {src}: {e}"))?,
        ),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(Some(dst), Some(&port.to_string()), Some(&hints))
        .map_err(|e| format!("getaddrinfo {dst}:{port}: {e}"))?;
    let mut a = qp_attr();
    cm.create_ep(&res, None, Some(&mut a))
        .map_err(|e| format!("create_ep (connect): {e}"))
}

/// The server end: takes one connection request from `listen`, accepts it, runs the
/// exchange, disconnects and destroys the connection's id.
pub fn serve<P: Provider>(listen: &CmId<P>, ex: &Exchange) -> Result<Report, String> {
    let conn = listen
        .get_request()
        .map_err(|e| format!("get_request: {e}"))?;
    let r = (|| {
        let recv = Buf::new(&conn, MSG_LEN, |m| conn.reg_msgs(m), None)?;
        let send = Buf::new(&conn, MSG_LEN, |m| conn.reg_msgs(m), None)?;
        let rdma = Buf::new(&conn, ex.rdma_len, |m| conn.reg_msgs(m), None)?;
        let r = (|| {
            conn.post_recv(1, recv.mr.addr(), MSG_LEN as u32, &recv.mr)
                .map_err(|e| format!("post_recv: {e}"))?;
            conn.accept(None).map_err(|e| format!("accept: {e}"))?;
            serve_loop(&conn, ex, &recv, &send, &rdma)
        })();
        conn.disconnect().ok();
        for b in [recv, send, rdma] {
            free(&conn, b);
        }
        r
    })();
    conn.destroy_ep();
    r
}

fn serve_loop<P: Provider>(
    conn: &CmId<P>,
    ex: &Exchange,
    recv: &Buf<P::Mr>,
    send: &Buf<P::Mr>,
    rdma: &Buf<P::Mr>,
) -> Result<Report, String> {
    let mut rep = Report::default();
    for i in 0..ex.iters {
        let (s_send, s_read, s_write) = seeds(ex, i);
        let adv = recv_msg(conn, recv, KIND_ADV, i)?;
        compare("SEND payload", &adv.payload, &pattern(s_send, PAYLOAD_LEN))?;
        rep.sends += 1;
        let len = adv.len as usize;
        if len != ex.rdma_len {
            return Err(format!("advertised length {len}, want {}", ex.rdma_len));
        }
        rdma.write(&vec![0u8; len])?;
        conn.post_read(
            3,
            rdma.mr.addr(),
            len as u32,
            &rdma.mr,
            SendFlags::SIGNALED,
            adv.addr,
            adv.rkey_read,
        )
        .map_err(|e| format!("post_read: {e}"))?;
        check("RDMA READ", conn.get_send_comp())?;
        compare("RDMA READ", &rdma.read(len)?, &pattern(s_read, len))?;
        rep.reads += 1;
        rdma.write(&pattern(s_write, len))?;
        conn.post_write(
            4,
            rdma.mr.addr(),
            len as u32,
            &rdma.mr,
            SendFlags::SIGNALED,
            adv.addr,
            adv.rkey_write,
        )
        .map_err(|e| format!("post_write: {e}"))?;
        check("RDMA WRITE", conn.get_send_comp())?;
        rep.rdma_bytes += 2 * len as u64;
        send_msg(conn, send, &Msg::new(KIND_DONE, i))?;
        let ack = recv_msg(conn, recv, KIND_ACK, i)?;
        if ack.status != 0 {
            return Err(format!(
                "the client found the RDMA WRITE data wrong in iteration {i}"
            ));
        }
        rep.writes += 1;
    }
    Ok(rep)
}

/// The client end: connects `id`, runs the exchange, disconnects. The id stays for the
/// caller to destroy.
pub fn run_client<P: Provider>(id: &CmId<P>, ex: &Exchange) -> Result<Report, String> {
    let recv = Buf::new(id, MSG_LEN, |m| id.reg_msgs(m), None)?;
    let send = Buf::new(id, MSG_LEN, |m| id.reg_msgs(m), None)?;
    let wr = |m: Buffer| id.reg_write(m);
    let rdma = Buf::new(id, ex.rdma_len, |m| id.reg_read(m), Some(&wr))?;
    let r = (|| {
        id.post_recv(1, recv.mr.addr(), MSG_LEN as u32, &recv.mr)
            .map_err(|e| format!("post_recv: {e}"))?;
        id.connect(Some(&ConnParam {
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
            ..ConnParam::default()
        }))
        .map_err(|e| format!("connect: {e}"))?;
        let r = client_loop(id, ex, &recv, &send, &rdma);
        id.disconnect().ok();
        r
    })();
    for b in [recv, send, rdma] {
        free(id, b);
    }
    r
}

fn client_loop<P: Provider>(
    id: &CmId<P>,
    ex: &Exchange,
    recv: &Buf<P::Mr>,
    send: &Buf<P::Mr>,
    rdma: &Buf<P::Mr>,
) -> Result<Report, String> {
    let mut rep = Report::default();
    let wkey = rdma.extra.as_ref().map(|m| m.rkey()).unwrap_or(0);
    for i in 0..ex.iters {
        let (s_send, s_read, s_write) = seeds(ex, i);
        rdma.write(&pattern(s_read, ex.rdma_len))?;
        let mut adv = Msg::new(KIND_ADV, i);
        adv.addr = rdma.mr.addr();
        adv.rkey_read = rdma.mr.rkey();
        adv.rkey_write = wkey;
        adv.len = ex.rdma_len as u32;
        adv.payload = pattern(s_send, PAYLOAD_LEN);
        send_msg(id, send, &adv)?;
        rep.sends += 1;
        recv_msg(id, recv, KIND_DONE, i)?;
        rep.reads += 1; // the server read our buffer and checked it
        let verdict = compare(
            "RDMA WRITE",
            &rdma.read(ex.rdma_len)?,
            &pattern(s_write, ex.rdma_len),
        );
        let mut ack = Msg::new(KIND_ACK, i);
        ack.status = u32::from(verdict.is_err());
        send_msg(id, send, &ack)?;
        verdict?;
        rep.writes += 1;
        rep.rdma_bytes += 2 * ex.rdma_len as u64;
    }
    Ok(rep)
}

/// A platform for a driver whose device runs elsewhere (a host process, real hardware):
/// `relax` is a spin hint, `now_ns` the monotonic clock.
#[derive(Clone, Copy, Debug)]
pub struct SpinClock {
    epoch: std::time::Instant,
}

impl SpinClock {
    /// A clock whose zero is now.
    pub fn new() -> SpinClock {
        SpinClock {
            epoch: std::time::Instant::now(),
        }
    }
}

impl Default for SpinClock {
    fn default() -> Self {
        SpinClock::new()
    }
}

impl Platform for SpinClock {
    fn relax(&self) {
        std::hint::spin_loop();
    }
    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The connection manager's host services are the driver's.
impl cm::Platform for SpinClock {
    fn relax(&self) {
        Platform::relax(self)
    }
    fn now_ns(&self) -> u64 {
        Platform::now_ns(self)
    }
    fn entropy(&self) -> u64 {
        os_entropy()
    }
}

/// 64 bits from the OS's random source (`/dev/urandom`; where that cannot be read, the
/// randomly keyed hasher std seeds from the OS): the connection manager's entropy.
fn os_entropy() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        return u64::from_ne_bytes(b);
    }
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_role() {
        let ex = Exchange::default();
        let (a, b, c) = seeds(&ex, 0);
        assert!(a != b && b != c && a != c);
        assert_ne!(seeds(&ex, 1), seeds(&ex, 0));
        assert_eq!(pattern(7, 100), pattern(7, 100));
        assert_ne!(pattern(7, 100), pattern(8, 100));
        assert_eq!(pattern(7, 13).len(), 13);
        assert_eq!(&pattern(7, 100)[..13], &pattern(7, 13)[..]);
    }

    #[test]
    fn messages_round_trip_and_reject_garbage() {
        let mut m = Msg::new(KIND_ADV, 9);
        m.addr = 0x1122_3344_5566_7788;
        m.rkey_read = 0xaabb;
        m.rkey_write = 0xccdd;
        m.len = 16384;
        m.payload = pattern(1, PAYLOAD_LEN);
        let e = m.encode();
        assert_eq!(e.len(), MSG_LEN);
        assert_eq!(Msg::decode(&e).unwrap(), m);
        let mut bad = e.clone();
        bad[0] ^= 1;
        assert!(Msg::decode(&bad).unwrap_err().contains("magic"));
        assert!(Msg::decode(&e[..10]).is_err());
    }

    #[test]
    fn compare_names_the_first_difference() {
        assert!(compare("x", b"abc", b"abc").is_ok());
        let e = compare("RDMA READ", b"abd", b"abc").unwrap_err();
        assert!(e.contains("byte 2"), "{e}");
        assert!(compare("x", b"ab", b"abc").unwrap_err().contains("byte 2"));
    }
}

//! rdma-core's `rping` exchange on our connection manager, as the peer of the real `rping`
//! (librdmacm/examples/rping.c) in a guest.
//!
//! Per ping, the client fills its source buffer with rping's pattern (`rdma-ping-N: `, then
//! letters from 'A'+N rotating through 'A'..='z', NUL last) and SENDs the buffer's address,
//! rkey and length (`struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }`, 16
//! bytes, big-endian); the server RDMA READs that many bytes, SENDs "go ahead" (16 bytes whose
//! content does not matter); the client SENDs its sink's address, rkey and length; the server
//! RDMA WRITEs `strlen(data) + 1` bytes there and SENDs "go ahead"; the client compares sink
//! and source. The real rping server runs until the client disconnects, whatever `-C` says.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cm::{AddrInfo, CmId, ConnParam, EventType, QpInitAttr, RaiFlags, getaddrinfo};
use nic_hal::{DmaAllocator, DmaBuf};
use verbs::{MemRegion, MemoryRegion, QpCap, SendFlags, WcOpcode, WcStatus, WorkCompletion};

use crate::{EthDevice, EthNic};

type Id = CmId<EthDevice>;

/// rping's default port.
pub const RPING_PORT: u16 = 7174;
/// `sizeof(struct rping_rdma_info)`.
pub const INFO_LEN: usize = 16;
/// rping's `RPING_BUFSIZE`: the largest ping (minus one) and our server's buffer.
pub const RPING_BUFSIZE: usize = 64 * 1024;

/// What to run.
#[derive(Clone, Debug)]
pub struct Options {
    /// Pings (client); the server runs until the client disconnects, but stops after this
    /// many if non-zero.
    pub count: u32,
    /// Ping size (client): at most the guest server's buffer (rping's default is 64).
    pub size: usize,
    /// The rdma_cm port.
    pub port: u16,
    /// Print each ping's data (`-v`).
    pub verbose: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            count: 10,
            size: 64,
            port: RPING_PORT,
            verbose: false,
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Pings completed and verified.
    pub pings: u32,
    /// The ping data, as rping's `-v` prints it (client: "ping data: …", server: "server ping
    /// data: …").
    pub lines: Vec<String>,
    /// Time from the connection's establishment to the last ping's end.
    pub elapsed: Duration,
    /// How the run ended on the server side: the client disconnected (true) or the count was
    /// reached.
    pub peer_disconnected: bool,
}

/// rping's source pattern for ping `ping` of `size` bytes.
pub fn pattern(ping: u32, size: usize) -> Vec<u8> {
    let start = b'A' + (ping % 58) as u8;
    let mut buf = format!("rdma-ping-{ping}: ").into_bytes();
    buf.truncate(size.saturating_sub(1));
    let mut c = start;
    while buf.len() < size {
        buf.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    buf
}

/// The advertisement bytes.
pub fn encode_info(addr: u64, rkey: u32, len: u32) -> [u8; INFO_LEN] {
    let mut m = [0u8; INFO_LEN];
    m[..8].copy_from_slice(&addr.to_be_bytes());
    m[8..12].copy_from_slice(&rkey.to_be_bytes());
    m[12..].copy_from_slice(&len.to_be_bytes());
    m
}

/// Address, rkey and length of an advertisement.
pub fn decode_info(m: &[u8; INFO_LEN]) -> (u64, u32, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&m[..8]);
    (
        u64::from_be_bytes(a),
        u32::from_be_bytes([m[8], m[9], m[10], m[11]]),
        u32::from_be_bytes([m[12], m[13], m[14], m[15]]),
    )
}

/// The text up to the first NUL (what `printf("%s")` shows).
fn as_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

struct Buf {
    mem: DmaBuf,
    mr: mlx5::Mr,
}

impl Buf {
    fn new(
        dma: &Arc<dyn DmaAllocator>,
        len: usize,
        reg: impl FnOnce(&MemRegion<'_>) -> Result<mlx5::Mr, cm::Error>,
    ) -> Result<Buf, String> {
        let mem = DmaBuf::new(dma, len, 4096).map_err(|e| format!("dma alloc: {e:?}"))?;
        let mr = reg(&MemRegion {
            addr: mem.iova(),
            length: len as u64,
            pages: &[],
        })
        .map_err(|e| format!("reg_mr: {e:?}"))?;
        Ok(Buf { mem, mr })
    }
    fn addr(&self) -> u64 {
        self.mr.addr()
    }
    fn read(&self, len: usize) -> Result<Vec<u8>, String> {
        let mut v = vec![0u8; len];
        self.mem
            .read(0, &mut v)
            .map_err(|e| format!("dma read: {e:?}"))?;
        Ok(v)
    }
    fn write(&self, data: &[u8]) -> Result<(), String> {
        self.mem
            .write(0, data)
            .map_err(|e| format!("dma write: {e:?}"))
    }
}

fn qp_attr() -> QpInitAttr<mlx5::Cq, mlx5::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: 16,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

fn ok_wc(what: &str, wc: Result<WorkCompletion, cm::Error>) -> Result<WorkCompletion, String> {
    let wc = wc.map_err(|e| format!("{what}: {e:?}"))?;
    if wc.status != WcStatus::Success {
        return Err(format!("{what}: completion status {:?}", wc.status));
    }
    Ok(wc)
}

fn send_info(id: &Id, send: &Buf, info: [u8; INFO_LEN]) -> Result<(), String> {
    send.write(&info)?;
    id.post_send(
        2,
        send.addr(),
        INFO_LEN as u32,
        &send.mr,
        SendFlags::SIGNALED,
    )
    .map_err(|e| format!("post_send: {e:?}"))?;
    ok_wc("send", id.get_send_comp())?;
    Ok(())
}

/// The next receive: `Ok(None)` when it was flushed (the peer disconnected).
fn recv_info(id: &Id, recv: &Buf) -> Result<Option<[u8; INFO_LEN]>, String> {
    let wc = id.get_recv_comp().map_err(|e| format!("recv: {e:?}"))?;
    if wc.status == WcStatus::WrFlushErr {
        return Ok(None);
    }
    if wc.status != WcStatus::Success {
        return Err(format!("recv: completion status {:?}", wc.status));
    }
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
        return Err(format!(
            "unexpected receive {:?} of {} bytes",
            wc.opcode, wc.byte_len
        ));
    }
    let mut m = [0u8; INFO_LEN];
    m.copy_from_slice(&recv.read(INFO_LEN)?);
    id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
        .map_err(|e| format!("post_recv: {e:?}"))?;
    Ok(Some(m))
}

fn conn_param<'a>() -> ConnParam<'a> {
    ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..ConnParam::default()
    }
}

/// Connects to the rping server at `server` from `nic` and runs `o.count` pings, each
/// checked byte for byte. The server's MAC must be resolvable (see [`EthNic::resolve`]).
pub fn client(nic: &EthNic, server: Ipv4Addr, o: &Options) -> Result<Report, String> {
    let hints = AddrInfo {
        ai_src_addr: Some(SocketAddr::V4(SocketAddrV4::new(nic.ip(), 0))),
        ..AddrInfo::default()
    };
    let res = getaddrinfo(
        Some(&server.to_string()),
        Some(&o.port.to_string()),
        Some(&hints),
    )
    .map_err(|e| format!("getaddrinfo: {e:?}"))?;
    let id = nic
        .cm
        .create_ep(&res, None, Some(&mut qp_attr()))
        .map_err(|e| format!("create_ep: {e:?}"))?;
    let r = client_on(&id, &nic.dma, o);
    id.destroy_ep();
    r
}

fn client_on(id: &Id, dma: &Arc<dyn DmaAllocator>, o: &Options) -> Result<Report, String> {
    let recv = Buf::new(dma, INFO_LEN, |m| id.reg_msgs(m))?;
    let send = Buf::new(dma, INFO_LEN, |m| id.reg_msgs(m))?;
    let start = Buf::new(dma, o.size, |m| id.reg_read(m))?;
    let sink = Buf::new(dma, o.size, |m| id.reg_write(m))?;
    let r = (|| {
        id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
            .map_err(|e| format!("post_recv: {e:?}"))?;
        id.connect(Some(&conn_param()))
            .map_err(|e| format!("connect: {e:?}"))?;
        let t0 = Instant::now();
        let mut rep = Report::default();
        let r = (|| {
            for ping in 0..o.count {
                let src = pattern(ping, o.size);
                start.write(&src)?;
                sink.write(&vec![0u8; o.size])?;
                send_info(
                    id,
                    &send,
                    encode_info(start.addr(), start.mr.rkey(), o.size as u32),
                )?;
                recv_info(id, &recv)?.ok_or("disconnected while waiting for go-ahead")?;
                send_info(
                    id,
                    &send,
                    encode_info(sink.addr(), sink.mr.rkey(), o.size as u32),
                )?;
                recv_info(id, &recv)?.ok_or("disconnected while waiting for the write")?;
                let got = sink.read(o.size)?;
                if got != src {
                    return Err(format!(
                        "data mismatch in ping {ping}: sent {:?} got {:?}",
                        as_text(&src),
                        as_text(&got)
                    ));
                }
                let line = format!("ping data: {}", as_text(&got));
                if o.verbose {
                    println!("{line}");
                }
                rep.lines.push(line);
                rep.pings += 1;
            }
            Ok(())
        })();
        rep.elapsed = t0.elapsed();
        id.disconnect().map_err(|e| format!("disconnect: {e:?}"))?;
        r.map(|()| rep)
    })();
    for b in [recv, send, start, sink] {
        let _ = id.dereg_mr(b.mr);
    }
    r
}

/// A listening rping server on `nic` (port `o.port`).
pub struct Server {
    listen: Id,
}

impl Server {
    /// Binds and listens on `nic`'s address.
    pub fn listen(nic: &EthNic, o: &Options) -> Result<Server, String> {
        let passive = AddrInfo {
            ai_flags: RaiFlags::PASSIVE,
            ..AddrInfo::default()
        };
        let res = getaddrinfo(
            Some(&nic.ip().to_string()),
            Some(&o.port.to_string()),
            Some(&passive),
        )
        .map_err(|e| format!("getaddrinfo: {e:?}"))?;
        let listen = nic
            .cm
            .create_ep(&res, None, Some(&mut qp_attr()))
            .map_err(|e| format!("create_ep: {e:?}"))?;
        listen.listen(1).map_err(|e| format!("listen: {e:?}"))?;
        Ok(Server { listen })
    }

    /// Accepts one connection and serves pings until the client disconnects (or `o.count`
    /// pings if non-zero). Each read ping is checked against rping's pattern.
    pub fn serve_one(&self, nic: &EthNic, o: &Options) -> Result<Report, String> {
        let conn = self
            .listen
            .get_request()
            .map_err(|e| format!("get_request: {e:?}"))?;
        let r = serve_on(&conn, &nic.dma, o);
        conn.destroy_ep();
        r
    }

    /// Closes the listener.
    pub fn close(self) {
        self.listen.destroy_ep();
    }
}

fn serve_on(conn: &Id, dma: &Arc<dyn DmaAllocator>, o: &Options) -> Result<Report, String> {
    let recv = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
    let send = Buf::new(dma, INFO_LEN, |m| conn.reg_msgs(m))?;
    let rdma = Buf::new(dma, RPING_BUFSIZE, |m| conn.reg_write(m))?;
    let r = (|| {
        conn.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
            .map_err(|e| format!("post_recv: {e:?}"))?;
        conn.accept(Some(&conn_param()))
            .map_err(|e| format!("accept: {e:?}"))?;
        let t0 = Instant::now();
        let mut rep = Report::default();
        let r = (|| {
            loop {
                if o.count != 0 && rep.pings == o.count {
                    return Ok(());
                }
                let Some(adv) = recv_info(conn, &recv)? else {
                    rep.peer_disconnected = true;
                    return Ok(());
                };
                let (addr, rkey, len) = decode_info(&adv);
                if len as usize > RPING_BUFSIZE - 1 {
                    return Err(format!("advertised length {len} is too large"));
                }
                conn.post_read(
                    3,
                    rdma.addr(),
                    len,
                    &rdma.mr,
                    SendFlags::SIGNALED,
                    addr,
                    rkey,
                )
                .map_err(|e| format!("post_read: {e:?}"))?;
                ok_wc("rdma read", conn.get_send_comp())?;
                let data = rdma.read(len as usize)?;
                let want = pattern(rep.pings, len as usize);
                if data != want {
                    return Err(format!(
                        "ping {}: read {:?}, rping's pattern is {:?}",
                        rep.pings,
                        as_text(&data),
                        as_text(&want)
                    ));
                }
                let line = format!("server ping data: {}", as_text(&data));
                if o.verbose {
                    println!("{line}");
                }
                rep.lines.push(line);
                send_info(conn, &send, [0u8; INFO_LEN])?;
                let Some(adv) = recv_info(conn, &recv)? else {
                    return Err("disconnected while waiting for the sink".into());
                };
                let (addr, rkey, _) = decode_info(&adv);
                let wlen = as_text(&data).len() as u32 + 1;
                conn.post_write(
                    4,
                    rdma.addr(),
                    wlen,
                    &rdma.mr,
                    SendFlags::SIGNALED,
                    addr,
                    rkey,
                )
                .map_err(|e| format!("post_write: {e:?}"))?;
                ok_wc("rdma write", conn.get_send_comp())?;
                send_info(conn, &send, [0u8; INFO_LEN])?;
                rep.pings += 1;
            }
        })();
        rep.elapsed = t0.elapsed();
        // As rping: disconnect (answering the peer's DREQ, or sending ours).
        let _ = conn.disconnect();
        r.map(|()| rep)
    })();
    for b in [recv, send, rdma] {
        let _ = conn.dereg_mr(b.mr);
    }
    r
}

/// The event the listener's connection ended with, for tests that check a clean end.
pub fn last_event(id: &Id) -> Option<EventType> {
    id.event().map(|e| e.event)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_is_rpings() {
        assert_eq!(&pattern(0, 26), b"rdma-ping-0: ABCDEFGHIJKL\0");
        assert_eq!(&pattern(1, 20), b"rdma-ping-1: BCDEFG\0");
        // letters wrap from 'z' to 'A'; the start letter advances one per ping and wraps too
        assert_eq!(pattern(57, 18)[14..], *b"zAB\0");
        assert_eq!(pattern(58, 18)[14..], *b"ABC\0");
        assert_eq!(pattern(3, 64).len(), 64);
    }

    #[test]
    fn info_is_big_endian() {
        let m = encode_info(0x1122_3344_5566_7788, 0xaabb_ccdd, 64);
        assert_eq!(
            m,
            [
                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0, 64
            ]
        );
        assert_eq!(decode_info(&m), (0x1122_3344_5566_7788, 0xaabb_ccdd, 64));
    }
}

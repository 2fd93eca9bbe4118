//! rping's exchange over an established connection: the ping pattern, the 16-byte buffer
//! descriptor, the registered buffers, and the server's and the client's side of each ping
//! (SEND the descriptor, RDMA READ, "go ahead", RDMA WRITE, compare).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cm::{CmId, QpInitAttr};
use verbs::{Buffer, MemoryRegion, QpCap, SendFlags, WcOpcode, WcStatus};

use crate::Dev;
use crate::cli::Options;

/// rping's `RPING_MSG_FMT` prefix.
pub(crate) const MSG_PREFIX: &str = "rdma-ping-";

/// rping's `RPING_BUFSIZE`: the server's buffer, which holds any ping.
pub(crate) const RPING_BUFSIZE: usize = 64 * 1024;

/// The advertisement: `struct rping_rdma_info { __be64 buf; __be32 rkey; __be32 size; }`.
pub(crate) const INFO_LEN: usize = 16;

/// rping's `RPING_SQ_DEPTH`.
pub(crate) const SQ_DEPTH: u32 = 16;

/// rping's source pattern for ping `ping`: its letters start at 'A' + `ping` mod 58
/// ('A'..='z').
pub(crate) fn pattern(ping: u32, size: usize) -> Vec<u8> {
    let mut buf = format!("{MSG_PREFIX}{ping}: ").into_bytes();
    buf.truncate(size);
    let mut c = b'A' + (ping % 58) as u8;
    while buf.len() < size {
        buf.push(c);
        c = if c >= b'z' { b'A' } else { c + 1 };
    }
    if let Some(last) = buf.last_mut() {
        *last = 0;
    }
    buf
}

/// The bytes up to the first NUL, as text (what rping's `printf("%s")` shows).
pub(crate) fn as_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

pub(crate) fn encode_info(addr: u64, rkey: u32, len: u32) -> [u8; INFO_LEN] {
    let mut m = [0u8; INFO_LEN];
    m[..8].copy_from_slice(&addr.to_be_bytes());
    m[8..12].copy_from_slice(&rkey.to_be_bytes());
    m[12..].copy_from_slice(&len.to_be_bytes());
    m
}

pub(crate) fn decode_info(m: &[u8; INFO_LEN]) -> (u64, u32, u32) {
    let mut a = [0u8; 8];
    a.copy_from_slice(&m[..8]);
    (
        u64::from_be_bytes(a),
        u32::from_be_bytes([m[8], m[9], m[10], m[11]]),
        u32::from_be_bytes([m[12], m[13], m[14], m[15]]),
    )
}

/// Memory on one NIC plus its registration.
pub(crate) struct Buf<M> {
    pub(crate) mem: Buffer,
    pub(crate) mr: M,
}

impl<M: verbs::MemoryRegion> Buf<M> {
    fn new<P: Dev<Mr = M>>(
        id: &CmId<P>,
        len: usize,
        reg: impl FnOnce(Buffer) -> Result<M, cm::Error>,
    ) -> Result<Buf<M>, String> {
        let mem = id.alloc_buf(len).map_err(|e| format!("dma alloc: {e:?}"))?;
        let mr = reg(mem.clone()).map_err(|e| format!("reg_mr: {e:?}"))?;
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

    fn free<P: Dev<Mr = M>>(self, id: &CmId<P>) {
        let _ = id.dereg_mr(self.mr);
    }
}

/// Whether the run is on EFA's SRD (`--device efa`): the ids are datagram ids of the UDP
/// port space (the connection manager resolves the service and remembers the peer, so the
/// exchange posts as on RC), and with no connection to take down the client ends its run
/// with an empty advertisement (address, rkey and length 0) before its disconnect.
pub(crate) fn srd(o: &Options) -> bool {
    matches!(o.device, device_open::Family::Efa(_))
}

pub(crate) fn qp_attr<P: Dev>() -> QpInitAttr<P::Cq, P::Srq> {
    QpInitAttr {
        cap: QpCap {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: 2,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
        sq_sig_all: true,
        ..QpInitAttr::default()
    }
}

/// rping's connection parameters (both sides).
pub(crate) fn conn_param<'a>() -> cm::ConnParam<'a> {
    cm::ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        retry_count: 7,
        rnr_retry_count: 7,
        ..cm::ConnParam::default()
    }
}

/// Event mode (`-e`): completions are waited for on the CQs' completion channels, sleeping
/// ([`CmId::get_send_comp`]); otherwise polled ([`CmId::poll_send_comp`]). Set once by
/// `main` before any connection.
pub(crate) static EVENT_MODE: AtomicBool = AtomicBool::new(false);

/// The next send completion of `id`, as [`EVENT_MODE`] says.
pub(crate) fn send_comp<P: Dev>(id: &CmId<P>) -> Result<verbs::WorkCompletion, cm::Error> {
    if EVENT_MODE.load(Ordering::Relaxed) {
        id.get_send_comp()
    } else {
        id.poll_send_comp()
    }
}

/// The next receive completion of `id`, as [`EVENT_MODE`] says.
pub(crate) fn recv_comp<P: Dev>(id: &CmId<P>) -> Result<verbs::WorkCompletion, cm::Error> {
    if EVENT_MODE.load(Ordering::Relaxed) {
        id.get_recv_comp()
    } else {
        id.poll_recv_comp()
    }
}

pub(crate) fn check_wc(
    side: &str,
    what: &str,
    wc: Result<verbs::WorkCompletion, cm::Error>,
) -> Result<verbs::WorkCompletion, String> {
    let wc = wc.map_err(|e| format!("{side}: {what}: {e:?}"))?;
    if wc.status != WcStatus::Success {
        return Err(format!("{side}: {what} completion error {:?}", wc.status));
    }
    Ok(wc)
}

/// Writes `info` into `send`, SENDs it and waits for the send completion.
pub(crate) fn send_info<P: Dev>(
    id: &CmId<P>,
    side: &str,
    send: &Buf<P::Mr>,
    info: [u8; INFO_LEN],
) -> Result<(), String> {
    send.write(&info)?;
    id.post_send(
        2,
        send.addr(),
        INFO_LEN as u32,
        &send.mr,
        SendFlags::SIGNALED,
    )
    .map_err(|e| format!("{side}: post_send: {e:?}"))?;
    check_wc(side, "send", send_comp(id))?;
    Ok(())
}

/// Waits for the receive posted in `recv`, reads it and posts the next one. `Ok(None)`: the
/// receive was flushed, the peer disconnected.
pub(crate) fn recv_info<P: Dev>(
    id: &CmId<P>,
    side: &str,
    recv: &Buf<P::Mr>,
) -> Result<Option<[u8; INFO_LEN]>, String> {
    let wc = recv_comp(id).map_err(|e| format!("{side}: recv: {e:?}"))?;
    if wc.status == WcStatus::WrFlushErr {
        return Ok(None);
    }
    if wc.status != WcStatus::Success {
        return Err(format!("{side}: recv completion error {:?}", wc.status));
    }
    if wc.opcode != WcOpcode::Recv || wc.byte_len as usize != INFO_LEN {
        // rping: "Received bogus data"
        return Err(format!(
            "{side}: received bogus data: {:?} of {} bytes",
            wc.opcode, wc.byte_len
        ));
    }
    let mut m = [0u8; INFO_LEN];
    m.copy_from_slice(&recv.read(INFO_LEN)?);
    id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
        .map_err(|e| format!("{side}: post_recv: {e:?}"))?;
    Ok(Some(m))
}

/// What a server run did.
#[derive(Debug, Default)]
pub(crate) struct Served {
    pub(crate) pings: u32,
    /// The last ping's length.
    pub(crate) len: u32,
    /// From the first advertisement to the last "go ahead".
    pub(crate) elapsed: Duration,
}

/// The server side on a connected id (rping's `rping_test_server`): pings until the client
/// disconnects.
pub(crate) fn server_pings<P: Dev>(
    conn: &CmId<P>,
    o: &Options,
    recv: &Buf<P::Mr>,
    send: &Buf<P::Mr>,
    rdma: &Buf<P::Mr>,
) -> Result<Served, String> {
    let mut s = Served::default();
    let mut t0 = None;
    loop {
        let Some(adv) = recv_info(conn, "server", recv)? else {
            return Ok(s);
        };
        let (addr, rkey, len) = decode_info(&adv);
        if srd(o) && (addr, rkey, len) == (0, 0, 0) {
            // the SRD client's end of the run
            return Ok(s);
        }
        let t0 = *t0.get_or_insert_with(Instant::now);
        if o.debug {
            println!("server: received source adv: rkey {rkey:#x} addr {addr:#x} len {len}");
        }
        if len == 0 || len as usize > RPING_BUFSIZE {
            return Err(format!(
                "server: the client advertised {len} bytes (this server's buffer holds 1 to \
                 {RPING_BUFSIZE})"
            ));
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
        .map_err(|e| format!("server: post_read: {e:?}"))?;
        check_wc("server", "rdma read", send_comp(conn))?;
        let data = rdma.read(len as usize)?;
        if o.debug || (o.verbose && o.server) {
            println!("server ping data: {}", as_text(&data));
        }
        if o.validate {
            let want = pattern(s.pings, len as usize);
            if data != want {
                return Err(format!(
                    "server: data mismatch in ping {}: read {:?}, rping's pattern is {:?}",
                    s.pings,
                    as_text(&data),
                    as_text(&want)
                ));
            }
        }
        // "go ahead": the client may advertise its sink (rping's server sends its send
        // buffer, which it never fills in)
        send_info(conn, "server", send, [0u8; INFO_LEN])?;

        let Some(adv) = recv_info(conn, "server", recv)? else {
            return Err(format!(
                "server: the client disconnected in ping {} (before its sink advertisement)",
                s.pings
            ));
        };
        let (addr, rkey, sink_len) = decode_info(&adv);
        if o.debug {
            println!("server: received sink adv: rkey {rkey:#x} addr {addr:#x} len {sink_len}");
        }
        // as rping: the string and its NUL
        let wlen = data
            .iter()
            .position(|&c| c == 0)
            .map_or(len, |n| n as u32 + 1);
        conn.post_write(
            4,
            rdma.addr(),
            wlen,
            &rdma.mr,
            SendFlags::SIGNALED,
            addr,
            rkey,
        )
        .map_err(|e| format!("server: post_write: {e:?}"))?;
        check_wc("server", "rdma write", send_comp(conn))?;
        // "go ahead": the data is in the client's sink
        send_info(conn, "server", send, [0u8; INFO_LEN])?;
        s.pings += 1;
        s.len = len;
        s.elapsed = t0.elapsed();
    }
}

/// The server thread: get_request, buffers, accept, pings until the client disconnects,
/// disconnect.
pub(crate) fn server<P: Dev>(listen: &CmId<P>, o: &Options) -> Result<Served, String> {
    let conn = listen
        .get_request()
        .map_err(|e| format!("server: get_request: {e:?}"))?;
    let r = (|| {
        let recv = Buf::new(&conn, INFO_LEN, |m| conn.reg_msgs(m))?;
        let send = Buf::new(&conn, INFO_LEN, |m| conn.reg_msgs(m))?;
        let rdma = Buf::new(&conn, RPING_BUFSIZE, |m| conn.reg_msgs(m))?;
        let mut accepted = false;
        let r = (|| {
            conn.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
                .map_err(|e| format!("server: post_recv: {e:?}"))?;
            conn.accept(Some(&conn_param()))
                .map_err(|e| format!("server: accept: {e:?}"))?;
            accepted = true;
            server_pings(&conn, o, &recv, &send, &rdma)
        })();
        if accepted {
            // answers the client's DREQ (or sends ours after an error); an id that never
            // connected has nothing to disconnect: the call would wait
            conn.disconnect().ok();
        }
        for b in [recv, send, rdma] {
            b.free(&conn);
        }
        r
    })();
    report_waits(&conn, "server", o);
    conn.destroy_ep();
    r
}

/// With -d: how the completion waits went (event mode sleeps on the channels).
fn report_waits<P: Dev>(id: &CmId<P>, side: &str, o: &Options) {
    if o.debug {
        eprintln!(
            "rping: {side}: {} mode, {} completion waits slept on a completion channel",
            if o.events { "event" } else { "poll" },
            id.cm().stats().comp_channel_sleeps
        );
        let st = id.cm().stats();
        eprintln!(
            "rping: {side}: connection manager: {} messages sent ({} retransmitted), {} \
             received, {} bad",
            st.mads_sent, st.retransmits, st.mads_received, st.bad_mads
        );
    }
}

/// What a client run did.
#[derive(Debug, Default)]
pub(crate) struct Pinged {
    pub(crate) pings: u32,
    /// From the first advertisement to the last comparison.
    pub(crate) elapsed: Duration,
}

/// The client side on a connected id (rping's `rping_test_client`): `count` pings (0:
/// forever), each compared; stops at the first mismatch.
pub(crate) fn client_pings<P: Dev>(
    id: &CmId<P>,
    o: &Options,
    recv: &Buf<P::Mr>,
    send: &Buf<P::Mr>,
    start: &Buf<P::Mr>,
    sink: &Buf<P::Mr>,
) -> Result<Pinged, String> {
    let t0 = Instant::now();
    let mut ping = 0;
    while o.count == 0 || ping < o.count {
        let src = pattern(ping, o.size);
        start.write(&src)?;
        sink.write(&vec![0u8; o.size])?;
        send_info(
            id,
            "client",
            send,
            encode_info(start.addr(), start.mr.rkey(), o.size as u32),
        )?;
        if recv_info(id, "client", recv)?.is_none() {
            return Err(format!(
                "client: the server disconnected in ping {ping} (before its go-ahead)"
            ));
        }
        send_info(
            id,
            "client",
            send,
            encode_info(sink.addr(), sink.mr.rkey(), o.size as u32),
        )?;
        if recv_info(id, "client", recv)?.is_none() {
            return Err(format!(
                "client: the server disconnected in ping {ping} (before its write)"
            ));
        }
        let got = sink.read(o.size)?;
        if got != src {
            return Err(format!(
                "client: data mismatch in ping {ping}: sent {:?} got {:?}",
                as_text(&src),
                as_text(&got)
            ));
        }
        if o.verbose {
            println!("ping data: {}", as_text(&got));
        }
        ping += 1;
    }
    Ok(Pinged {
        pings: ping,
        elapsed: t0.elapsed(),
    })
}

/// The client thread: buffers, connect, pings, disconnect.
pub(crate) fn client<P: Dev>(id: &CmId<P>, o: &Options) -> Result<Pinged, String> {
    let recv = Buf::new(id, INFO_LEN, |m| id.reg_msgs(m))?;
    let send = Buf::new(id, INFO_LEN, |m| id.reg_msgs(m))?;
    let start = Buf::new(id, o.size, |m| id.reg_read(m))?;
    let sink = Buf::new(id, o.size, |m| id.reg_write(m))?;
    let r = (|| {
        id.post_recv(1, recv.addr(), INFO_LEN as u32, &recv.mr)
            .map_err(|e| format!("client: post_recv: {e:?}"))?;
        id.connect(Some(&conn_param()))
            .map_err(|e| format!("client: connect: {e:?}"))?;
        let r = client_pings(id, o, &recv, &send, &start, &sink);
        if r.is_ok() && srd(o) {
            send_info(id, "client", &send, encode_info(0, 0, 0))?;
        }
        id.disconnect().ok();
        r
    })();
    for b in [recv, send, start, sink] {
        b.free(id);
    }
    report_waits(id, "client", o);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_matches_rping() {
        assert_eq!(&pattern(0, 26), b"rdma-ping-0: ABCDEFGHIJKL\0");
        assert_eq!(&pattern(1, 20), b"rdma-ping-1: BCDEFG\0");
        // letters wrap from 'z' to 'A'; the start letter advances one per ping and wraps too
        assert_eq!(pattern(57, 18)[14..], *b"zAB\0");
        assert_eq!(pattern(58, 18)[14..], *b"ABC\0");
        assert_eq!(pattern(3, 64).len(), 64);
    }

    #[test]
    fn info_round_trip() {
        let m = encode_info(0x1122_3344_5566_7788, 0xaabb_ccdd, 100);
        // network byte order, as `struct rping_rdma_info`
        assert_eq!(
            m,
            [
                0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0xaa, 0xbb, 0xcc, 0xdd, 0, 0, 0,
                100
            ]
        );
        assert_eq!(decode_info(&m), (0x1122_3344_5566_7788, 0xaabb_ccdd, 100));
    }
}

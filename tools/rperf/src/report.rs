//! Output: perftest's banner and tables, or one JSON object per size.

use std::fmt::Write as _;

use verbs::Gid;

use crate::cli::Test;
use crate::stats::{BwStats, LatStats};

/// perftest's separator line.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

/// What the banner says about a run's parameters.
pub struct RunInfo {
    /// The test.
    pub test: Test,
    /// Send queue depth (1 for latency tests, as perftest).
    pub tx_depth: u32,
    /// Completion moderation (bandwidth).
    pub cq_mod: u32,
    /// Inline threshold.
    pub inline: u32,
    /// Outstanding READs / atomics.
    pub rd_atomic: u8,
    /// Path MTU in bytes.
    pub mtu: u32,
    /// QPs (one per thread).
    pub qps: u32,
    /// `embedded`, `client` or `server` (JSON's `mode`).
    pub mode: &'static str,
}

/// One end's address line of the banner.
#[derive(Clone, Copy, Debug)]
pub struct Side {
    /// QP number, if known here.
    pub qpn: Option<u32>,
    /// Initial send PSN, if known here.
    pub psn: Option<u32>,
    /// The buffer's rkey.
    pub rkey: u32,
    /// The buffer's device address.
    pub vaddr: u64,
    /// The port's GID.
    pub gid: Gid,
}

/// What the banner shows besides the run parameters.
pub struct BannerInfo<'a> {
    /// The mode line.
    pub mode: &'a str,
    /// The device line.
    pub device: &'a str,
    /// Firmware version.
    pub fw: (u16, u16, u16),
    /// This end.
    pub local: Side,
    /// The other end.
    pub remote: Side,
    /// The QPs are EFA's SRD (reliable datagram) rather than ConnectX's RC.
    pub srd: bool,
}

/// perftest's way of printing a GID: 16 decimal bytes.
pub fn gid(g: &Gid) -> String {
    g.0.iter()
        .map(|b| format!("{b:02}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn address(e: &Side, who: &str) -> String {
    let mut s = format!(" {who} address:");
    if let Some(q) = e.qpn {
        let _ = write!(s, " QPN {q:#06x}");
    }
    if let Some(p) = e.psn {
        let _ = write!(s, " PSN {p:#08x}");
    }
    let _ = writeln!(
        s,
        " RKey {:#08x} VAddr {:#016x}\n GID: {}",
        e.rkey,
        e.vaddr,
        gid(&e.gid)
    );
    s
}

/// The banner printed before a test's table.
pub fn banner(info: &RunInfo, bi: &BannerInfo<'_>) -> String {
    let (maj, min, sub) = bi.fw;
    let mut b = String::new();
    let _ = writeln!(b, "{RULE}");
    let _ = writeln!(b, "{:>20}{}", "", info.test.title());
    let _ = writeln!(b, " Mode            : {}", bi.mode);
    let (transport, connection) = if bi.srd { ("EFA", "SRD") } else { ("IB", "RC") };
    let _ = writeln!(
        b,
        " Device          : {} (fw {maj}.{min}.{sub})\tTransport type : {transport}",
        bi.device
    );
    let _ = writeln!(
        b,
        " Number of qps   : {}\t\tConnection type : {connection}",
        info.qps
    );
    if info.test.is_lat() {
        let _ = writeln!(b, " TX depth        : 1");
    } else {
        let _ = writeln!(
            b,
            " TX depth        : {}\t\tCQ Moderation  : {}",
            info.tx_depth, info.cq_mod
        );
    }
    let _ = writeln!(
        b,
        " Mtu             : {}[B]\tLink type      : Ethernet",
        info.mtu
    );
    match info.test {
        Test::ReadLat | Test::ReadBw | Test::AtomicLat => {
            let _ = writeln!(b, " Outstand reads  : {}", info.rd_atomic);
        }
        _ => {
            let _ = writeln!(b, " Max inline data : {}[B]", info.inline);
        }
    }
    let _ = writeln!(b, " Timing          : wall clock (std::time::Instant)");
    let _ = writeln!(b, "{RULE}");
    b.push_str(&address(&bi.local, "local"));
    b.push_str(&address(&bi.remote, "remote"));
    let _ = write!(b, "{RULE}");
    b
}

/// Latency table columns: header and width.
const LAT_COLS: [(&str, usize); 9] = [
    ("#bytes", 11),
    ("#iterations", 12),
    ("t_min[usec]", 14),
    ("t_max[usec]", 14),
    ("t_typical[usec]", 17),
    ("t_avg[usec]", 14),
    ("t_stdev[usec]", 16),
    ("99% percentile[usec]", 23),
    ("99.9% percentile[usec]", 25),
];

/// Bandwidth table columns.
const BW_COLS: [(&str, usize); 5] = [
    ("#bytes", 11),
    ("#iterations", 14),
    ("BW peak[MB/sec]", 19),
    ("BW average[MB/sec]", 22),
    ("MsgRate[Mpps]", 17),
];

/// The table header of `test`.
pub fn header(test: Test) -> String {
    let cols: &[(&str, usize)] = if test.is_lat() { &LAT_COLS } else { &BW_COLS };
    let mut h = String::new();
    for (i, (name, w)) in cols.iter().enumerate() {
        if i < 2 {
            let _ = write!(h, " {name:<w$}", w = w - 1);
        } else {
            let _ = write!(h, "{name:>w$}");
        }
    }
    h
}

/// One latency table row.
pub fn lat_row(size: usize, iters: usize, s: &LatStats) -> String {
    let v = [s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999];
    let mut r = format!(
        " {size:<w0$} {iters:<w1$}",
        w0 = LAT_COLS[0].1 - 1,
        w1 = LAT_COLS[1].1 - 1
    );
    for (x, (_, w)) in v.iter().zip(&LAT_COLS[2..]) {
        let _ = write!(r, "{:>w$}", fig(*x, 2));
    }
    r
}

/// One bandwidth table row.
pub fn bw_row(size: usize, iters: usize, s: &BwStats) -> String {
    format!(
        " {size:<w0$} {iters:<w1$}{:>w2$}{:>w3$}{:>w4$}",
        fig(s.peak_mbs, 2),
        fig(s.avg_mbs, 2),
        fig(s.msg_rate_mpps, 6),
        w0 = BW_COLS[0].1 - 1,
        w1 = BW_COLS[1].1 - 1,
        w2 = BW_COLS[2].1,
        w3 = BW_COLS[3].1,
        w4 = BW_COLS[4].1,
    )
}

/// A table figure: `x` with `decimals` decimals as perftest prints it, unless that would show
/// a positive figure as zero (a few 2-byte messages on a loaded machine move a few kB/s): then
/// with three significant digits.
fn fig(x: f64, decimals: usize) -> String {
    let smallest = 0.5 * 10f64.powi(-(decimals as i32));
    if x > 0.0 && x < smallest {
        let d = (-x.log10()).floor() as usize + 3;
        format!("{x:.d$}")
    } else {
        format!("{x:.decimals$}")
    }
}

/// A JSON string literal.
fn js(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// A JSON number at full precision: the shortest decimal that reads back as the same `f64`,
/// so no figure rounds to zero (non-finite values, which the figures never are, become 0).
fn jn(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "0".into()
    }
}

fn json_common(info: &RunInfo, size: usize, iters: usize) -> String {
    format!(
        "{{\"test\":{},\"mode\":{},\"bytes\":{size},\"iterations\":{iters},\"qps\":{},\"mtu\":{},\"inline\":{}",
        js(info.test.name()),
        js(info.mode),
        info.qps,
        info.mtu,
        info.inline as usize >= size && info.test.can_inline()
    )
}

fn json_verified(verified: &Result<(), String>) -> String {
    match verified {
        Ok(()) => ",\"data_verified\":true}".into(),
        Err(e) => format!(",\"data_verified\":false,\"verify_error\":{}}}", js(e)),
    }
}

/// The server's line about one connection it served.
pub fn served(
    test: Test,
    size: u64,
    count: u64,
    peer: &str,
    verified: &Result<(), String>,
    json: bool,
) -> String {
    if json {
        format!(
            "{{\"test\":{},\"mode\":\"server\",\"bytes\":{size},\"iterations\":{count},\"peer\":{}{}",
            js(test.name()),
            js(peer),
            json_verified(verified)
        )
    } else {
        let v = match verified {
            Ok(()) => "data verified: yes".to_string(),
            Err(e) => format!("data verified: no ({e})"),
        };
        format!(
            " {:<10} {size:>9} B  {count:>9} iterations  from {peer:<21} {v}",
            test.name()
        )
    }
}

/// One latency result as a JSON object (one line).
pub fn lat_json(
    info: &RunInfo,
    size: usize,
    iters: usize,
    s: &LatStats,
    verified: &Result<(), String>,
) -> String {
    format!(
        "{},\"t_min_usec\":{},\"t_max_usec\":{},\"t_typical_usec\":{},\"t_avg_usec\":{},\"t_stdev_usec\":{},\"p99_usec\":{},\"p99_9_usec\":{}{}",
        json_common(info, size, iters),
        jn(s.min),
        jn(s.max),
        jn(s.typical),
        jn(s.avg),
        jn(s.stdev),
        jn(s.p99),
        jn(s.p999),
        json_verified(verified)
    )
}

/// One bandwidth result as a JSON object (one line).
pub fn bw_json(
    info: &RunInfo,
    size: usize,
    iters: usize,
    s: &BwStats,
    verified: &Result<(), String>,
) -> String {
    format!(
        "{},\"tx_depth\":{},\"cq_mod\":{},\"bw_peak_mb_s\":{},\"bw_avg_mb_s\":{},\"msg_rate_mpps\":{}{}",
        json_common(info, size, iters),
        info.tx_depth,
        info.cq_mod,
        jn(s.peak_mbs),
        jn(s.avg_mbs),
        jn(s.msg_rate_mpps),
        json_verified(verified)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_line_up_with_headers() {
        let l = LatStats {
            min: 1.0,
            max: 2.0,
            typical: 1.5,
            avg: 1.5,
            stdev: 0.1,
            p99: 1.9,
            p999: 2.0,
        };
        let h = header(Test::SendLat);
        let r = lat_row(2, 1000, &l);
        assert_eq!(h.len(), r.len(), "\n{h}\n{r}");
        assert!(h.contains("t_typical[usec]") && h.contains("99.9% percentile[usec]"));
        let b = BwStats {
            peak_mbs: 1000.0,
            avg_mbs: 900.0,
            msg_rate_mpps: 0.5,
        };
        let h = header(Test::WriteBw);
        let r = bw_row(65536, 1000, &b);
        assert_eq!(h.len(), r.len(), "\n{h}\n{r}");
        assert!(h.contains("BW average[MB/sec]"));
    }

    #[test]
    fn json_escapes() {
        assert_eq!(js("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
        assert_eq!(jn(f64::NAN), "0");
        assert_eq!(jn(0.25), "0.25");
        assert_eq!(jn(1.5e-7), "0.00000015");
        assert_eq!(jn(1.5e-7).parse::<f64>(), Ok(1.5e-7));
    }

    #[test]
    fn tiny_figures_keep_three_significant_digits() {
        assert_eq!(fig(1234.5678, 2), "1234.57");
        assert_eq!(fig(0.0, 2), "0.00");
        assert_eq!(fig(0.0019073, 2), "0.00191");
        assert_eq!(fig(0.000000123, 6), "0.000000123");
        let b = BwStats {
            peak_mbs: 0.0019,
            avg_mbs: 0.0017,
            msg_rate_mpps: 0.0000004,
        };
        let r = bw_row(2, 2, &b);
        assert_eq!(header(Test::ReadBw).len(), r.len(), "{r}");
        let figs: Vec<f64> = r.split_whitespace().map(|f| f.parse().unwrap()).collect();
        assert_eq!(figs, [2.0, 2.0, 0.0019, 0.0017, 0.0000004]);
    }
}

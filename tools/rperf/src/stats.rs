//! The figures perftest reports, computed the way perftest computes them.

/// perftest's "MB": 2^20 bytes.
pub const MB: f64 = 1_048_576.0;
/// Up to this many messages the peak is perftest's exact search over every window; above, the
/// windows are the whole run and those of a power-of-two length (O(n log n), not O(n^2)).
const EXACT_PEAK_MAX: usize = 5000;

/// Latency figures in µs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatStats {
    /// Fastest iteration.
    pub min: f64,
    /// Slowest iteration.
    pub max: f64,
    /// Median (perftest's `t_typical`).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation (population).
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// The `q` quantile of sorted `s` (nearest rank).
fn quantile(s: &[f64], q: f64) -> f64 {
    let rank = (q * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// Latency figures of `samples` (µs); `None` when there are none.
pub fn lat_stats(samples: &[f64]) -> Option<LatStats> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let avg = s.iter().sum::<f64>() / n;
    let var = s.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n;
    Some(LatStats {
        min: s[0],
        max: s[s.len() - 1],
        typical: s[s.len() / 2],
        avg,
        stdev: var.sqrt(),
        p99: quantile(&s, 0.99),
        p999: quantile(&s, 0.999),
    })
}

/// Bandwidth figures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BwStats {
    /// Best rate over any run of consecutive messages, MB/s.
    pub peak_mbs: f64,
    /// Bytes moved over the time from the first post to the last completion, MB/s.
    pub avg_mbs: f64,
    /// Messages per second, millions.
    pub msg_rate_mpps: f64,
}

/// Bandwidth figures for `size`-byte messages posted at `posted[i]` and completed (as far as
/// the requester could tell: at the signalled completion covering them) at `completed[i]`,
/// both in ns from one origin. `None` without messages.
///
/// perftest's peak: the smallest `(completed[j] - posted[i]) / (j - i + 1)` over `i <= j`,
/// i.e. the best per-message time of any run of consecutive messages.
pub fn bw_stats(size: usize, posted: &[u64], completed: &[u64]) -> Option<BwStats> {
    let n = posted.len().min(completed.len());
    if n == 0 {
        return None;
    }
    let total_ns = completed[n - 1].saturating_sub(posted[0]).max(1) as f64;
    let per_msg = |i: usize, j: usize| {
        completed[j].saturating_sub(posted[i]).max(1) as f64 / (j - i + 1) as f64
    };
    let mut best = f64::INFINITY;
    if n <= EXACT_PEAK_MAX {
        for i in 0..n {
            for j in i..n {
                best = best.min(per_msg(i, j));
            }
        }
    } else {
        // The whole run is one of the windows, so the peak is never below the average.
        best = per_msg(0, n - 1);
        let mut w = 1;
        while w <= n {
            for i in 0..=n - w {
                best = best.min(per_msg(i, i + w - 1));
            }
            w *= 2;
        }
    }
    let secs = total_ns / 1e9;
    let avg_mbs = (size as f64 * n as f64) / secs / MB;
    Some(BwStats {
        // The whole run is a window: the peak is at least the average (exactly, despite
        // rounding).
        peak_mbs: (size as f64 / (best / 1e9) / MB).max(avg_mbs),
        avg_mbs,
        msg_rate_mpps: n as f64 / secs / 1e6,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_figures() {
        let s: Vec<f64> = (1..=1000).map(f64::from).collect();
        let l = lat_stats(&s).unwrap();
        assert_eq!((l.min, l.max, l.typical), (1.0, 1000.0, 501.0));
        assert_eq!((l.p99, l.p999), (990.0, 999.0));
        assert!((l.avg - 500.5).abs() < 1e-9);
        assert!((l.stdev - 288.675).abs() < 1e-3);
        let one = lat_stats(&[3.0]).unwrap();
        assert_eq!((one.p99, one.stdev), (3.0, 0.0));
        assert!(lat_stats(&[]).is_none());
    }

    #[test]
    fn bandwidth_figures() {
        // 4 messages of 1 MiB, one per ms, each taking 2 ms.
        let posted = [0, 1_000_000, 2_000_000, 3_000_000];
        let completed = [2_000_000, 3_000_000, 4_000_000, 5_000_000];
        let b = bw_stats(1 << 20, &posted, &completed).unwrap();
        // 4 MiB in 5 ms = 800 MB/s; 0.8 M messages/s.
        assert!((b.avg_mbs - 800.0).abs() < 1e-6, "{b:?}");
        assert!((b.msg_rate_mpps - 0.0008).abs() < 1e-12, "{b:?}");
        // Best window: all four, 5 ms / 4 = 1.25 ms per MiB = 800 MB/s.
        assert!((b.peak_mbs - 800.0).abs() < 1e-6, "{b:?}");
        // The long-run search agrees with the exact one on a steady stream.
        let n = EXACT_PEAK_MAX + 3;
        let p: Vec<u64> = (0..n as u64).map(|i| i * 1000).collect();
        let c: Vec<u64> = p.iter().map(|t| t + 5000).collect();
        let long = bw_stats(1000, &p, &c).unwrap();
        let short = bw_stats(1000, &p[..1000], &c[..1000]).unwrap();
        assert!(long.peak_mbs >= short.peak_mbs * 0.99, "{long:?} {short:?}");
        assert!(long.peak_mbs >= long.avg_mbs, "{long:?}");
        assert!(bw_stats(1, &[], &[]).is_none());
    }
}

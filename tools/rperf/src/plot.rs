//! SVG plots, written by hand: a latency histogram per size for the latency tests, bandwidth
//! against message size for the bandwidth tests.

use std::fmt::Write as _;

use crate::stats::{BwStats, LatStats};

const W: f64 = 760.0;
const PANEL_H: f64 = 280.0;
const BW_H: f64 = 440.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const BINS: usize = 40;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A message size as perftest-style text: 512, 4K, 8M.
pub fn size_label(size: usize) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{}M", size >> 20)
    } else if size >= 1 << 10 && size.is_multiple_of(1 << 10) {
        format!("{}K", size >> 10)
    } else {
        size.to_string()
    }
}

/// A round step for about `n` ticks over `span`.
fn nice_step(span: f64, n: f64) -> f64 {
    let raw = (span / n).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn header(h: f64) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{h}\" viewBox=\"0 0 {W} {h}\" font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    )
}

/// One latency run to plot.
pub struct LatSeries<'a> {
    /// Message size.
    pub size: usize,
    /// Samples in µs.
    pub samples: &'a [f64],
    /// Their figures.
    pub stats: LatStats,
}

/// Histograms of the latency samples, one panel per size, stacked.
pub fn latency_histograms(test: &str, runs: &[LatSeries<'_>]) -> String {
    let h = PANEL_H * runs.len().max(1) as f64;
    let mut s = header(h);
    for (k, run) in runs.iter().enumerate() {
        let y0 = PANEL_H * k as f64;
        let st = &run.stats;
        // The body of the distribution up to the 99th percentile; the slowest 1% in one
        // overflow bar at the right, so that a few outliers do not squash the shape.
        let lo = st.min;
        let hi = if st.p99 > lo { st.p99 } else { lo + 1e-3 };
        let width = (hi - lo) / BINS as f64;
        let mut bins = [0usize; BINS];
        let mut over = 0usize;
        for &x in run.samples {
            if x > hi {
                over += 1;
            } else {
                bins[(((x - lo) / width) as usize).min(BINS - 1)] += 1;
            }
        }
        let maxc = bins.iter().copied().max().unwrap_or(1).max(over).max(1) as f64;
        // Plot area; the overflow bar sits in a slot right of it.
        let (px0, px1) = (LEFT, W - RIGHT - 60.0);
        let (py0, py1) = (y0 + TOP, y0 + PANEL_H - BOTTOM);
        let xs = |v: f64| px0 + (v - lo) / (hi - lo) * (px1 - px0);
        let ys = |c: f64| py1 - c / maxc * (py1 - py0);
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{} latency, {} B, {} iterations</text>",
            LEFT,
            y0 + 22.0,
            esc(test),
            run.size,
            run.samples.len()
        );
        for (i, &c) in bins.iter().enumerate() {
            if c == 0 {
                continue;
            }
            let x = xs(lo + width * i as f64);
            let y = ys(c as f64);
            let _ = writeln!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#4c78a8\" stroke=\"white\" stroke-width=\"0.5\"/>",
                ((px1 - px0) / BINS as f64).max(1.0),
                py1 - y
            );
        }
        // Axes and ticks.
        let _ = writeln!(
            s,
            "<path d=\"M{px0} {py0} V{py1} H{px1}\" fill=\"none\" stroke=\"black\"/>"
        );
        let step = nice_step(hi - lo, 6.0);
        let mut t = (lo / step).ceil() * step;
        while t <= hi + 1e-12 {
            let x = xs(t);
            let _ = writeln!(
                s,
                "<line x1=\"{x:.1}\" y1=\"{py1}\" x2=\"{x:.1}\" y2=\"{}\" stroke=\"black\"/><text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                py1 + 5.0,
                py1 + 18.0,
                fmt_tick(t, step)
            );
            t += step;
        }
        let cstep = nice_step(maxc, 4.0).max(1.0);
        let mut c = 0.0;
        while c <= maxc + 1e-9 {
            let y = ys(c);
            let _ = writeln!(
                s,
                "<line x1=\"{}\" y1=\"{y:.1}\" x2=\"{px0}\" y2=\"{y:.1}\" stroke=\"black\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{c}</text>",
                px0 - 5.0,
                px0 - 8.0,
                y + 4.0
            );
            c += cstep;
        }
        if over > 0 {
            let y = ys(over as f64);
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{y:.1}\" width=\"30\" height=\"{:.1}\" fill=\"#b0b0b0\"/><text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">&gt;99%</text>",
                px1 + 20.0,
                py1 - y,
                px1 + 35.0,
                py1 + 18.0
            );
        }
        axis_titles(
            &mut s,
            ((px0 + px1) / 2.0, py1 + 36.0, "latency [usec]"),
            (LEFT - 50.0, (py0 + py1) / 2.0, "iterations"),
        );
        // Typical (median) and average marks, and the figures as a legend.
        for (k, (v, name, color)) in [
            (st.typical, "typical", "#e45756"),
            (st.avg, "average", "#54a24b"),
        ]
        .into_iter()
        .enumerate()
        {
            if v <= hi {
                let x = xs(v);
                let _ = writeln!(
                    s,
                    "<line x1=\"{x:.1}\" y1=\"{py0}\" x2=\"{x:.1}\" y2=\"{py1}\" stroke=\"{color}\" stroke-dasharray=\"4 3\"/>"
                );
            }
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"{color}\">{name} {v:.2}</text>",
                px1,
                py0 + 4.0 + 15.0 * k as f64
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">99% {:.2}  99.9% {:.2}  max {:.2}</text>",
            px1,
            py0 + 34.0,
            st.p99,
            st.p999,
            st.max
        );
    }
    s.push_str("</svg>\n");
    s
}

fn fmt_tick(v: f64, step: f64) -> String {
    if step >= 1.0 {
        format!("{v:.0}")
    } else {
        let digits = (-step.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

/// A line of the bandwidth chart: colour, extra stroke attributes, and the figure it shows.
type Series = (&'static str, &'static str, fn(&BwStats) -> f64);

/// Bandwidth (average and peak) against message size, log2 x axis.
pub fn bandwidth_vs_size(test: &str, runs: &[(usize, BwStats)]) -> String {
    let mut s = header(BW_H);
    let (px0, px1) = (LEFT, W - RIGHT);
    let (py0, py1) = (TOP, BW_H - BOTTOM - 20.0);
    let _ = writeln!(
        s,
        "<text x=\"{LEFT}\" y=\"24\" font-size=\"14\" font-weight=\"bold\">{} bandwidth vs message size</text>",
        esc(test)
    );
    let lx: Vec<f64> = runs.iter().map(|(z, _)| (*z as f64).log2()).collect();
    let (xlo, xhi) = match (
        lx.iter().copied().reduce(f64::min),
        lx.iter().copied().reduce(f64::max),
    ) {
        (Some(a), Some(b)) if b > a => (a, b),
        (Some(a), _) => (a - 1.0, a + 1.0),
        _ => (0.0, 1.0),
    };
    let ymax = runs
        .iter()
        .map(|(_, b)| b.peak_mbs.max(b.avg_mbs))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let xs = |v: f64| px0 + (v - xlo) / (xhi - xlo) * (px1 - px0);
    let ys = |v: f64| py1 - v / ymax * (py1 - py0);
    let _ = writeln!(
        s,
        "<path d=\"M{px0} {py0} V{py1} H{px1}\" fill=\"none\" stroke=\"black\"/>"
    );
    let ystep = nice_step(ymax, 6.0);
    let mut y = 0.0;
    while y <= ymax {
        let yy = ys(y);
        let _ = writeln!(
            s,
            "<line x1=\"{px0}\" y1=\"{yy:.1}\" x2=\"{px1}\" y2=\"{yy:.1}\" stroke=\"#ddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            px0 - 8.0,
            yy + 4.0,
            fmt_tick(y, ystep)
        );
        y += ystep;
    }
    for ((z, _), x) in runs.iter().zip(&lx) {
        let xx = xs(*x);
        let _ = writeln!(
            s,
            "<line x1=\"{xx:.1}\" y1=\"{py1}\" x2=\"{xx:.1}\" y2=\"{}\" stroke=\"black\"/><text x=\"{xx:.1}\" y=\"{}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
            py1 + 5.0,
            py1 + 18.0,
            size_label(*z)
        );
    }
    axis_titles(
        &mut s,
        ((px0 + px1) / 2.0, py1 + 38.0, "message size [bytes]"),
        (18.0, (py0 + py1) / 2.0, "MB/sec (2^20 bytes)"),
    );
    let series: [Series; 2] = [
        ("#4c78a8", "", |b| b.avg_mbs),
        ("#f58518", " stroke-dasharray=\"5 4\"", |b| b.peak_mbs),
    ];
    for (color, dash, pick) in series {
        let pts: Vec<String> = runs
            .iter()
            .zip(&lx)
            .map(|((_, b), x)| format!("{:.1},{:.1}", xs(*x), ys(pick(b))))
            .collect();
        let _ = writeln!(
            s,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"{dash}/>",
            pts.join(" ")
        );
        for p in &pts {
            let (x, y) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                s,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"3\" fill=\"{color}\"/>"
            );
        }
    }
    // Legend.
    for (i, (name, color)) in [("BW average", "#4c78a8"), ("BW peak", "#f58518")]
        .iter()
        .enumerate()
    {
        let y = py0 + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"4\" fill=\"{color}\"/><text x=\"{}\" y=\"{}\">{name}</text>",
            px0 + 14.0,
            y - 4.0,
            px0 + 34.0,
            y + 2.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// The x axis title centred at `x` and the y axis title (turned) centred at `y`, each
/// `(x, y, text)`.
fn axis_titles(s: &mut String, x: (f64, f64, &str), y: (f64, f64, &str)) {
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
        x.0, x.1, x.2
    );
    let _ = writeln!(
        s,
        "<text transform=\"translate({},{}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        y.0, y.1, y.2
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn svgs_are_well_formed_enough() {
        let samples: Vec<f64> = (0..100).map(|i| 1.0 + f64::from(i % 10) * 0.1).collect();
        let stats = crate::stats::lat_stats(&samples).unwrap();
        let svg = latency_histograms(
            "send_lat",
            &[LatSeries {
                size: 2,
                samples: &samples,
                stats,
            }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<svg").count(), 1);
        assert!(svg.contains("send_lat latency, 2 B, 100 iterations"));
        let b = BwStats {
            peak_mbs: 10.0,
            avg_mbs: 9.0,
            msg_rate_mpps: 1.0,
        };
        let svg = bandwidth_vs_size("write_bw", &[(2, b), (1 << 20, b), (8 << 20, b)]);
        assert!(svg.contains(">1M<") && svg.contains(">8M<") && svg.contains("<polyline"));
        let one = bandwidth_vs_size("write_bw", &[(65536, b)]);
        assert!(one.contains(">64K<"));
        assert_eq!(size_label(3000), "3000");
    }
}

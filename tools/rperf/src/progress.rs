//! A progress bar on stderr: only when stderr is a terminal, and only once the run has taken
//! more than two seconds (short runs print nothing extra).

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// Runs shorter than this show no bar.
const SHOW_AFTER: Duration = Duration::from_secs(2);
/// Least time between two redraws.
const REDRAW: Duration = Duration::from_millis(100);
/// Width of the bar in characters.
const WIDTH: usize = 30;

/// Progress over units of work (one unit: one test at one size), each with a weight (its
/// expected share of the time).
pub struct Progress {
    enabled: bool,
    start: Instant,
    last_draw: Option<Instant>,
    drawn: bool,
    weights: Vec<f64>,
    total: f64,
    /// Units finished.
    done: usize,
    /// Their weight.
    done_weight: f64,
    label: String,
}

impl Progress {
    /// A bar over units of the given weights, drawn only if stderr is a terminal.
    pub fn new(weights: Vec<f64>) -> Progress {
        Progress::with_terminal(weights, std::io::stderr().is_terminal())
    }

    /// A bar that draws (or not) whatever stderr is.
    pub fn with_terminal(weights: Vec<f64>, enabled: bool) -> Progress {
        let total = weights.iter().sum::<f64>();
        Progress {
            enabled,
            start: Instant::now(),
            last_draw: None,
            drawn: false,
            weights,
            total: if total > 0.0 { total } else { 1.0 },
            done: 0,
            done_weight: 0.0,
            label: String::new(),
        }
    }

    /// Starts the next unit.
    pub fn begin(&mut self, label: String) {
        self.label = label;
    }

    /// The current unit is `frac` (0..=1) done; `now` is a time the caller just took.
    #[inline]
    pub fn update(&mut self, now: Instant, frac: f64) {
        if !self.enabled || now.duration_since(self.start) < SHOW_AFTER {
            return;
        }
        if self
            .last_draw
            .is_some_and(|t| now.duration_since(t) < REDRAW)
        {
            return;
        }
        self.last_draw = Some(now);
        let line = self.line(now, frac);
        let mut e = std::io::stderr().lock();
        // A progress bar that cannot be drawn is not worth failing the run for.
        let _ = write!(e, "\r{line}\x1b[K");
        let _ = e.flush();
        self.drawn = true;
    }

    /// The bar's text for `frac` of the current unit.
    fn line(&self, now: Instant, frac: f64) -> String {
        let current = self.weights.get(self.done).copied().unwrap_or(0.0);
        let all =
            ((self.done_weight + current * frac.clamp(0.0, 1.0)) / self.total).clamp(0.0, 1.0);
        let full = (all * WIDTH as f64).round() as usize;
        format!(
            "[{}{}] {:3.0}% {}  {:.1} s",
            "#".repeat(full),
            "-".repeat(WIDTH - full),
            all * 100.0,
            self.label,
            now.duration_since(self.start).as_secs_f64()
        )
    }

    /// The current unit is done.
    pub fn end_unit(&mut self) {
        if let Some(w) = self.weights.get(self.done) {
            self.done_weight += w;
            self.done += 1;
        }
    }

    /// Erases the bar (before printing results on the same terminal).
    pub fn clear(&mut self) {
        if self.drawn {
            let mut e = std::io::stderr().lock();
            let _ = write!(e, "\r\x1b[K");
            let _ = e.flush();
            self.drawn = false;
            self.last_draw = None;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bar_text() {
        let mut p = Progress::with_terminal(vec![1.0; 4], false);
        p.begin("write_bw 64 B".into());
        p.end_unit();
        let l = p.line(p.start, 0.5);
        assert!(l.contains(" 38% write_bw 64 B"), "{l}");
        assert_eq!(l.matches('#').count(), 11);
        // Disabled: never draws.
        p.update(p.start + Duration::from_secs(5), 1.0);
        assert!(!p.drawn);
    }
}

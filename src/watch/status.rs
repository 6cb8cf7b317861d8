//! The live status line on stderr (only when it is a terminal and not `--quiet`): current total,
//! peak, slope so far, warm-up and the verdict so far, redrawn in place every half second and only
//! between whole lines of the command's own output.

use crate::analysis::leak::analyze;

use crate::record::leak::{LeakParams, MemorySeries};
use crate::record::watch::TreeSample;
use crate::units::bytes;
use crate::watch::passthrough::Console;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The watched tree so far: what the status line shows, updated by the sampling loop (a push is
/// a few assignments).
#[derive(Debug, Default)]
pub struct TreeSoFar {
    pub rss: u64,
    pub peak: u64,
    pub step: Option<u64>,
    pub processes: usize,
    /// (seconds, summed RSS) of every sample, for the verdict so far.
    pub times: Vec<f64>,
    pub values: Vec<f64>,
}

impl TreeSoFar {
    pub fn push(&mut self, s: &TreeSample) {
        self.rss = s.total.rss_bytes;
        self.peak = self.peak.max(s.total.rss_bytes);
        self.step = s.step;
        self.processes = s.total.processes;
        self.times.push(s.time_s);
        self.values.push(s.total.rss_bytes as f64);
    }
}

pub struct StatusLine {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<()>,
}

impl StatusLine {
    pub fn start(live: Arc<Mutex<TreeSoFar>>, console: Arc<Console>) -> StatusLine {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut tick = 0u64;
            let mut verdict = String::from("verdict so far: too few samples");
            while !s.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(500));
                tick += 1;
                let (text, series) = {
                    let l = live.lock().unwrap_or_else(|e| e.into_inner());
                    let series = (tick % 4 == 0 && l.values.len() >= 12).then(|| MemorySeries {
                        steps: (0..l.values.len() as u64).collect(),
                        values: l.values.clone(),
                        seconds: Some(l.times.clone()),
                        label: "summed RSS".into(),
                        unit: None,
                        relative: false,
                    });
                    (line(&l), series)
                };
                if let Some(series) = series {
                    let r = analyze(&series, &LeakParams::default());
                    let warm = match r.warmup_end_step {
                        Some(w) => format!("warm-up ended at sample {w}"),
                        None => "warm-up: none found".into(),
                    };
                    verdict = format!("{warm}, verdict so far: {}", r.verdict.as_str());
                }
                draw(&console, &format!("{text} | {verdict}"));
            }
            let mut st = console.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.drawn {
                let _ = std::io::stderr().write_all(b"\r\x1b[K");
                st.drawn = false;
            }
        });
        StatusLine { stop, handle }
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.handle.join();
    }
}

fn line(l: &TreeSoFar) -> String {
    let slope = match (
        l.times.first(),
        l.times.last(),
        l.values.first(),
        l.values.last(),
    ) {
        (Some(t0), Some(t1), Some(v0), Some(v1)) if t1 > t0 => {
            format!("{}/s", bytes((v1 - v0) / (t1 - t0)))
        }
        _ => "–".into(),
    };
    let step = l.step.map_or(String::new(), |s| format!("step {s} | "));
    format!(
        "memscope watch: {step}RSS {} in {} process(es) | peak {} | slope {slope}",
        bytes(l.rss as f64),
        l.processes,
        bytes(l.peak as f64)
    )
}

fn draw(console: &Console, text: &str) {
    let mut st = console.state.lock().unwrap_or_else(|e| e.into_inner());
    if !(st.at_line_start[0] && st.at_line_start[1]) {
        return; // the command is mid-line: never split its line
    }
    let width = terminal_width().saturating_sub(1).max(20);
    let shown: String = text.chars().take(width).collect();
    let mut e = std::io::stderr().lock();
    let _ = write!(e, "\r\x1b[K{shown}");
    let _ = e.flush();
    st.drawn = true;
}

fn terminal_width() -> usize {
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0
    {
        ws.ws_col as usize
    } else {
        100
    }
}

//! What a sweep shows while it runs (on stderr): a progress bar on a terminal, else one line per
//! finished configuration.

use crate::record::sweep_row::Row;
use crate::sweep::spawn::WorkerProgress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::Ordering;

/// Progress: an indicatif bar on a terminal, one line per finished configuration otherwise.
pub struct SweepProgress {
    bar: Option<ProgressBar>,
    lines: bool,
    total: usize,
}

impl SweepProgress {
    pub fn new(total: usize, quiet: bool) -> SweepProgress {
        let tty = std::io::stderr().is_terminal();
        let bar = (!quiet && tty).then(|| {
            let bar = ProgressBar::new(total as u64);
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{bar:30}] {pos}/{len} configurations · {elapsed} elapsed, ETA {eta} · {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            bar
        });
        SweepProgress {
            bar,
            lines: !quiet && !tty,
            total,
        }
    }

    pub fn current(&self, label: &str, live: &WorkerProgress) {
        if let Some(b) = &self.bar {
            let (d, t) = (
                live.done.load(Ordering::Relaxed),
                live.total.load(Ordering::Relaxed),
            );
            b.set_message(format!("{label} · step {d}/{t}"));
            b.tick();
        }
    }

    pub fn finished(&self, row: &Row) {
        let line = format!(
            "[{}/{}] {:<7} {}{}",
            row.index + 1,
            self.total,
            row.status.name(),
            row.label(),
            row.reason
                .as_ref()
                .map_or(String::new(), |r| format!(" — {r}"))
        );
        if let Some(b) = &self.bar {
            b.println(line);
            b.inc(1);
        } else if self.lines {
            eprintln!("{line}");
        }
    }

    /// A status line (a Slurm sweep's queued / running / done): the bar's message on a terminal,
    /// else a line of its own.
    pub fn status(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
            b.tick();
        } else if self.lines {
            eprintln!("{msg}");
        }
    }

    pub fn done(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

//! A progress bar for long runs, drawn from its own thread by polling a step counter, so the
//! measurement loop never prints. Only shown when stderr is a terminal.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Progress {
    pub steps: Arc<AtomicUsize>,
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Progress {
    pub fn start(total: usize, label: String, quiet: bool) -> Self {
        let steps = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let handle = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let (steps, done) = (steps.clone(), done.clone());
            std::thread::spawn(move || {
                let bar = ProgressBar::new(total as u64);
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {msg} [{bar:30}] step {pos}/{len} · {elapsed} elapsed, ETA {eta}")
                        .unwrap_or_else(|_| ProgressStyle::default_bar())
                        .progress_chars("=> "),
                );
                bar.set_message(label);
                while !done.load(Ordering::Relaxed) {
                    bar.set_position(steps.load(Ordering::Relaxed) as u64);
                    bar.tick();
                    std::thread::sleep(Duration::from_millis(200));
                }
                bar.finish_and_clear();
            })
        });
        Self {
            steps,
            done,
            handle,
        }
    }

    pub fn finish(mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

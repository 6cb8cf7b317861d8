//! The report's roofline section: one chart per `roofline --json` input
//! (`report/roofline_chart.rs`), the step's MFU and biggest loss under it.

use super::svg::{esc, figure};
use crate::record::roofline::RooflineFile;
use crate::report::roofline_chart;

/// The section's HTML; empty when no roofline file was given.
pub fn section(inputs: &[(usize, &RooflineFile)]) -> anyhow::Result<String> {
    let mut h = String::new();
    for (i, r) in inputs {
        let svg = roofline_chart::svg(&r.run, &r.sections)?;
        let mut caption = format!(
            "#{}: forward ● and backward ▲ per op kind, at their minimum-bytes intensity.",
            i + 1
        );
        for s in &r.sections {
            caption += &format!(
                " {}: {:.1} GFLOP/s, MFU {:.1}%. {}",
                esc(&s.name),
                s.step.achieved_gflops,
                s.step.mfu_pct,
                esc(&s.biggest_loss)
            );
        }
        let missing = roofline_chart::not_drawn(&r.sections);
        if !missing.is_empty() {
            caption += &format!(
                " Not drawn (no FLOPs or no time): {}.",
                esc(&missing.join(", "))
            );
        }
        h += &figure(
            &format!("roofline-{}", i + 1),
            &format!("roofline of input #{}", i + 1),
            &svg,
            &caption,
        );
    }
    Ok(h)
}

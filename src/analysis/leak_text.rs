//! Plain-language phrasing of a leak verdict (the one sentence stated first) and of the RSS vs heap
//! cross-check. Pure: reads a finished [`LeakReport`], writes text.

use crate::record::leak::{ApproachFit, LeakReport, Verdict};
use crate::units::{fmt_bytes, fmt_bytes_in, fmt_range_in, Unit};

/// Everything `leak_text` needs to phrase the verdict that is not in the report itself.
pub(crate) struct Context {
    pub reason: Option<String>,
    pub falling: bool,
    /// PLATEAU decided by the fitted approach (a warm-up still settling), not by a flat tail.
    pub settling: bool,
}

/// What the series measured, as the subject of a sentence ("memory", "heap live", "RSS").
pub fn subject(label: &str) -> &str {
    match label.trim() {
        "" | "value" => "memory",
        l => l,
    }
}

/// A rate per step: "1.00 MiB/step".
pub fn rate(b: f64) -> String {
    format!("{}/step", fmt_bytes(b))
}

/// A rate per step in the log's unit when it is decimal: "1.00 MB/step (977 KiB/step)".
pub fn rate_in(b: f64, unit: Option<Unit>) -> String {
    match unit.filter(|u| matches!(u, Unit::KB | Unit::MB | Unit::GB | Unit::TB)) {
        Some(u) => {
            let s = fmt_bytes_in(b, Some(u));
            match s.split_once(" (") {
                Some((a, rest)) => format!("{a}/step ({}/step)", rest.trim_end_matches(')')),
                None => format!("{s}/step"),
            }
        }
        None => rate(b),
    }
}

/// Formats a count with thousands separators: 12345 -> "12,345".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

pub(crate) fn sentence(r: &LeakReport, ctx: &Context) -> String {
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let fmt_range = |lo: f64, hi: f64| fmt_range_in(lo, hi, r.unit);
    let rate = |b: f64| rate_in(b, r.unit);
    let relative_subject = format!("{} (relative to its baseline)", subject(&r.label));
    let subj = if r.relative {
        relative_subject.as_str()
    } else {
        subject(&r.label)
    };
    let last = r.last_step.unwrap_or(0);
    let range = r
        .plateau_min_bytes
        .zip(r.plateau_max_bytes)
        .map(|(lo, hi)| fmt_range(lo, hi));
    let slope = r.slope_bytes_per_step.unwrap_or(0.0);
    let conf = format!("{:.0}%", r.params.confidence * 100.0);
    let horizon = r.params.horizon_steps;
    let per_hour = |b: f64| {
        r.steps_per_hour
            .map_or(String::new(), |sph| format!(", {}/h", fmt_bytes(b * sph)))
    };
    // What the slope's interval still allows: the bound every verdict states.
    let bound = r.slope_ci_bytes_per_step.map(|c| c[1]);
    match r.verdict {
        Verdict::Plateau => {
            let stay = match (&range, ctx.falling) {
                (Some(rg), false) => format!("stayed within {rg}"),
                (Some(rg), true) => {
                    format!(
                        "fell slowly ({} per 1,000 steps), staying within {rg}",
                        fmt_bytes(slope * 1000.0)
                    )
                }
                (None, _) => "stayed level".into(),
            };
            let mut s = match (r.warmup_end_step, r.warmup_growth_bytes) {
                (Some(w), Some(g)) => format!(
                    "No leak: {subj} grew {} during a warm-up that ended at step {w}, then {stay} for {} steps.",
                    fmt_bytes(g),
                    group(last.saturating_sub(w))
                ),
                _ => {
                    let from = r.tail_start_step.unwrap_or(0);
                    let why = if Some(from) == r.first_step {
                        "no warm-up growth found".to_string()
                    } else {
                        format!("from step {from}, where the warm-up cut fell")
                    };
                    format!("No leak: {subj} {stay} for the last {} steps ({why}).", group(last.saturating_sub(from)))
                }
            };
            match (ctx.settling, &r.approach, r.margin_plateau_bytes) {
                (true, Some(a), Some(dp)) => s.push_str(&format!(
                    " The warm-up is a saturating approach (time constant {:.0} steps) to {}{}, within {} of where it is now; what remains around it rules out more than that margin over the next {} steps.",
                    a.time_constant_steps,
                    fmt_bytes(a.level_bytes),
                    match a.level_ci_bytes {
                        [Some(lo), Some(hi)] => format!(" ({conf} CI {})", fmt_range(lo, hi)),
                        _ => String::new(),
                    },
                    fmt_bytes(dp),
                    group(horizon as u64)
                )),
                _ => {
                    if let (Some(b), Some(_)) = (bound, r.margin_plateau_bytes) {
                        if b < 0.0 {
                            // Said as it is: a falling series' interval ends below zero, not
                            // at a clamped 0 beside the interval printed elsewhere.
                            s.push_str(&format!(
                                " The slope's {conf} interval ends below zero, at {}: memory is falling, not growing.",
                                rate(b)
                            ));
                        }
                    }
                    if let (Some(b), Some(dp)) = (bound.filter(|b| *b >= 0.0), r.margin_plateau_bytes) {
                        s.push_str(&format!(
                            " The slope's {conf} interval ends at {}{}: less than {} of growth over the next {} steps.",
                            rate(b),
                            per_hour(b),
                            fmt_bytes(dp),
                            group(horizon as u64)
                        ));
                    }
                }
            }
            s
        }
        Verdict::Leak => {
            let from = r.tail_start_step.unwrap_or(0);
            let ci = r.slope_ci_bytes_per_step.map_or(String::new(), |c| {
                format!("; {conf} CI {} to {}", rate(c[0]), rate(c[1]))
            });
            let hour = r.growth_bytes_per_hour.map_or(String::new(), |h| {
                format!(", about {} per hour", fmt_bytes(h))
            });
            let after = match r.warmup_end_step {
                Some(w) => format!("after the warm-up that ended at step {w}"),
                None => format!("from step {from}"),
            };
            format!(
                "Leak: {subj} keeps growing by {} ({} per 1,000 steps{ci}{hour}) over the {} steps {after}.",
                rate(slope),
                fmt_bytes(slope * 1000.0),
                group(last.saturating_sub(from))
            )
        }
        Verdict::Decelerating => {
            let from = r.tail_start_step.unwrap_or(0);
            let level = match &r.approach {
                Some(ApproachFit {
                    level_bytes,
                    level_ci_bytes: [Some(lo), Some(hi)],
                    ..
                }) => format!(
                    " A saturating fit puts the level it approaches at {} ({conf} CI {}).",
                    fmt_bytes(*level_bytes),
                    fmt_range(*lo, *hi)
                ),
                _ => String::new(),
            };
            format!(
                "Growth is slowing but has not stopped: {subj} still grows {} over the last {} steps (first half {}, second half {}); run longer to see whether it levels off.{level}",
                rate(slope),
                group(last.saturating_sub(from)),
                rate(r.slope_first_half.unwrap_or(0.0)),
                rate(r.slope_second_half.unwrap_or(0.0))
            )
        }
        Verdict::Inconclusive => inconclusive(r, ctx, subj, bound, &per_hour),
    }
}

/// The INCONCLUSIVE sentence: why, the rate memory could still be growing at, what would settle it.
fn inconclusive(
    r: &LeakReport,
    ctx: &Context,
    subj: &str,
    bound: Option<f64>,
    per_hour: &dyn Fn(f64) -> String,
) -> String {
    let rate = |b: f64| rate_in(b, r.unit);
    let fmt_bytes = |b: f64| fmt_bytes_in(b, r.unit);
    let reason = ctx
        .reason
        .clone()
        .unwrap_or_else(|| "the data do not settle the question".into());
    let mut s = format!("Inconclusive: {reason}.");
    if let Some(b) = bound.filter(|b| *b > 0.0) {
        s.push_str(&format!(
            " {} could still be growing by up to {} ({} per 1,000 steps{}).",
            capitalize(subj),
            rate(b),
            fmt_bytes(b * 1000.0),
            per_hour(b)
        ));
    }
    if let Some(md) = r.min_detectable_bytes_per_step {
        s.push_str(&format!(
            " This run could detect a leak of {} or more",
            rate(md)
        ));
        match r.more_steps_needed {
            Some(k) => s.push_str(&format!(
                "; about {} more steps should settle it.",
                group(k)
            )),
            None => s.push('.'),
        }
    } else if let Some(k) = r.more_steps_needed {
        s.push_str(&format!(" About {} more steps are needed.", group(k)));
    }
    s
}

fn grows(r: &LeakReport) -> bool {
    matches!(r.verdict, Verdict::Leak | Verdict::Decelerating)
}

/// Upper-cases the first letter ("heap live grows" → "Heap live grows").
pub fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map_or(String::new(), |f| f.to_uppercase().chain(c).collect())
}

pub(crate) fn cross_check(heap: &LeakReport, rss: &LeakReport) -> Option<String> {
    cross_check_raw(heap, rss).map(|s| capitalize(&s))
}

fn cross_check_raw(heap: &LeakReport, rss: &LeakReport) -> Option<String> {
    let (h, o) = (subject(&heap.label), subject(&rss.label));
    let hs = heap.slope_bytes_per_step.unwrap_or(0.0);
    let os = rss.slope_bytes_per_step.unwrap_or(0.0);
    match (heap.verdict, rss.verdict) {
        (Verdict::Plateau, _) if grows(rss) => Some(format!(
            "{o} grows {} while {h} stays flat: allocator retention, not a leak (the allocator keeps pages it has freed).",
            rate(os)
        )),
        _ if grows(heap) && grows(rss) => {
            let which = if os > 1.1 * hs {
                format!("{o} grows faster ({} vs {}): the allocator also retains freed memory on top of the leak", rate(os), rate(hs))
            } else if hs > 1.1 * os {
                format!("{h} grows faster ({} vs {}): the allocator still reuses memory it holds, {o} will follow", rate(hs), rate(os))
            } else {
                format!("they grow at about the same rate ({} vs {}): the leak reaches the OS", rate(hs), rate(os))
            };
            Some(format!("Both {h} and {o} grow; {which}."))
        }
        (_, Verdict::Plateau) if grows(heap) => Some(format!(
            "{h} grows {} but {o} is flat so far: the allocator is reusing memory it already holds; {o} will grow once that is used up.",
            rate(hs)
        )),
        (Verdict::Inconclusive, _) if grows(rss) => Some(format!(
            "{o} grows {}, but the {h} verdict is inconclusive: run longer before blaming a leak rather than allocator retention.",
            rate(os)
        )),
        _ => None,
    }
}

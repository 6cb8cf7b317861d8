//! Calibration of the leak verdict (docs/reliability.md): the false-LEAK rate on plateau series and "no
//! leak series is ever PLATEAU", plus `#[ignore]`d tests that print the calibration tables
//! (`cargo test --release -- --ignored --nocapture print_`).

use super::tests::{ar1_plateau, exp_warmup, make, run, series, story, GIB, MIB};
use super::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// docs/reliability.md calibration: false LEAK on plateau series ≤ 1% (here over 200 seeded AR(1) series,
/// n = 300, φ from 0 to 0.95, σ 2–8 MiB, with and without a warm-up).
#[test]
fn calibration_false_leak_rate_on_plateaus() {
    let mut leaks = 0;
    let mut plateaus = 0;
    for seed in 0..200u64 {
        let phi = 0.95 * (seed % 20) as f64 / 19.0;
        let sigma = (2.0 + (seed % 7) as f64) * MIB;
        let mut s = ar1_plateau(1000 + seed, 300, 2.0 * GIB, sigma, phi);
        if seed % 2 == 0 {
            for (i, v) in s.values.iter_mut().enumerate() {
                *v -= GIB * (-(i as f64) / 12.0).exp();
            }
        }
        match run(&s).verdict {
            Verdict::Leak => leaks += 1,
            Verdict::Plateau => plateaus += 1,
            _ => {}
        }
    }
    eprintln!("calibration: {leaks}/200 false leak, {plateaus}/200 plateau");
    assert!(leaks <= 2, "false-leak rate {leaks}/200");
    assert!(plateaus >= 150, "only {plateaus}/200 plateaus");
}

/// No leak series is ever PLATEAU (several seeds each).
#[test]
fn calibration_leaks_are_never_plateau() {
    type Kind = (&'static str, fn(f64) -> f64, f64);
    let kinds: [Kind; 5] = [
        ("1 MiB/step", |t| GIB + MIB * t, 4.0),
        ("0.1 MiB/step", |t| 2.0 * GIB + 0.1 * MIB * t, 3.0),
        ("staircase", |t| GIB + 40.0 * MIB * (t / 20.0).floor(), 2.0),
        (
            "sawtooth + leak",
            |t| GIB + 0.2 * MIB * t + 200.0 * MIB * ((t as u64 % 13) as f64 / 12.0),
            2.0,
        ),
        (
            "log growth",
            |t| GIB + 300.0 * MIB * (1.0 + t / 5.0).ln(),
            2.0,
        ),
    ];
    for (name, f, sigma) in kinds {
        let mut verdicts = Vec::new();
        for seed in 0..10 {
            let r = run(&make(5000 + seed, 300, 1, sigma * MIB, f));
            assert_ne!(
                r.verdict,
                Verdict::Plateau,
                "{name} seed {seed}: {}",
                r.sentence
            );
            verdicts.push(r.verdict.as_str());
        }
        eprintln!("{name}: {verdicts:?}");
    }
}

/// Prints the slope accuracy of the leak detector (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn print_slope_accuracy() {
    for (b, sigma, n) in [
        (0.1, 2.0, 300),
        (0.1, 3.0, 300),
        (0.1, 2.0, 400),
        (1.0, 4.0, 300),
    ] {
        let mut errs = Vec::new();
        let mut verdicts = std::collections::BTreeMap::new();
        for seed in 0..100 {
            let r = run(&make(seed, n, 1, sigma * MIB, |t| 2.0 * GIB + b * MIB * t));
            *verdicts.entry(r.verdict.as_str()).or_insert(0) += 1;
            errs.push((r.slope_bytes_per_step.unwrap() / MIB / b - 1.0).abs());
        }
        errs.sort_by(f64::total_cmp);
        let within = errs.iter().filter(|e| **e < 0.1).count();
        eprintln!("b={b} sigma={sigma} n={n}: median err {:.3}, 90% {:.3}, within10% {within}/100 {verdicts:?}", errs[50], errs[90]);
    }
}

/// Prints verdict counts on AR(1) plateaus over a grid of n and φ, and on one-sided noise (run with
/// `--ignored --nocapture`; SIGMA_MIB sets the noise σ, default 4).
#[test]
#[ignore]
fn print_calibration_grid() {
    for n in [150usize, 300] {
        for phi in [0.0, 0.5, 0.8, 0.9, 0.95] {
            let mut counts = std::collections::BTreeMap::new();
            for seed in 0..300u64 {
                let s = ar1_plateau(
                    77 + seed,
                    n,
                    2.0 * GIB,
                    std::env::var("SIGMA_MIB")
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(4.0)
                        * MIB,
                    phi,
                );
                *counts.entry(run(&s).verdict.as_str()).or_insert(0) += 1;
            }
            eprintln!("n={n} phi={phi}: {counts:?}");
        }
        // One-sided noise: exponential transient allocations on top of the floor.
        let mut counts = std::collections::BTreeMap::new();
        for seed in 0..300u64 {
            let mut rng = StdRng::seed_from_u64(seed);
            let steps: Vec<u64> = (0..n as u64).collect();
            let values = steps
                .iter()
                .map(|_| 2.0 * GIB - 6.0 * MIB * (1.0 - rng.random::<f64>()).ln())
                .collect();
            *counts
                .entry(run(&series(steps, values)).verdict.as_str())
                .or_insert(0) += 1;
        }
        eprintln!("n={n} exp noise: {counts:?}");
    }
}

/// Prints the verdict sentence of each golden series (run with `--ignored --nocapture`).
#[test]
#[ignore]
fn print_sentences() {
    let cases: Vec<(&str, MemorySeries)> = vec![
        ("exp warm-up", exp_warmup(1)),
        (
            "linear warm-up",
            make(2, 300, 1, 3.0 * MIB, |t| {
                GIB + 1.5 * GIB * (t.min(60.0) / 60.0)
            }),
        ),
        ("flat", make(10, 300, 1, 4.0 * MIB, |_| 2.0 * GIB)),
        (
            "falling coarse",
            make(11, 25, 10, 20.0 * MIB, |t| {
                if t < 40.0 {
                    3.0 * GIB + 6.0 * GIB * t / 40.0
                } else {
                    9.0 * GIB - 0.5 * MIB * (t - 40.0)
                }
            }),
        ),
        (
            "cut mid warm-up",
            make(12, 25, 10, 20.0 * MIB, |t| {
                3.0 * GIB + 8.0 * GIB * (1.0 - (-t / 150.0).exp())
            }),
        ),
        ("leak 1", make(6, 300, 1, 4.0 * MIB, |t| GIB + MIB * t)),
        (
            "log growth",
            make(9, 300, 1, 2.0 * MIB, |t| {
                GIB + 300.0 * MIB * (1.0 + t / 5.0).ln()
            }),
        ),
        ("noisy short", make(16, 40, 1, 64.0 * MIB, |_| 4.0 * GIB)),
        ("story", story(13)),
    ];
    for (name, s) in cases {
        let r = run(&s);
        eprintln!(
            "{name}: [{}] {}\n   min detectable {:?} MiB/step, more steps {:?}",
            r.verdict.as_str(),
            r.sentence,
            r.min_detectable_bytes_per_step.map(|v| v / MIB),
            r.more_steps_needed
        );
    }
}

#[test]
#[ignore]
fn print_golden_robustness() {
    type Gen = Box<dyn Fn(u64) -> MemorySeries>;
    let gens: Vec<(&str, Gen)> = vec![
        ("exp warm-up", Box::new(exp_warmup)),
        (
            "linear warm-up",
            Box::new(|s| {
                make(s, 300, 1, 3.0 * MIB, |t| {
                    GIB + 1.5 * GIB * (t.min(60.0) / 60.0)
                })
            }),
        ),
        (
            "sawtooth",
            Box::new(|s| {
                make(s, 300, 1, 2.0 * MIB, |t| {
                    2.0 * GIB * (1.0 - (-t / 10.0).exp()).max(0.5)
                        + 300.0 * MIB * ((t as u64 % 17) as f64 / 16.0)
                })
            }),
        ),
        (
            "alloc steps",
            Box::new(|s| {
                make(s, 300, 1, 2.0 * MIB, |t| {
                    GIB + 256.0
                        * MIB
                        * [20.0, 45.0, 80.0, 110.0]
                            .iter()
                            .filter(|&&j| t >= j)
                            .count() as f64
                })
            }),
        ),
        (
            "flat",
            Box::new(|s| make(s, 300, 1, 4.0 * MIB, |_| 2.0 * GIB)),
        ),
        (
            "coarse falling",
            Box::new(|s| {
                make(s, 25, 10, 20.0 * MIB, |t| {
                    if t < 40.0 {
                        3.0 * GIB + 6.0 * GIB * t / 40.0
                    } else {
                        9.0 * GIB - 0.5 * MIB * (t - 40.0)
                    }
                })
            }),
        ),
        ("story", Box::new(story)),
        (
            "leak 1",
            Box::new(|s| make(s, 300, 1, 4.0 * MIB, |t| GIB + MIB * t)),
        ),
        (
            "leak 0.1",
            Box::new(|s| make(s, 300, 1, 2.0 * MIB, |t| 2.0 * GIB + 0.1 * MIB * t)),
        ),
        (
            "staircase",
            Box::new(|s| {
                make(s, 300, 1, 2.0 * MIB, |t| {
                    GIB + 40.0 * MIB * (t / 20.0).floor()
                })
            }),
        ),
        (
            "cut mid warm-up",
            Box::new(|s| {
                make(s, 25, 10, 20.0 * MIB, |t| {
                    3.0 * GIB + 8.0 * GIB * (1.0 - (-t / 150.0).exp())
                })
            }),
        ),
    ];
    for (name, g) in gens {
        let mut c = std::collections::BTreeMap::new();
        for seed in 100..150 {
            *c.entry(run(&g(seed)).verdict.as_str()).or_insert(0) += 1;
        }
        eprintln!("{name}: {c:?}");
    }
}

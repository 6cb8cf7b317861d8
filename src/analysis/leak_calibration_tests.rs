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

/// One series of the calibration set and the truth behind it.
pub(super) struct Case {
    pub family: &'static str,
    /// The leak rate built in (bytes/step); 0 for series that do not leak.
    pub leak: f64,
    pub series: MemorySeries,
}

/// The calibration set (docs/reliability.md, "Leak verdict calibration"): 20 seeds of each family.
/// No leak: flat with white and AR(1) noise, exact heap counts with a periodic pattern, saturating
/// warm-ups (exponential approach with a 13-step sawtooth; a 40-step buffer fill), sawtooth allocator
/// patterns. Leaks: linear at 1 KiB to 1 MiB per step, the exact-count and RSS-like cases of a slow
/// leak, a warm-up with a leak on top, a sawtooth with a leak.
pub(super) fn calibration_set() -> Vec<Case> {
    const KIB: f64 = 1024.0;
    let mut out = Vec::new();
    let mut add = |family: &'static str, leak: f64, f: &dyn Fn(u64) -> MemorySeries| {
        for seed in 0..20u64 {
            out.push(Case {
                family,
                leak,
                series: f(9000 + seed),
            });
        }
    };
    let page = |v: f64| (v / 4096.0).round() * 4096.0;
    add("flat, white noise 0.5 MiB", 0.0, &|s| {
        make(s, 300, 1, 0.5 * MIB, |_| 2.0 * GIB)
    });
    add("flat, white noise 2 MiB", 0.0, &|s| {
        make(s, 300, 1, 2.0 * MIB, |_| 2.0 * GIB)
    });
    add("flat, white noise 4 MiB", 0.0, &|s| {
        make(s, 300, 1, 4.0 * MIB, |_| 2.0 * GIB)
    });
    add("flat, AR(1) φ 0.5, 2 MiB", 0.0, &|s| {
        ar1_plateau(s, 300, 2.0 * GIB, 2.0 * MIB, 0.5)
    });
    add("flat, AR(1) φ 0.9, 2 MiB", 0.0, &|s| {
        ar1_plateau(s, 300, 2.0 * GIB, 2.0 * MIB, 0.9)
    });
    add("flat heap counts, 7-step pattern", 0.0, &|s| {
        make(s, 300, 1, 0.0, move |t| {
            40.0 * MIB + 65536.0 * ((t as u64 + s) % 7) as f64
        })
    });
    add("exp approach τ 30, sawtooth 13, 2 MiB, n 400", 0.0, &|s| {
        make(s, 400, 1, 2.0 * MIB, |t| {
            GIB + GIB * (1.0 - (-t / 30.0).exp()) + 64.0 * MIB * ((t as u64 % 13) as f64 / 12.0)
        })
    });
    add("exp approach τ 15, 3 MiB", 0.0, &|s| {
        make(s, 300, 1, 3.0 * MIB, |t| {
            GIB + 2.0 * GIB * (1.0 - (-t / 15.0).exp())
        })
    });
    add("40-step fill, 0.5 MiB, n 160", 0.0, &|s| {
        let m = make(s, 160, 1, 0.5 * MIB, |t| {
            1.2 * GIB + 400.0 * MIB * t.min(40.0) / 40.0
        });
        series(m.steps, m.values.into_iter().map(page).collect())
    });
    add("40-step fill, 2 MiB, n 160", 0.0, &|s| {
        make(s, 160, 1, 2.0 * MIB, |t| {
            1.2 * GIB + 400.0 * MIB * t.min(40.0) / 40.0
        })
    });
    add("sawtooth 17 on a plateau", 0.0, &|s| {
        make(s, 300, 1, 2.0 * MIB, |t| {
            2.0 * GIB + 300.0 * MIB * ((t as u64 % 17) as f64 / 16.0)
        })
    });
    add("GC sawtooth after a warm-up", 0.0, &|s| {
        make(s, 300, 1, 2.0 * MIB, |t| {
            2.0 * GIB * (1.0 - (-t / 10.0).exp()).max(0.5)
                + 300.0 * MIB * ((t as u64 % 17) as f64 / 16.0)
        })
    });
    for (family, rate) in [
        ("linear 1 KiB/step, 2 MiB", KIB),
        ("linear 4 KiB/step, 2 MiB", 4.0 * KIB),
        ("linear 16 KiB/step, 2 MiB", 16.0 * KIB),
        ("linear 64 KiB/step, 2 MiB", 64.0 * KIB),
        ("linear 256 KiB/step, 2 MiB", 256.0 * KIB),
        ("linear 1 MiB/step, 2 MiB", MIB),
    ] {
        add(family, rate, &move |s| {
            make(s, 300, 1, 2.0 * MIB, move |t| 2.0 * GIB + rate * t)
        });
    }
    add("exact 1 KiB/step (heap counts)", KIB, &|s| {
        make(s, 300, 1, 0.0, move |t| {
            GIB + KIB * t + 4096.0 * ((t as u64 + s) % 3) as f64
        })
    });
    add("RSS 100 KB/step, pages, 200 KB noise", 1e5, &|s| {
        let m = make(s, 150, 1, 2e5, |t| 300e6 + 1e5 * t);
        series(m.steps, m.values.into_iter().map(page).collect())
    });
    add("warm-up then 64 KiB/step", 64.0 * KIB, &|s| {
        make(s, 400, 1, 2.0 * MIB, |t| {
            GIB + GIB * (1.0 - (-t / 30.0).exp()) + 64.0 * KIB * t
        })
    });
    add("warm-up then 16 KiB/step", 16.0 * KIB, &|s| {
        make(s, 400, 1, 2.0 * MIB, |t| {
            GIB + GIB * (1.0 - (-t / 30.0).exp()) + 16.0 * KIB * t
        })
    });
    add("sawtooth 17 with 64 KiB/step", 64.0 * KIB, &|s| {
        make(s, 300, 1, 2.0 * MIB, |t| {
            2.0 * GIB + 64.0 * KIB * t + 300.0 * MIB * ((t as u64 % 17) as f64 / 16.0)
        })
    });
    out
}

/// Rates over the calibration set: (false leak, no-leak recognised, missed leak among leaks that
/// matter, missed among all leaks), as fractions; `matters` is the rate that matters (bytes/step).
pub(super) fn rates(verdicts: &[(f64, Verdict)], matters: f64) -> [f64; 4] {
    let frac = |num: usize, den: usize| num as f64 / den.max(1) as f64;
    let none: Vec<_> = verdicts.iter().filter(|v| v.0 == 0.0).collect();
    let leaks: Vec<_> = verdicts.iter().filter(|v| v.0 > 0.0).collect();
    let big: Vec<_> = leaks.iter().filter(|v| v.0 >= matters).collect();
    [
        frac(
            none.iter().filter(|v| v.1 == Verdict::Leak).count(),
            none.len(),
        ),
        frac(
            none.iter().filter(|v| v.1 == Verdict::Plateau).count(),
            none.len(),
        ),
        frac(
            big.iter().filter(|v| v.1 == Verdict::Plateau).count(),
            big.len(),
        ),
        frac(
            leaks.iter().filter(|v| v.1 == Verdict::Plateau).count(),
            leaks.len(),
        ),
    ]
}

/// The calibration set's rates, asserted: no false leak, no "no leak" about a leak that matters
/// (≥ the rate that matters at 2 GiB, 10.5 KiB/step); and print the table per family.
#[test]
fn calibration_set_false_and_missed_leak_rates() {
    let set = calibration_set();
    let mut verdicts = Vec::new();
    let mut table: std::collections::BTreeMap<&str, std::collections::BTreeMap<&str, usize>> =
        Default::default();
    for c in &set {
        let r = run(&c.series);
        if c.leak > 0.0 && r.verdict == Verdict::Plateau {
            // "No leak" about a leak only below the rate that matters (its growth over the horizon
            // is within the margin the sentence states), or under a fitted warm-up.
            let matters = r.rate_that_matters_bytes_per_step.unwrap();
            assert!(
                c.leak < matters || r.approach.is_some(),
                "{}: plateau over a leak of {} (matters from {matters}): {}",
                c.family,
                c.leak,
                r.sentence
            );
        }
        *table
            .entry(c.family)
            .or_default()
            .entry(r.verdict.as_str())
            .or_default() += 1;
        verdicts.push((c.leak, r.verdict));
    }
    for (f, counts) in &table {
        eprintln!("{f}: {counts:?}");
    }
    let [false_leak, recognised, missed_big, missed_all] =
        rates(&verdicts, 2.0 * GIB * 0.005 / 1000.0);
    eprintln!(
        "false leak {false_leak:.3}, no-leak recognised {recognised:.3}, missed leaks that matter {missed_big:.3}, missed leaks (all) {missed_all:.3}"
    );
    assert!(false_leak <= 0.01, "false-leak rate {false_leak}");
    assert!(missed_big <= 0.01, "missed leaks that matter {missed_big}");
}

/// Writes the calibration set as CSV files (`step,bytes`) into $CALIBRATION_DIR, one file per
/// series named `family-seed-rate.csv`, so that any build of `memscope analyze` can be measured on
/// the same set (`scripts/leak_calibration.py`).
#[test]
#[ignore]
fn write_calibration_set() {
    let dir = std::env::var("CALIBRATION_DIR").expect("set CALIBRATION_DIR");
    std::fs::create_dir_all(&dir).unwrap();
    for (i, c) in calibration_set().iter().enumerate() {
        let mut t = String::from("step,bytes\n");
        for (s, v) in c.series.steps.iter().zip(&c.series.values) {
            t += &format!("{s},{v:.0}\n");
        }
        let name: String = c
            .family
            .chars()
            .map(|ch| if ch.is_ascii_alphanumeric() { ch } else { '_' })
            .collect();
        std::fs::write(format!("{dir}/{i:04}-{name}-{}.csv", c.leak), t).unwrap();
    }
}

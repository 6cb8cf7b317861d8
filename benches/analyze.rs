//! `memscope analyze` at scale: parse + verdict of a 1,000,000-line CSV in memory (the process of
//! scripts/gen_series.py: a warm-up with time constant 100 steps, then level with noise). The
//! end-to-end figure with RSS is the documented command in docs/analyze.md:
//!   python3 scripts/gen_series.py 1000000 > /tmp/s.csv
//!   /usr/bin/time -f "%e s %M KiB" target/release/memscope analyze /tmp/s.csv

use criterion::{criterion_group, criterion_main, Criterion};
use memscope::analysis::leak::analyze;
use memscope::input::series::{parse_series, ParseOptions};
use memscope::record::leak::LeakParams;

fn series_csv(n: usize) -> String {
    let mut s: u64 = 14;
    let mut unif = move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    let mut out = String::from("step,rss_mb\n");
    for i in 0..n {
        let g = (-2.0 * unif().ln()).sqrt() * (2.0 * std::f64::consts::PI * unif()).cos();
        let v = 2000.0 + 1500.0 * (1.0 - (-(i as f64) / 100.0).exp()) + 2.0 * g;
        out += &format!("{i},{v:.2}\n");
    }
    out
}

fn bench(c: &mut Criterion) {
    let text = series_csv(1_000_000);
    let opts = ParseOptions::default();
    let mut g = c.benchmark_group("analyze_1e6_lines");
    g.sample_size(10);
    g.bench_function("parse", |b| b.iter(|| parse_series(&text, &opts).unwrap()));
    let (series, _) = parse_series(&text, &opts).unwrap();
    g.bench_function("verdict", |b| {
        b.iter(|| analyze(&series, &LeakParams::default()))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

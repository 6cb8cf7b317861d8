use super::*;
use crate::quantile::{mad, median};

/// Relative-or-absolute closeness for hand-computed values.
fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-12 * want.abs().max(1.0)
}

macro_rules! assert_close {
    ($got:expr, $want:expr) => {{
        let (g, w): (f64, f64) = ($got, $want);
        assert!(close(g, w), "{} = {g}, want {w}", stringify!($got));
    }};
}

/// No field of the summary is NaN (RELIABILITY case 21).
fn assert_no_nan(s: &Summary) {
    let fields = [
        s.mean,
        s.std.unwrap_or(0.0),
        s.cv_pct.unwrap_or(0.0),
        s.median,
        s.min,
        s.max,
        s.p90,
        s.p99,
        s.mad,
    ];
    assert!(fields.iter().all(|v| !v.is_nan()), "NaN in {s:?}");
}

/// The 10-sample set used below, unsorted; index 8 (30) is the outlier.
/// sorted: 10 11 11 12 13 14 14 15 16 30
const TEN: [f64; 10] = [12.0, 15.0, 11.0, 14.0, 10.0, 13.0, 16.0, 11.0, 30.0, 14.0];

#[test]
fn n0_is_not_enough_samples() {
    assert_eq!(
        summarize(&[]),
        Err(StatsError::NotEnough { need: 1, got: 0 })
    );
    assert_eq!(
        summarize(&[]).unwrap_err().to_string(),
        "not enough samples: need at least 1, got 0"
    );
    assert_eq!(mean(&[]), None);
    assert_eq!(median(&[]), None);
    assert_eq!(sample_std(&[]), None);
    assert_eq!(mad(&[]), None);
}

#[test]
fn n1_has_no_spread() {
    let s = summarize(&[5.0]).unwrap();
    assert_eq!(
        s,
        Summary {
            n: 1,
            mean: 5.0,
            std: None,
            cv_pct: None,
            median: 5.0,
            min: 5.0,
            max: 5.0,
            p90: 5.0,
            p99: 5.0,
            mad: 0.0,
            outliers: vec![],
        }
    );
    assert_eq!(sample_std(&[5.0]), None);
}

#[test]
fn n2_hand_computed() {
    // mean 2; deviations ±1 → var (1+1)/(2−1) = 2, std √2; cv 100·√2/2.
    // type 7: h = 0.9 → 1 + 0.9·2 = 2.8; h = 0.99 → 2.98. |x−2| = 1, 1 → MAD 1.
    let s = summarize(&[3.0, 1.0]).unwrap();
    assert_eq!(s.n, 2);
    assert_close!(s.mean, 2.0);
    assert_close!(s.std.unwrap(), std::f64::consts::SQRT_2);
    assert_close!(s.cv_pct.unwrap(), 50.0 * std::f64::consts::SQRT_2);
    assert_close!(s.median, 2.0);
    assert_eq!((s.min, s.max), (1.0, 3.0));
    assert_close!(s.p90, 2.8);
    assert_close!(s.p99, 2.98);
    assert_close!(s.mad, 1.0);
    assert!(s.outliers.is_empty());
}

#[test]
fn identical_samples_are_exact_with_zero_spread() {
    // 0.1 is not exact in binary; a naive Σx/n would give 0.10000000000000002 and std ≈ 1e-17.
    let xs = [0.1; 7];
    let s = summarize(&xs).unwrap();
    assert_eq!(s.mean, 0.1);
    assert_eq!(s.std, Some(0.0));
    assert_eq!(s.cv_pct, Some(0.0));
    assert_eq!(
        (s.median, s.min, s.max, s.p90, s.p99),
        (0.1, 0.1, 0.1, 0.1, 0.1)
    );
    assert_eq!(s.mad, 0.0);
    assert!(s.outliers.is_empty());
    assert_eq!(sample_std(&xs), Some(0.0));
}

#[test]
fn all_zeros_give_no_cv_and_no_nan() {
    for xs in [&[0.0, 0.0, 0.0, 0.0][..], &[0.0, -0.0, 0.0][..], &[0.0][..]] {
        let s = summarize(xs).unwrap();
        assert_no_nan(&s);
        assert_eq!(s.mean, 0.0);
        assert_eq!(s.std, (xs.len() >= 2).then_some(0.0));
        assert_eq!(s.cv_pct, None, "mean is 0 for {xs:?}");
        assert_eq!(s.mad, 0.0);
        assert!(s.outliers.is_empty());
    }
}

#[test]
fn ten_samples_hand_computed() {
    // n = 10, Σ = 146 → mean 14.6.
    // deviations from 14.6: −4.6 −3.6 −3.6 −2.6 −1.6 −0.6 −0.6 0.4 1.4 15.4
    // squares sum: 21.16+12.96+12.96+6.76+2.56+0.36+0.36+0.16+1.96+237.16 = 296.4
    // var = 296.4/9 = 32.9333…, std = 5.738757124441958 (python statistics.stdev)
    // median = (13 + 14)/2 = 13.5
    // p90: h = 9·0.9 = 8.1 → 16 + 0.1·(30 − 16) = 17.4
    // p99: h = 9·0.99 = 8.91 → 16 + 0.91·14 = 28.74
    // |x − 13.5| sorted: 0.5 0.5 0.5 1.5 1.5 2.5 2.5 2.5 3.5 16.5 → MAD (1.5 + 2.5)/2 = 2
    // modified z of 30: 0.6745·16.5/2 = 5.565 > 3.5; next largest 0.6745·3.5/2 = 1.18
    let s = summarize(&TEN).unwrap();
    assert_eq!(s.n, 10);
    assert_close!(s.mean, 14.6);
    assert_close!(s.std.unwrap(), (296.4_f64 / 9.0).sqrt());
    assert_close!(s.std.unwrap(), 5.738757124441958);
    assert_close!(s.cv_pct.unwrap(), 100.0 * 5.738757124441958 / 14.6);
    assert_close!(s.median, 13.5);
    assert_eq!((s.min, s.max), (10.0, 30.0));
    assert_close!(s.p90, 17.4);
    assert_close!(s.p99, 28.74);
    assert_close!(s.mad, 2.0);
    assert_eq!(s.outliers, vec![8]);
    // The helpers agree with the summary.
    assert_close!(mean(&TEN).unwrap(), 14.6);
    assert_close!(median(&TEN).unwrap(), 13.5);
    assert_close!(sample_std(&TEN).unwrap(), 5.738757124441958);
    assert_close!(mad(&TEN).unwrap(), 2.0);
}

#[test]
fn unsorted_input_gives_same_statistics_and_input_indices() {
    let mut sorted = TEN;
    sorted.sort_by(f64::total_cmp);
    let mut reversed = sorted;
    reversed.reverse();
    let a = summarize(&TEN).unwrap();
    for xs in [sorted, reversed] {
        let b = summarize(&xs).unwrap();
        assert_close!(b.mean, a.mean);
        assert_close!(b.std.unwrap(), a.std.unwrap());
        assert_eq!(
            (b.median, b.min, b.max, b.p90, b.p99, b.mad),
            (a.median, a.min, a.max, a.p90, a.p99, a.mad)
        );
        // The outlier index points at the 30 wherever it sits in the input.
        assert_eq!(b.outliers.len(), 1);
        assert_eq!(xs[b.outliers[0]], 30.0);
    }
    assert_eq!(summarize(&sorted).unwrap().outliers, vec![9]);
    assert_eq!(summarize(&reversed).unwrap().outliers, vec![0]);
}

#[test]
fn outliers_use_modified_z_score_strictly_above_3_5() {
    // median 10; |x − 10| = 0 1 1 2 2 and the probe → MAD 1 (the probe is the largest).
    // z = 0.6745·d: d = 5.19 → 3.5007 (outlier), d = 5.18 → 3.4939 (not).
    let base = [10.0, 9.0, 11.0, 8.0, 12.0];
    let with = |probe: f64| {
        let mut v = base.to_vec();
        v.push(probe);
        v.push(10.0); // 7 samples; the median stays 10
        v
    };
    let hit = summarize(&with(15.19)).unwrap();
    assert_close!(hit.median, 10.0);
    assert_close!(hit.mad, 1.0);
    assert_eq!(hit.outliers, vec![5]);
    assert!(summarize(&with(15.18)).unwrap().outliers.is_empty());
    // Low outliers count too, and they are flagged, never dropped.
    let low = summarize(&with(4.0)).unwrap();
    assert_eq!(low.outliers, vec![5]);
    assert_eq!((low.n, low.min), (7, 4.0));
}

#[test]
fn mad_zero_flags_every_sample_off_the_median() {
    // median 10; |x − 10| = 0 0 0 0 0 2 1 → MAD 0 → indices 5 and 6.
    let xs = [10.0, 10.0, 10.0, 10.0, 10.0, 12.0, 9.0];
    let s = summarize(&xs).unwrap();
    assert_eq!(s.median, 10.0);
    assert_eq!(s.mad, 0.0);
    assert_eq!(s.outliers, vec![5, 6]);
    assert_no_nan(&s);
    // mean 71/7; kept in the statistics.
    assert_close!(s.mean, 71.0 / 7.0);
}

#[test]
fn non_finite_samples_are_rejected_with_their_index() {
    let err = summarize(&[1.0, 2.0, f64::NAN, f64::INFINITY]).unwrap_err();
    assert!(
        matches!(err, StatsError::NonFinite { index: 2, value } if value.is_nan()),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "sample 2 is not a finite number (NaN)");
    assert_eq!(
        summarize(&[1.0, f64::NEG_INFINITY]),
        Err(StatsError::NonFinite {
            index: 1,
            value: f64::NEG_INFINITY
        })
    );
    assert_eq!(
        summarize(&[f64::INFINITY]).unwrap_err().to_string(),
        "sample 0 is not a finite number (inf)"
    );
    let bad = [1.0, f64::NAN, 3.0];
    assert_eq!(mean(&bad), None);
    assert_eq!(median(&bad), None);
    assert_eq!(sample_std(&bad), None);
    assert_eq!(mad(&bad), None);
}

#[test]
fn variance_is_stable_under_a_large_offset() {
    // [4, 7, 13, 16] + 1e9: mean 1e9 + 10; deviations −6 −3 3 6 → var 90/3 = 30.
    // The naive Σx² − (Σx)²/n formula loses every digit here.
    let xs = [1e9 + 4.0, 1e9 + 7.0, 1e9 + 13.0, 1e9 + 16.0];
    let s = summarize(&xs).unwrap();
    assert_eq!(s.mean, 1e9 + 10.0);
    assert_close!(s.std.unwrap(), 30f64.sqrt());
    assert_close!(s.median, 1e9 + 10.0);
}

#[test]
fn extreme_finite_values_never_give_nan() {
    let tiny = f64::from_bits(1); // smallest subnormal
    let cases: [&[f64]; 6] = [
        &[f64::MAX, f64::MAX, f64::MAX],
        &[f64::MAX, -f64::MAX],
        &[f64::MAX, -f64::MAX, f64::MAX],
        &[tiny, 0.0, tiny, 2.0 * tiny],
        &[f64::MIN_POSITIVE, 1e300, -1e300],
        &[1e-300, 2e-300, 3e-300],
    ];
    for xs in cases {
        let s = summarize(xs).unwrap();
        assert_no_nan(&s);
        assert!(s.min <= s.mean && s.mean <= s.max, "{s:?}");
        assert!(s.min <= s.median && s.median <= s.p90 && s.p90 <= s.p99 && s.p99 <= s.max);
    }
    let s = summarize(&[f64::MAX; 3]).unwrap();
    assert_eq!((s.mean, s.std), (f64::MAX, Some(0.0)));
    // Scaling is exact: tiny values keep their statistics (mean 2e-300, std 1e-300).
    let s = summarize(&[1e-300, 2e-300, 3e-300]).unwrap();
    assert!((s.mean - 2e-300).abs() <= 1e-312);
    assert!((s.std.unwrap() - 1e-300).abs() <= 1e-312);
    // ±MAX: the mean is 0 exactly, the median too; the true std exceeds f64::MAX.
    let s = summarize(&[f64::MAX, -f64::MAX]).unwrap();
    assert_eq!((s.mean, s.median, s.cv_pct), (0.0, 0.0, None));
}

#[test]
fn summary_round_trips_through_json() {
    let s = summarize(&TEN).unwrap();
    let json = serde_json::to_string(&s).unwrap();
    let back: Summary = serde_json::from_str(&json).unwrap();
    // serde_json parses floats to within 1 ulp unless its `float_roundtrip` feature is on.
    assert_eq!((back.n, &back.outliers), (s.n, &s.outliers));
    assert_close!(back.p99, s.p99);
    assert_close!(back.std.unwrap(), s.std.unwrap());
    let one = summarize(&[2.0]).unwrap();
    let json = serde_json::to_string(&one).unwrap();
    assert!(json.contains("\"std\":null") && json.contains("\"cv_pct\":null"));
}

#[test]
fn warnings_for_one_sample_say_only_that() {
    let s = summarize(&[9.0]).unwrap();
    assert_eq!(
        noise_warnings(&[9.0], &s, "step"),
        vec!["step: only 1 sample: no spread can be given; use --steps 5 or more"]
    );
}

#[test]
fn quiet_samples_give_no_warnings() {
    // mean 100; deviations 0 1 −1 0 1 −1 → var 4/5 → CV 0.89%; MAD 1, no outliers.
    let xs = [100.0, 101.0, 99.0, 100.0, 101.0, 99.0];
    let s = summarize(&xs).unwrap();
    assert_close!(s.cv_pct.unwrap(), 100.0 * (4.0_f64 / 5.0).sqrt() / 100.0);
    assert!(noise_warnings(&xs, &s, "step").is_empty());
    let zeros = [0.0; 4];
    assert!(noise_warnings(&zeros, &summarize(&zeros).unwrap(), "x").is_empty());
}

#[test]
fn warnings_for_noise_first_step_and_outliers() {
    // TEN: CV 39.3%; first step 12 ≤ 1.5·13.5; outlier at index 8.
    let s = summarize(&TEN).unwrap();
    assert_eq!(
        noise_warnings(&TEN, &s, "train step"),
        vec![
            "train step: CV 39.3% > 5%: the machine was noisy; use more --steps or fewer --threads",
            "train step: 1 outlier(s) by MAD (kept in the statistics): steps 8",
        ]
    );
    // Slow first step: median 10, first 21 → 2.1x; also an outlier (MAD 0.5 → z = 0.6745·11/0.5 = 14.8).
    // mean 11.1, deviations 9.9 −1.1 −1.1 −0.6 −1.6 −1.1 −0.6 −0.6 −1.6 −1.6
    let xs = [21.0, 10.0, 10.0, 10.5, 9.5, 10.0, 10.5, 10.5, 9.5, 9.5];
    let s = summarize(&xs).unwrap();
    assert_close!(s.median, 10.0);
    assert_close!(s.mad, 0.5);
    let w = noise_warnings(&xs, &s, "fwd");
    assert_eq!(w.len(), 3, "{w:?}");
    assert!(
        w[0].starts_with("fwd: CV ")
            && w[0].ends_with("% > 5%: the machine was noisy; use more --steps or fewer --threads")
    );
    assert_eq!(
        w[1],
        "fwd: the first measured step took 2.1x the median: add --warmup"
    );
    assert_eq!(
        w[2],
        "fwd: 1 outlier(s) by MAD (kept in the statistics): steps 0"
    );
}

#[test]
fn warning_numbers_never_read_as_at_the_threshold() {
    // A CV of 5.04% would print as "5.0% > 5%" with one decimal.
    let mut s = summarize(&[1.0, 2.0]).unwrap();
    s.cv_pct = Some(5.04);
    s.outliers.clear();
    let w = noise_warnings(&[1.5, 1.5], &s, "a");
    assert_eq!(
        w,
        vec!["a: CV 5.04% > 5%: the machine was noisy; use more --steps or fewer --threads"]
    );
    s.cv_pct = Some(250.4);
    assert!(noise_warnings(&[1.5], &s, "a")[0].starts_with("a: CV 250% > 5%"));
    // First step 1.52x the median prints as 1.52x, not 1.5x.
    let xs = [15.2, 10.0, 10.0, 10.0];
    let s = summarize(&xs).unwrap();
    let w = noise_warnings(&xs, &s, "b");
    assert!(
        w.contains(&"b: the first measured step took 1.52x the median: add --warmup".to_string()),
        "{w:?}"
    );
}

#[test]
fn warnings_list_many_outliers_briefly() {
    // MAD 0 with 12 samples off the median: 10 listed, then a count.
    let mut xs = vec![1.0; 13];
    xs.extend([2.0; 12]);
    let s = summarize(&xs).unwrap();
    assert_eq!(s.outliers.len(), 12);
    let w = noise_warnings(&xs, &s, "c");
    let last = w.last().unwrap();
    assert_eq!(
        last,
        "c: 12 outlier(s) by MAD (kept in the statistics): steps 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, … and 2 more"
    );
}

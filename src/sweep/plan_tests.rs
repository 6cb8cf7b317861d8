use super::*;

fn p(text: &str) -> Result<Vec<usize>, PlanError> {
    parse_axis_usize("--batch", text, 1)
}

fn p0(text: &str) -> Result<Vec<usize>, PlanError> {
    parse_axis_usize("--warmup", text, 0)
}

fn err(text: &str) -> String {
    p(text).unwrap_err().to_string()
}

#[test]
fn comma_lists() {
    assert_eq!(p("1,2,4,8").unwrap(), vec![1, 2, 4, 8]);
    assert_eq!(p("8").unwrap(), vec![8]);
    assert_eq!(p("8,4,1,2").unwrap(), vec![1, 2, 4, 8], "sorted ascending");
    assert_eq!(p("4,4,1,4").unwrap(), vec![1, 4], "duplicates removed");
}

#[test]
fn geometric_ranges() {
    assert_eq!(
        parse_axis_usize("--seq", "128-1024*2", 1).unwrap(),
        vec![128, 256, 512, 1024]
    );
    // The end need not be on the sequence: ×3 from 1 while ≤ 100.
    assert_eq!(p("1-100*3").unwrap(), vec![1, 3, 9, 27, 81]);
    assert_eq!(p("5-5*2").unwrap(), vec![5]);
    // Stops before usize overflows instead of wrapping.
    let big = format!("1-{}*2", usize::MAX);
    assert_eq!(p(&big).unwrap().len(), usize::BITS as usize);
}

#[test]
fn arithmetic_ranges() {
    assert_eq!(p("1-4").unwrap(), vec![1, 2, 3, 4]);
    assert_eq!(p("1-8+1").unwrap(), (1..=8).collect::<Vec<_>>());
    assert_eq!(p0("0-8+2").unwrap(), vec![0, 2, 4, 6, 8]);
    assert_eq!(
        p("1-8+3").unwrap(),
        vec![1, 4, 7],
        "the end need not be hit"
    );
    assert_eq!(p("3-3").unwrap(), vec![3]);
}

#[test]
fn mixtures_whitespace_and_duplicates() {
    assert_eq!(p("1,2,16-64*2").unwrap(), vec![1, 2, 16, 32, 64]);
    assert_eq!(p(" 1 , 2,\t16 - 64 * 2 ").unwrap(), vec![1, 2, 16, 32, 64]);
    assert_eq!(p("1-4,2-8*2,4").unwrap(), vec![1, 2, 3, 4, 8]);
    assert_eq!(p0("0, 1, 2, 5").unwrap(), vec![0, 1, 2, 5]);
}

#[test]
fn not_a_number_names_flag_token_and_the_valid_forms() {
    assert_eq!(
        err("0x"),
        "--batch: \"0x\" is not a number; ranges look like 128-1024*2 or 1-8+1"
    );
    assert_eq!(
        err("1-0x"),
        "--batch: \"0x\" in \"1-0x\" is not a number; ranges look like 128-1024*2 or 1-8+1"
    );
    for bad in [
        "x", "1.5", "+4", "1e3", "1 2", "4*2", "1-8*2+1", "1--4", "1-", "-", "-x", "1-8*",
    ] {
        assert!(
            matches!(p(bad), Err(PlanError::NotANumber { .. })),
            "{bad:?} gave {:?}",
            p(bad)
        );
    }
    assert_eq!(
        err("99999999999999999999999"),
        format!(
            "--batch: \"99999999999999999999999\" is too large (at most {})",
            usize::MAX
        )
    );
}

#[test]
fn empty_values_and_items() {
    assert_eq!(
        err(""),
        "--batch: no value given; give a list such as 1,2,4 or a range such as 128-1024*2"
    );
    assert_eq!(
        p("  "),
        Err(PlanError::Empty {
            flag: "--batch".into()
        })
    );
    assert_eq!(
        err("1,,2"),
        "--batch: empty item in \"1,,2\" (a doubled or trailing comma?)"
    );
    assert!(matches!(p("1,2,"), Err(PlanError::EmptyItem { .. })));
    assert!(matches!(p(",1"), Err(PlanError::EmptyItem { .. })));
}

#[test]
fn zero_and_negative_values_are_refused_where_the_flag_needs_at_least_one() {
    assert_eq!(
        err("0,1"),
        "--batch: \"0\": 0 is below the minimum; --batch needs values ≥ 1"
    );
    assert_eq!(
        err("0-8+2"),
        "--batch: \"0-8+2\": 0 is below the minimum; --batch needs values ≥ 1"
    );
    assert_eq!(
        err("-1"),
        "--batch: \"-1\": negative values are not allowed; use values ≥ 1"
    );
    assert!(matches!(p0("-2,1"), Err(PlanError::Negative { .. })));
    // The same values are fine where 0 is allowed.
    assert_eq!(p0("0").unwrap(), vec![0]);
    // A larger minimum is honoured too.
    assert_eq!(
        parse_axis_usize("--seq", "8,16", 16)
            .unwrap_err()
            .to_string(),
        "--seq: \"8\": 8 is below the minimum; --seq needs values ≥ 16"
    );
}

#[test]
fn reversed_ranges_bad_factors_and_zero_steps() {
    assert_eq!(
        parse_axis_usize("--seq", "1024-128*2", 1)
            .unwrap_err()
            .to_string(),
        "--seq: \"1024-128*2\": the end 128 is below the start 1024; write 128-1024"
    );
    assert!(matches!(
        p("8-1"),
        Err(PlanError::EndBeforeStart {
            start: 8,
            end: 1,
            ..
        })
    ));
    assert_eq!(
        err("1-8*1"),
        "--batch: \"1-8*1\": the factor must be at least 2; ranges look like 128-1024*2 or 1-8+1"
    );
    assert!(matches!(p("1-8*0"), Err(PlanError::BadFactor { .. })));
    assert_eq!(
        err("1-8+0"),
        "--batch: \"1-8+0\": the step must be at least 1; ranges look like 128-1024*2 or 1-8+1"
    );
    assert!(matches!(
        p0("0-8*2"),
        Err(PlanError::GeometricFromZero { .. })
    ));
}

#[test]
fn more_than_ten_thousand_values_is_refused() {
    assert_eq!(p("1-10000").unwrap().len(), 10_000);
    assert_eq!(
        err("1-10001"),
        "--batch: more than 10000 values; use a larger step or a factor (1-10000+100, 128-8192*2)"
    );
    // A huge range is refused up front (no billions of iterations).
    assert!(matches!(
        p("1-1000000000000"),
        Err(PlanError::TooMany { .. })
    ));
    // The limit is on the whole axis, after duplicates are removed.
    assert_eq!(p("1-10000,5000-10000").unwrap().len(), 10_000);
    assert!(matches!(p("1-10000,20000"), Err(PlanError::TooMany { .. })));
}

#[test]
fn name_lists_keep_order_trim_and_drop_duplicates() {
    assert_eq!(
        parse_axis_str("--model", " cs336-small , cs336-medium,cs336-small ").unwrap(),
        vec!["cs336-small", "cs336-medium"]
    );
    assert_eq!(
        parse_axis_str("--dtype", "f32,bf16").unwrap(),
        vec!["f32", "bf16"]
    );
    assert_eq!(
        parse_axis_str("--dtype", "f32,,bf16")
            .unwrap_err()
            .to_string(),
        "--dtype: empty item in \"f32,,bf16\" (a doubled or trailing comma?)"
    );
    assert!(matches!(
        parse_axis_str("--mode", "train, "),
        Err(PlanError::EmptyItem { .. })
    ));
    assert_eq!(
        parse_axis_str("--mode", ""),
        Err(PlanError::Empty {
            flag: "--mode".into()
        })
    );
}

fn sizes(model: &str) -> u64 {
    match model {
        "big" => 1_000,
        "small" => 10,
        "tiny-b" | "tiny-a" => 1,
        _ => 500,
    }
}

fn axes() -> Axes {
    Axes {
        models: vec!["big".into(), "small".into()],
        modes: vec!["train".into(), "infer".into()],
        dtypes: vec!["f32".into(), "bf16".into()],
        batches: vec![4, 1],
        seqs: vec![256, 128],
        warmups: vec![0, 2],
        grad_accums: vec![1],
        plans: vec![],
        micro_batches: vec![],
    }
}

#[test]
fn plan_is_the_cartesian_product_smallest_first() {
    let pts = plan(&axes(), sizes);
    assert_eq!(pts.len(), 2 * 2 * 2 * 2 * 2 * 2);
    assert!(pts.iter().enumerate().all(|(i, q)| q.index == i));
    let key = |q: &Point| {
        format!(
            "{} {} {} s{} b{} g{} w{}",
            q.model, q.mode, q.dtype, q.seq, q.batch, q.grad_accum, q.warmup
        )
    };
    let first: Vec<String> = pts.iter().take(10).map(key).collect();
    assert_eq!(
        first,
        [
            "small train f32 s128 b1 g1 w0",
            "small train f32 s128 b1 g1 w2",
            "small train f32 s128 b4 g1 w0",
            "small train f32 s128 b4 g1 w2",
            "small train f32 s256 b1 g1 w0",
            "small train f32 s256 b1 g1 w2",
            "small train f32 s256 b4 g1 w0",
            "small train f32 s256 b4 g1 w2",
            "small train bf16 s128 b1 g1 w0",
            "small train bf16 s128 b1 g1 w2",
        ]
    );
    assert_eq!(key(&pts[16]), "small infer f32 s128 b1 g1 w0");
    assert_eq!(key(&pts[32]), "big train f32 s128 b1 g1 w0");
    assert_eq!(key(&pts[63]), "big infer bf16 s256 b4 g1 w2");
    // Stable: the same input gives the same plan.
    assert_eq!(plan(&axes(), sizes), pts);
}

#[test]
fn plan_breaks_size_ties_by_name_and_grad_accum_varies_before_warmup() {
    let a = Axes {
        models: vec!["tiny-b".into(), "tiny-a".into()],
        modes: vec!["train".into()],
        dtypes: vec!["f32".into()],
        batches: vec![2],
        seqs: vec![64],
        warmups: vec![1, 0],
        grad_accums: vec![2, 1],
        plans: vec![],
        micro_batches: vec![],
    };
    let got: Vec<(String, usize, usize)> = plan(&a, sizes)
        .into_iter()
        .map(|q| (q.model, q.grad_accum, q.warmup))
        .collect();
    let want = [
        ("tiny-a", 1, 0),
        ("tiny-a", 1, 1),
        ("tiny-a", 2, 0),
        ("tiny-a", 2, 1),
        ("tiny-b", 1, 0),
        ("tiny-b", 1, 1),
        ("tiny-b", 2, 0),
        ("tiny-b", 2, 1),
    ];
    assert_eq!(got, want.map(|(m, g, w)| (m.to_string(), g, w)).to_vec());
}

#[test]
fn plan_of_hand_made_axes_dedups_and_empty_axis_gives_nothing() {
    let mut a = axes();
    a.models = vec!["small".into(), "small".into()];
    a.batches = vec![1, 1, 4];
    assert_eq!(plan(&a, sizes).len(), 2 * 2 * 2 * 2 * 2);
    a.warmups.clear();
    assert!(plan(&a, sizes).is_empty());
}

fn point(model: &str, mode: &str, dtype: &str, batch: usize, seq: usize) -> Point {
    Point {
        model: model.into(),
        mode: mode.into(),
        dtype: dtype.into(),
        batch,
        seq,
        warmup: 0,
        grad_accum: 1,
        plan: None,
        micro_batches: None,
        index: 0,
    }
}

#[test]
fn strictly_larger_needs_ge_on_both_and_gt_on_one() {
    let oom = point("m", "train", "f32", 8, 256);
    let larger = |b, s| strictly_larger(&oom, &point("m", "train", "f32", b, s));
    assert!(larger(16, 256));
    assert!(larger(8, 512));
    assert!(larger(16, 512));
    assert!(!larger(8, 256), "the same size is not strictly larger");
    assert!(!larger(16, 128), "smaller on seq");
    assert!(!larger(4, 512), "smaller on batch");
    assert!(!larger(4, 128));
    // Warm-up and gradient accumulation do not matter.
    let mut b = point("m", "train", "f32", 16, 256);
    b.warmup = 5;
    b.grad_accum = 4;
    assert!(strictly_larger(&oom, &b));
}

#[test]
fn strictly_larger_needs_the_same_model_dtype_and_mode() {
    let oom = point("m", "train", "f32", 8, 256);
    assert!(!strictly_larger(
        &oom,
        &point("other", "train", "f32", 16, 512)
    ));
    assert!(!strictly_larger(&oom, &point("m", "infer", "f32", 16, 512)));
    assert!(!strictly_larger(
        &oom,
        &point("m", "train", "bf16", 16, 512)
    ));
}

#[test]
fn skipping_after_an_oom_in_a_planned_sweep() {
    let a = Axes {
        models: vec!["m".into()],
        modes: vec!["train".into()],
        dtypes: vec!["f32".into()],
        batches: parse_axis_usize("--batch", "1-8*2", 1).unwrap(),
        seqs: parse_axis_usize("--seq", "128-256*2", 1).unwrap(),
        warmups: vec![1],
        grad_accums: vec![1],
        plans: vec![],
        micro_batches: vec![],
    };
    let pts = plan(&a, |_| 1);
    let oom = pts.iter().find(|q| q.batch == 4 && q.seq == 128).unwrap();
    let skipped: Vec<(usize, usize)> = pts
        .iter()
        .filter(|q| strictly_larger(oom, q))
        .map(|q| (q.seq, q.batch))
        .collect();
    assert_eq!(skipped, vec![(128, 8), (256, 4), (256, 8)]);
}

#[test]
fn skip_only_strictly_larger_on_the_same_model_dtype_mode() {
    let p = |batch, seq| Point {
        model: "m".into(),
        mode: "train".into(),
        dtype: "f32".into(),
        batch,
        seq,
        warmup: 0,
        grad_accum: 1,
        plan: None,
        micro_batches: None,
        index: 0,
    };
    let ooms = vec![p(8, 128)];
    assert_eq!(
        skip_reason(&ooms, &p(16, 128)).unwrap(),
        "oom at batch 8 seq 128"
    );
    assert_eq!(skip_reason(&ooms, &p(8, 128)), None, "equal is not larger");
    assert_eq!(skip_reason(&ooms, &p(16, 64)), None);
}

#[test]
fn each_plan_has_its_points_and_an_oom_skips_only_its_own() {
    let a = Axes {
        models: vec!["m".into()],
        modes: vec!["train".into()],
        dtypes: vec!["f32".into()],
        batches: vec![1, 2],
        seqs: vec![64],
        warmups: vec![0],
        grad_accums: vec![1],
        plans: vec!["fsdp".into(), "pp:2".into(), "fsdp".into()],
        micro_batches: vec![],
    };
    let pts = plan(&a, |_| 1);
    let got: Vec<(Option<&str>, usize)> =
        pts.iter().map(|q| (q.plan.as_deref(), q.batch)).collect();
    assert_eq!(
        got,
        [
            (Some("fsdp"), 1),
            (Some("fsdp"), 2),
            (Some("pp:2"), 1),
            (Some("pp:2"), 2)
        ]
    );
    // fsdp out of memory at batch 1: its batch 2 is skipped, the pipeline's batch 2 is not.
    let ooms = vec![pts[0].clone()];
    assert!(skip_reason(&ooms, &pts[1]).is_some());
    assert_eq!(skip_reason(&ooms, &pts[3]), None);
}

#[test]
fn a_pipeline_s_micro_batch_counts_are_points_of_its_own_and_an_oom_skips_only_its_count() {
    let a = Axes {
        models: vec!["m".into()],
        modes: vec!["train".into()],
        dtypes: vec!["f32".into()],
        batches: vec![8, 4],
        seqs: vec![64],
        warmups: vec![0],
        grad_accums: vec![1],
        plans: vec!["ddp".into(), "pp:2".into()],
        micro_batches: vec![4, 2, 4],
    };
    let pts = plan(&a, |_| 1);
    let got: Vec<(Option<&str>, Option<usize>, usize)> = pts
        .iter()
        .map(|q| (q.plan.as_deref(), q.micro_batches, q.batch))
        .collect();
    assert_eq!(
        got,
        [
            (Some("ddp"), None, 4),
            (Some("ddp"), None, 8),
            (Some("pp:2"), Some(2), 4),
            (Some("pp:2"), Some(2), 8),
            (Some("pp:2"), Some(4), 4),
            (Some("pp:2"), Some(4), 8),
        ]
    );
    // Two micro-batches out of memory at batch 4: its batch 8 is skipped, four's is not.
    let ooms = vec![pts[2].clone()];
    assert!(skip_reason(&ooms, &pts[3]).is_some());
    assert_eq!(skip_reason(&ooms, &pts[5]), None);
    // Without a list of plans the one plan's counts are the axis.
    let one = Axes { plans: vec![], ..a };
    let counts: Vec<Option<usize>> = plan(&one, |_| 1).iter().map(|q| q.micro_batches).collect();
    assert_eq!(counts, [Some(2), Some(2), Some(4), Some(4)]);
}

//! Memory-log parsing: every format, and docs/reliability.md cases 14 (truncated last line kept with a
//! warning, corrupt middle line an error with its line number) and 15 (NaN, inf, 1e400, negative
//! values, steps going backwards: rejected with the line number).

use super::*;

const MB: f64 = 1e6;
const MIB: f64 = 1048576.0;

fn parse(text: &str) -> Result<(MemorySeries, Vec<String>), SeriesError> {
    parse_series(text, &ParseOptions::default())
}

fn ok(text: &str) -> (MemorySeries, Vec<String>) {
    parse(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn line_err(text: &str, opts: &ParseOptions) -> (usize, String) {
    match parse_series(text, opts) {
        Err(SeriesError::Line { line, message }) => (line, message),
        other => panic!("expected a line error, got {other:?}\n{text}"),
    }
}

fn has(warnings: &[String], needle: &str) -> bool {
    warnings.iter().any(|w| w.contains(needle))
}

// ---- CSV ----

#[test]
fn csv_with_recognised_header_and_unit_in_name() {
    let (s, w) = ok("step,loss,rss_mb\n0,2.5,100\n10,2.4,101.5\n20,2.3,102\n");
    assert_eq!(s.steps, vec![0, 10, 20]);
    assert_eq!(s.values, vec![100.0 * MB, 101.5 * MB, 102.0 * MB]);
    assert_eq!(s.label, "RSS");
    assert!(s.seconds.is_none());
    assert!(w.is_empty(), "{w:?}");
}

#[test]
fn csv_header_variants_tsv_semicolon_and_time() {
    let (s, _) = ok("iteration\theap_live_bytes\telapsed_s\n1\t1000000\t0.5\n2\t1000001\t1.5\n");
    assert_eq!(
        (s.steps.clone(), s.label.as_str()),
        (vec![1, 2], "heap live")
    );
    assert_eq!(s.seconds, Some(vec![0.0, 1.0]));
    let (s, _) = ok("epoch;mem (MiB)\n1;2\n2;3\n");
    assert_eq!(s.values, vec![2.0 * MIB, 3.0 * MIB]);
    let (s, _) = ok(
        "Step,Memory [GB],Timestamp\n1,1.5,2024-05-01T12:00:00Z\n2,1.5,2024-05-01T12:00:02.5Z\n",
    );
    assert_eq!(s.values, vec![1.5e9, 1.5e9]);
    assert_eq!(s.seconds, Some(vec![0.0, 2.5]));
    let (s, _) = ok("step,time_ms,allocated\n1,1000,5\n2,3000,6\n");
    assert_eq!(s.seconds, Some(vec![0.0, 2.0]));
}

#[test]
fn csv_explicit_columns_and_unknown_column_error() {
    let opts = ParseOptions {
        step_column: Some("it".into()),
        value_column: Some("b".into()),
        ..Default::default()
    };
    let (s, _) = parse_series("it,a,b\n1,5,7\n2,5,8\n", &opts).unwrap();
    assert_eq!(s.values, vec![7.0, 8.0]);
    let opts = ParseOptions {
        value_column: Some("nope".into()),
        ..Default::default()
    };
    let e = parse_series("step,rss\n1,2\n", &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("--value-column nope") && e.contains("step, rss"),
        "{e}"
    );
    let e = parse("step,loss\n1,2\n").unwrap_err().to_string();
    assert!(e.contains("--value-column"), "{e}");
    // A header-less name is not memory, but a size unit in the second of two columns is.
    let (s, w) = ok("run,total_mb\n0,1\n1,2\n");
    assert_eq!((s.steps, s.values), (vec![0, 1], vec![1.0 * MB, 2.0 * MB]));
    assert!(has(&w, "by position"), "{w:?}");
    let opts = ParseOptions {
        value_column: Some("2".into()),
        ..Default::default()
    };
    let (s, _) = parse_series("step,loss,x\n1,2,3\n2,2,4\n", &opts).unwrap();
    assert_eq!(s.values, vec![2.0, 2.0]);
    let e = parse("step,loss\n1,2\n").unwrap_err().to_string();
    assert!(e.contains("--value-column"), "{e}");
}

#[test]
fn csv_several_memory_columns_warns_and_prefers_heap() {
    let (s, w) = ok("step,rss_mb,heap_mb\n1,10,5\n2,11,5\n");
    assert_eq!(s.label, "heap live");
    assert!(has(&w, "several memory columns"), "{w:?}");
}

#[test]
fn csv_without_header() {
    let (s, w) = ok("0,100\n5,101\n10,102\n");
    assert_eq!(
        (s.steps, s.values),
        (vec![0, 5, 10], vec![100.0, 101.0, 102.0])
    );
    assert!(has(&w, "no header"));
    assert!(has(&w, "no unit given"));
    let (s, _) = ok("7e6\n8e6\n");
    assert_eq!((s.steps, s.values), (vec![0, 1], vec![7e6, 8e6]));
    let opts = ParseOptions {
        step_column: Some("2".into()),
        value_column: Some("1".into()),
        unit: Some(Unit::KiB),
        ..Default::default()
    };
    let (s, _) = parse_series("100,0\n101,1\n", &opts).unwrap();
    assert_eq!((s.steps, s.values), (vec![0, 1], vec![102400.0, 103424.0]));
}

#[test]
fn csv_comments_blank_lines_crlf_bom_quotes() {
    let (s, _) =
        ok("\u{feff}# memory log\r\nstep,rss_mb\r\n\r\n1,\"1,234\"\r\n# mid comment\r\n2,1235\r\n");
    assert_eq!(s.values, vec![1234.0 * MB, 1235.0 * MB]);
}

#[test]
fn csv_units_in_cells_and_unit_flag_wins() {
    let (s, _) = ok("step,memory\n1,1.5 GiB\n2,1536 MiB\n");
    assert_eq!(s.values, vec![1.5 * 1073741824.0, 1.5 * 1073741824.0]);
    let opts = ParseOptions {
        unit: Some(Unit::MiB),
        ..Default::default()
    };
    let (s, w) = parse_series("step,rss_mb\n1,100\n2,101\n", &opts).unwrap();
    assert_eq!(s.values, vec![100.0 * MIB, 101.0 * MIB]);
    assert!(has(&w, "--unit MiB"), "{w:?}");
}

#[test]
fn csv_truncated_last_line_is_kept_out_with_a_warning() {
    // Fewer fields.
    let (s, w) = ok("step,rss_mb,time\n1,100,0.5\n2,101,1.5\n3,10");
    assert_eq!(s.steps, vec![1, 2]);
    assert!(has(&w, "line 4") && has(&w, "truncated"), "{w:?}");
    // A number cut short without a final newline.
    let (s, w) = ok("step,rss_mb\n1,1000\n2,1001\n3,10");
    assert_eq!(s.steps, vec![1, 2]);
    assert!(has(&w, "line 4") && has(&w, "cut off"), "{w:?}");
    // A plausible last line without a newline is kept.
    let (s, w) = ok("step,rss_mb\n1,1000\n2,1001\n3,1002");
    assert_eq!(s.steps, vec![1, 2, 3]);
    assert!(w.is_empty(), "{w:?}");
    // A cut-off cell that is no longer a number.
    let (s, w) = ok("step,rss_mb\n1,1000\n2,1001\n3,1e");
    assert_eq!(s.steps, vec![1, 2]);
    assert!(has(&w, "line 4"), "{w:?}");
}

#[test]
fn csv_corrupt_middle_line_is_an_error_with_its_number() {
    let (line, msg) = line_err(
        "step,rss_mb\n1,100\n2,abc\n3,102\n",
        &ParseOptions::default(),
    );
    assert_eq!(line, 3);
    assert!(msg.contains("'abc'"), "{msg}");
    let (line, msg) = line_err("step,rss_mb\n1,100\n2\n3,102\n", &ParseOptions::default());
    assert_eq!(line, 3);
    assert!(msg.contains("1 fields, expected 2"), "{msg}");
    let (line, msg) = line_err(
        "step,rss_mb\n1,100\n2,1,234\n3,102\n",
        &ParseOptions::default(),
    );
    assert_eq!(line, 3);
    assert!(msg.contains("thousands separator"), "{msg}");
}

#[test]
fn csv_nan_inf_overflow_rejected_even_on_the_last_line() {
    for (bad, what) in [
        ("NaN", "finite"),
        ("nan", "finite"),
        ("inf", "finite"),
        ("-inf", "finite"),
        ("infinity", "finite"),
        ("1e400", "too large"),
        ("-1e400", "too large"),
    ] {
        for text in [
            format!("step,rss_mb\n1,100\n2,{bad}\n3,102\n"),
            format!("step,rss_mb\n1,100\n2,101\n3,{bad}\n"),
        ] {
            let (line, msg) = line_err(&text, &ParseOptions::default());
            let expected = if text.ends_with(&format!("3,{bad}\n")) {
                4
            } else {
                3
            };
            assert_eq!(line, expected, "{bad}: {msg}");
            assert!(msg.contains(what), "{bad}: {msg}");
        }
    }
}

#[test]
fn csv_steps_backwards_or_repeating_rejected() {
    let (line, msg) = line_err("step,rss\n1,5\n3,5\n2,5\n", &ParseOptions::default());
    assert_eq!(line, 4);
    assert!(
        msg.contains("goes backwards") && msg.contains("line 3"),
        "{msg}"
    );
    let (line, msg) = line_err("step,rss\n1,5\n3,5\n3,5\n", &ParseOptions::default());
    assert_eq!(line, 4);
    assert!(msg.contains("repeats"), "{msg}");
    let (line, msg) = line_err("step,rss\n1,5\n-2,5\n", &ParseOptions::default());
    assert_eq!(line, 3);
    assert!(msg.contains("step '-2'"), "{msg}");
}

#[test]
fn empty_inputs() {
    assert!(matches!(parse(""), Err(SeriesError::Empty(_))));
    assert!(matches!(parse("step,rss\n"), Err(SeriesError::Empty(_))));
    assert!(matches!(parse("\n\n"), Err(SeriesError::Empty(_))));
}

// ---- JSON lines ----

#[test]
fn jsonl_keys_nested_and_strings_with_units() {
    let (s, _) = ok("{\"step\": 1, \"rss_mb\": 100, \"time\": 10}\n{\"step\": 2, \"rss_mb\": 101.5, \"time\": 12}\n");
    assert_eq!(
        (s.steps.clone(), s.values.clone(), s.label.as_str()),
        (vec![1, 2], vec![100.0 * MB, 101.5 * MB], "RSS")
    );
    assert_eq!(s.seconds, Some(vec![0.0, 2.0]));
    let opts = ParseOptions {
        value_column: Some("mem.heap".into()),
        ..Default::default()
    };
    let (s, _) = parse_series("{\"iter\": 1, \"mem\": {\"heap\": \"1.5 GiB\", \"rss\": 9}}\n{\"iter\": 2, \"mem\": {\"heap\": \"2 GiB\", \"rss\": 9}}\n", &opts).unwrap();
    assert_eq!(s.values, vec![1.5 * 1073741824.0, 2.0 * 1073741824.0]);
    assert_eq!(s.label, "heap live");
}

#[test]
fn jsonl_truncated_last_line_warns() {
    let (s, w) =
        ok("{\"step\": 1, \"heap\": 100}\n{\"step\": 2, \"heap\": 101}\n{\"step\": 3, \"he");
    assert_eq!(s.steps, vec![1, 2]);
    assert!(has(&w, "line 3") && has(&w, "truncated"), "{w:?}");
}

#[test]
fn jsonl_corrupt_middle_and_bad_values_rejected_with_line_numbers() {
    let o = ParseOptions::default();
    let (line, _) = line_err(
        "{\"step\": 1, \"heap\": 100}\n{\"step\": 2, \"heap\"\n{\"step\": 3, \"heap\": 102}\n",
        &o,
    );
    assert_eq!(line, 2);
    for bad in ["NaN", "\"NaN\"", "\"inf\"", "1e400", "\"-\"", "null"] {
        let (line, msg) = line_err(
            &format!("{{\"step\": 1, \"heap\": 100}}\n{{\"step\": 2, \"heap\": {bad}}}\n"),
            &o,
        );
        assert_eq!(line, 2, "{bad}: {msg}");
    }
    let (line, msg) = line_err(
        "{\"step\": 2, \"heap\": 100}\n{\"step\": 1, \"heap\": 100}\n",
        &o,
    );
    assert_eq!(line, 2);
    assert!(msg.contains("backwards"), "{msg}");
    let (line, msg) = line_err(
        "{\"step\": 1, \"heap\": 100}\n{\"step\": 2}\n{\"step\": 3, \"heap\": 100}\n",
        &o,
    );
    assert_eq!(line, 2);
    assert!(msg.contains("no key 'heap'"), "{msg}");
    let (line, _) = line_err("{\"step\": 1, \"heap\": 100}\n[1, 2]\n", &o);
    assert_eq!(line, 2);
}

// ---- text logs ----

#[test]
fn log_with_user_pattern_and_thousands_separators() {
    let opts = ParseOptions {
        pattern: Some(r"Step (?P<step>\d+):\s+(?P<value>[\d,]+) MB".into()),
        unit: Some(Unit::MB),
        ..Default::default()
    };
    let text = "starting\nStep 10:   1,234 MB\nother line\nStep 20:   1,300 MB\n";
    let (s, w) = parse_series(text, &opts).unwrap();
    assert_eq!((s.steps, s.values), (vec![10, 20], vec![1234e6, 1300e6]));
    assert!(has(&w, "2 non-empty line(s) did not match"), "{w:?}");
}

#[test]
fn log_values_in_scientific_notation_are_read_as_written() {
    let text = "step 1 mem 1.5000e+03 MB\nstep 2 mem 1.5E3 MB\nstep 3 mem 2e-3 GB\n";
    let (s, _) = ok(text);
    assert_eq!(s.steps, vec![1, 2, 3]);
    assert_eq!(s.values, vec![1500e6, 1500e6, 2e6]);
}

#[test]
fn log_default_pattern_catches_common_lines() {
    let text = "\
2024-05-01 12:00:00 INFO step 100 | loss 2.31 | mem 1,234.5 MB
2024-05-01 12:00:10 INFO iter=110 allocated: 1.25 GiB reserved 2 GiB
[2024-05-01T12:00:20Z] global_step: 120 rss 1300 MiB
epoch 1 done
";
    assert_eq!(detect_format(text), SeriesFormat::Log);
    let (s, w) = ok(text);
    assert_eq!(s.steps, vec![100, 110, 120]);
    assert_eq!(s.values, vec![1234.5e6, 1.25 * 1073741824.0, 1300.0 * MIB]);
    assert_eq!(s.seconds, Some(vec![0.0, 10.0, 20.0]));
    assert!(has(&w, "1 non-empty line(s) did not match"), "{w:?}");
}

#[test]
fn log_unit_flag_overrides_unit_group_with_a_warning() {
    // PyTorch-style logs often print "MB" for 2^20 bytes.
    let opts = ParseOptions {
        unit: Some(Unit::MiB),
        ..Default::default()
    };
    let (s, w) = parse_series("step 1 mem 10 MB\nstep 2 mem 11 MB\n", &opts).unwrap();
    assert_eq!(s.values, vec![10.0 * MIB, 11.0 * MIB]);
    assert!(has(&w, "line 1 says MB but --unit MiB"), "{w:?}");
}

#[test]
fn log_pattern_errors() {
    let bad = |p: &str| {
        parse_series(
            "x",
            &ParseOptions {
                pattern: Some(p.into()),
                ..Default::default()
            },
        )
        .unwrap_err()
    };
    assert!(matches!(bad("(unclosed"), SeriesError::Pattern(_)));
    let e = bad(r"step (?P<step>\d+)");
    assert!(e.to_string().contains("'value'"), "{e}");
    assert!(matches!(
        parse("nothing here\nat all\n"),
        Err(SeriesError::Empty(_))
    ));
}

#[test]
fn log_bad_values_rejected_and_truncated_last_line_warned() {
    let opts = ParseOptions {
        pattern: Some(r"Step (?P<step>\S+): (?P<value>\S+)".into()),
        ..Default::default()
    };
    for bad in ["NaN", "inf", "1e400", "--3"] {
        let (line, msg) = line_err(&format!("Step 1: 5\nStep 2: {bad}\nStep 3: 7\n"), &opts);
        assert_eq!(line, 2, "{bad}: {msg}");
    }
    let (line, msg) = line_err("Step 1: 5\nStep 0: 6\n", &opts);
    assert_eq!(line, 2);
    assert!(msg.contains("backwards"));
    let (s, w) = parse_series("Step 1: 5000000\nStep 2: 5000001\nStep 3: 5,00", &opts).unwrap();
    assert_eq!(s.steps, vec![1, 2]);
    assert!(has(&w, "line 3"), "{w:?}");
}

#[test]
fn format_detection() {
    assert_eq!(detect_format("step,rss\n1,2\n"), SeriesFormat::Csv);
    assert_eq!(detect_format("1,2\n"), SeriesFormat::Csv);
    assert_eq!(detect_format("# c\n{\"step\":1}\n"), SeriesFormat::Jsonl);
    assert_eq!(detect_format("Step 1, mem 5 MB\n"), SeriesFormat::Log);
    assert_eq!(detect_format("step\trss_mb\n1\t2\n"), SeriesFormat::Csv);
    assert_eq!(
        detect_format("step,loss,rss_mb\n1,2.5,100\n"),
        SeriesFormat::Csv
    );
    assert_eq!(
        detect_format("step 1 mem 10 MB\nstep 2 mem 11 MB\n"),
        SeriesFormat::Log
    );
    assert_eq!(
        detect_format("Step 1, mem 5 MB\nStep 2, mem 6 MB\n"),
        SeriesFormat::Log
    );
}

#[test]
fn parsed_series_feeds_the_verdict() {
    let mut text = String::from("step,heap_mib\n");
    for i in 0..120 {
        text.push_str(&format!(
            "{},{}\n",
            i * 10,
            4000.0 - 3000.0 * (-(i as f64) / 5.0).exp()
        ));
    }
    let (s, _) = ok(&text);
    let r = crate::analysis::leak::analyze(&s, &Default::default());
    assert_eq!(
        r.verdict,
        crate::record::leak::Verdict::Plateau,
        "{}",
        r.sentence
    );
}

#[test]
fn negative_values_are_memory_relative_to_a_baseline() {
    // A table of cumulative deltas: recognised by name, negative values kept, marked relative.
    let (s, _) = ok("run,cumulative_mb\n0,-0.46\n1,0.02\n2,-1.76\n");
    assert_eq!(s.steps, vec![0, 1, 2]);
    assert_eq!(s.values, vec![-0.46 * MB, 0.02 * MB, -1.76 * MB]);
    assert!(s.relative);
    assert_eq!(s.unit, Some(Unit::MB));
    // A delta column that happens to stay positive is relative by its name.
    let (s, _) = ok("step,delta_mb\n0,1\n1,2\n");
    assert!(s.relative);
    // Absolute memory is not.
    let (s, _) = ok("step,rss_mb\n0,1\n1,2\n");
    assert!(!s.relative);
    let (s, _) = ok("Step 1: -5 MB\nStep 2: 3 MB\n");
    assert_eq!(s.values, vec![-5.0 * MB, 3.0 * MB]);
}

#[test]
fn python_logging_lines_are_a_text_log_not_csv() {
    let text: String = (0..20)
        .map(|i| {
            format!(
                "2024-01-01 10:00:{i:02},123 - INFO - Step {i}: {} MB\n",
                1000 + i
            )
        })
        .collect();
    let (s, _) = ok(&text);
    assert_eq!(s.steps.len(), 20);
    assert_eq!(s.values[3], 1003.0 * MB);
    assert_eq!(s.seconds.as_ref().map(|t| t[1]), Some(1.0));
}

#[test]
fn encodings_and_layouts_are_named() {
    let utf16: Vec<u8> = std::iter::once([0xffu8, 0xfe])
        .chain("step,rss\n1,2\n".encode_utf16().map(|u| u.to_le_bytes()))
        .flatten()
        .collect();
    let e = parse_reader(&mut &utf16[..], &ParseOptions::default()).unwrap_err();
    assert!(e.to_string().contains("UTF-16LE"), "{e}");
    let no_bom: Vec<u8> = "step,rss\n1,2\n"
        .encode_utf16()
        .flat_map(|u| u.to_le_bytes())
        .collect();
    let e = parse_reader(&mut &no_bom[..], &ParseOptions::default()).unwrap_err();
    assert!(e.to_string().contains("UTF-16LE"), "{e}");
    let e = parse("step,rss_mb\n").unwrap_err().to_string();
    assert!(e.contains("header (step, rss_mb) but no data rows"), "{e}");
    let e = parse("loss\n2.5\n2.4\n").unwrap_err().to_string();
    assert!(
        e.contains("one column, 'loss'") && e.contains("--value-column 1"),
        "{e}"
    );
    let e = parse("hello world\nnothing here\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("--format") && e.contains("--pattern"), "{e}");
    let (line, msg) = line_err("step,rss\n1,2\n2,3,4\n3,4\n", &ParseOptions::default());
    assert_eq!(line, 3);
    assert!(msg.contains("ragged"), "{msg}");
    let bad = b"step,rss\n1,2\n2,\xff\n3,4\n";
    let (line, msg) = match parse_reader(&mut &bad[..], &ParseOptions::default()) {
        Err(SeriesError::Line { line, message }) => (line, message),
        other => panic!("{other:?}"),
    };
    assert_eq!(line, 3);
    assert!(msg.contains("UTF-8"), "{msg}");
}

//! The README's example outputs are today's: each ```text block that starts with `$ memscope …`
//! (or `$ cargo run --release -- …`) is run with the binary under test and compared with what it
//! prints. Deterministic commands (`models`, `estimate`) must match to the byte; a timed run
//! (`bench`) must match with every number read as "a number" and column padding ignored (its
//! figures change from run to run, its rows, columns and wording may not), and its warnings
//! (noise, outliers) left out. A line `…` alone in the README stands for lines it leaves out.
//! The commands run with an empty peaks cache (`MEMSCOPE_CACHE_DIR`), as on a fresh machine.

mod support;

use support::memscope;

const README: &str = include_str!("../README.md");

/// (command line after `$ `, the block's lines after it).
fn examples() -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    let mut lines = README.lines();
    while let Some(l) = lines.next() {
        if l != "```text" && l != "```console" {
            continue;
        }
        let block: Vec<String> = lines
            .by_ref()
            .take_while(|l| *l != "```")
            .map(String::from)
            .collect();
        if let Some(cmd) = block.first().and_then(|f| f.strip_prefix("$ ")) {
            if cmd.starts_with("memscope ") || cmd.starts_with("cargo run --release -- ") {
                out.push((cmd.to_string(), block[1..].to_vec()));
            }
        }
    }
    out
}

/// Numbers as `#` (signs dropped, digits with the `.` and `,` inside them) and byte units as `B`, runs of
/// spaces and of box-drawing rules as one.
fn shape(line: &str) -> String {
    // The header's instruction set is the machine's (avx2, avx512 + avx512_bf16, …).
    let isa_free;
    let line = match line.split_once(" threads · ") {
        Some((head, rest)) => {
            let tail = rest.split_once(" · ").map_or("", |(_, t)| t);
            isa_free = format!("{head} threads · ISA · {tail}");
            isa_free.as_str()
        }
        None => line,
    };
    let mut s = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if matches!(c, '+' | '-' | '−') && chars.peek().is_some_and(|n| n.is_ascii_digit()) {
            continue; // a sign: a figure's direction changes from run to run
        }
        if c.is_ascii_digit() {
            while chars
                .peek()
                .is_some_and(|n| n.is_ascii_digit() || *n == '.' || *n == ',')
            {
                chars.next();
            }
            s.push('#');
        } else if !(matches!(c, ' ' | '─' | '═') && s.ends_with(c)) {
            s.push(c);
        }
    }
    // A small figure crosses a unit from run to run (1.5 KiB, 900 B): any byte unit reads alike.
    for unit in ["# KiB", "# MiB", "# GiB", "# TiB"] {
        s = s.replace(unit, "# B");
    }
    s.trim().to_string()
}

/// Whether `got` matches `want`, where a `want` line `…` matches any run of lines.
fn matches(want: &[String], got: &[String], eq: &dyn Fn(&str, &str) -> bool) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((w, rest)) if w == "…" => (0..=got.len()).any(|i| matches(rest, &got[i..], eq)),
        Some((w, rest)) => !got.is_empty() && eq(w, &got[0]) && matches(rest, &got[1..], eq),
    }
}

#[test]
fn the_shape_ignores_numbers_and_padding_only() {
    assert_eq!(
        shape("│ prefill  ┆   9.17 ┆ 8.98 ± 3.04 ┆ 33.8% │"),
        shape("│ prefill ┆ 12.5 ┆ 1,234.5 ± 0.01 ┆ 5% │")
    );
    assert_ne!(shape("│ prefill ┆ 9.17 │"), shape("│ decode ┆ 9.17 │"));
    assert_eq!(
        shape("f32 · 2 threads · avx2 · 2 warm-up"),
        shape("f32 · 2 threads · avx512 + avx512_bf16 · 2 warm-up")
    );
    assert_ne!(
        shape("f32 · 2 threads · avx2 · 2 warm-up"),
        shape("f32 · 2 threads · avx2 · 3 cold")
    );
    assert_eq!(shape("┆ 1.5 KiB ┆"), shape("┆ 384 B ┆"));
    assert_eq!(shape("┆ +0.0% ┆"), shape("┆ -6.4% ┆"));
    assert_ne!(shape("next-token loss"), shape("next token loss"));
    assert_ne!(shape("┆ 1.5 KiB ┆"), shape("┆ 1.5 ms ┆"));
    let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let eq = |a: &str, b: &str| a == b;
    assert!(matches(
        &l(&["a", "…", "d"]),
        &l(&["a", "b", "c", "d"]),
        &eq
    ));
    assert!(!matches(&l(&["a", "…", "d"]), &l(&["a", "b", "c"]), &eq));
    assert!(!matches(&l(&["a", "b"]), &l(&["a", "b", "c"]), &eq));
}

#[test]
fn every_example_output_in_the_readme_is_what_the_command_prints_today() {
    let examples = examples();
    let commands: Vec<&str> = examples.iter().map(|(c, _)| c.as_str()).collect();
    assert!(
        examples.len() >= 4,
        "the README's examples were not found: {commands:?}"
    );
    for (cmd, want) in &examples {
        let args: Vec<&str> = cmd
            .trim_start_matches("cargo run --release -- ")
            .trim_start_matches("memscope ")
            .split_whitespace()
            .collect();
        // No cached peaks: the Compute line reads the same on every machine.
        let cache = tempfile::tempdir().unwrap();
        let out = memscope()
            .args(&args)
            .env("MEMSCOPE_CACHE_DIR", cache.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let timed = args[0] == "bench";
        // A timed run's warnings (noise, outliers) come and go from run to run.
        let keep = |l: &&str| !(timed && (l.trim_start().starts_with("! ") || *l == "Warnings:"));
        let mut got: Vec<String> = text.lines().filter(keep).map(String::from).collect();
        let mut want: Vec<String> = want
            .iter()
            .map(|s| s.as_str())
            .filter(keep)
            .map(String::from)
            .collect();
        // The blank line before a warnings block stays when the block is left out: a run with
        // warnings and one without end alike.
        for lines in [&mut got, &mut want] {
            while lines.last().is_some_and(|l| l.trim().is_empty()) {
                lines.pop();
            }
        }
        // Figures follow the machine: times, and bytes too (gemm's packing buffers are sized by
        // the instruction set's tiles: 1.5 MiB for gpt2-small on AVX2, 3.0 MiB on AVX-512);
        // the words, the rows and the units must read as the README says.
        let eq = |w: &str, g: &str| shape(w) == shape(g);
        assert!(
            matches(&want, &got, &eq),
            "README example `{cmd}` is not what it prints today:\n--- README\n{}\n--- today\n{}",
            want.join("\n"),
            got.join("\n")
        );
    }
}

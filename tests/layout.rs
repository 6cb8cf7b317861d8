//! The layout rules of ARCHITECTURE.md, checked on the source tree:
//! - no import circle between files (every `crate::…` and `super::…` path, `use` trees included,
//!   resolved to the file that defines it; a strongly connected set of two or more files fails);
//! - capabilities never import the CLI (`crate::cli` appears only under `src/cli/`, `main.rs`);
//! - `analysis/` and `report/` never import candle;
//! - no file holds more than 600 lines of non-test code unless its header comment says why
//!   ("over 600 lines because …"); `*_tests.rs` and `tests.rs` files are test code;
//! - the Python extension (`python/`, what `python -m memscope run` preloads into a training
//!   process) has no candle in its dependency tree (`cargo tree -p memscope-python`);
//! - every file is written through `src/export/`: no `File::create`, `fs::write`, `fs::rename`
//!   or `OpenOptions` elsewhere in non-test code (the extension's included);
//! - no command-line flag is declared twice (a shared flag lives in one struct commands flatten).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `a/b` (relative, no extension).
fn rel(p: &Path) -> String {
    let r = p.strip_prefix(SRC).unwrap().with_extension("");
    r.to_string_lossy().into_owned()
}

/// The module path of a file: `a/b.rs` → [a, b]; `a/mod.rs` → [a]; `a/b_tests.rs` (a `#[path]`
/// test module of `a/b.rs`) → [a, b, tests].
fn module_of(file: &str) -> Vec<String> {
    let mut segs: Vec<String> = file.split('/').map(String::from).collect();
    let last = segs.pop().unwrap();
    if let Some(stem) = last.strip_suffix("_tests") {
        segs.push(stem.to_string());
        segs.push("tests".into());
    } else if !matches!(last.as_str(), "mod" | "lib" | "main") {
        segs.push(last);
    }
    segs
}

/// The file that defines the longest prefix of `segs`.
fn resolve(segs: &[String], files: &BTreeSet<String>) -> Option<String> {
    for n in (1..=segs.len()).rev() {
        let base = segs[..n].join("/");
        for cand in [base.clone(), format!("{base}/mod")] {
            if files.contains(&cand) {
                return Some(cand);
            }
        }
    }
    None
}

/// Drops `//` comments (doc comments included) and the contents of string literals.
fn strip(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        for (i, c) in line.char_indices() {
            if !in_str && c == '/' && line[i..].starts_with("//") {
                break;
            }
            if c == '"' && prev != '\\' && !(prev == '\'' && line[i + 1..].starts_with('\'')) {
                in_str = !in_str;
                kept.push(c);
            } else if !in_str {
                kept.push(c);
            }
            prev = c;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Paths of a `use` tree starting at `s` (after `crate::` or `super::`), each prefixed by `prefix`.
fn use_tree(s: &[u8], mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let mut segs = prefix;
    loop {
        while i < s.len() && s[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= s.len() {
            out.push(segs);
            return i;
        }
        if s[i] == b'{' {
            i += 1;
            loop {
                i = use_tree(s, i, segs.clone(), out);
                while i < s.len() && (s[i].is_ascii_whitespace() || s[i] == b',') {
                    i += 1;
                }
                if i >= s.len() || s[i] == b'}' {
                    return i + 1;
                }
            }
        }
        if s[i] == b'*' {
            out.push(segs);
            return i + 1;
        }
        let start = i;
        while i < s.len() && (s[i].is_ascii_alphanumeric() || s[i] == b'_') {
            i += 1;
        }
        if start == i {
            out.push(segs);
            return i;
        }
        let word = std::str::from_utf8(&s[start..i]).unwrap();
        if word != "self" {
            segs.push(word.to_string());
        }
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            out.push(segs);
            return i;
        }
    }
}

fn sources() -> BTreeMap<String, String> {
    let mut paths = Vec::new();
    rust_files(Path::new(SRC), &mut paths);
    paths
        .iter()
        .map(|p| (rel(p), std::fs::read_to_string(p).unwrap()))
        .collect()
}

/// file → the files it names.
fn edges(srcs: &BTreeMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let files: BTreeSet<String> = srcs.keys().cloned().collect();
    let mut g = BTreeMap::new();
    for (file, text) in srcs {
        let text = strip(text);
        let b = text.as_bytes();
        let me = module_of(file);
        let mut targets = BTreeSet::new();
        for kw in ["crate::", "super::"] {
            let mut from = 0;
            while let Some(k) = text[from..].find(kw) {
                let at = from + k;
                from = at + kw.len();
                let word_start =
                    at == 0 || !(b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_');
                if !word_start || (kw == "super::" && at >= 2 && &b[at - 2..at] == b"::") {
                    continue; // part of a longer path (`super::super::`, handled as one)
                }
                let mut prefix = if kw == "crate::" {
                    vec![]
                } else {
                    me[..me.len().saturating_sub(1)].to_vec()
                };
                let mut i = from;
                while text[i..].starts_with("super::") {
                    prefix.pop();
                    i += "super::".len();
                }
                if kw == "super::" && text[i..].trim_start().starts_with('*') {
                    continue; // `use super::*` in a test module: its own parent
                }
                let mut paths = Vec::new();
                use_tree(b, i, prefix, &mut paths);
                for segs in paths {
                    if let Some(t) = resolve(&segs, &files) {
                        if &t != file {
                            targets.insert(t);
                        }
                    }
                }
            }
        }
        g.insert(file.clone(), targets);
    }
    g
}

/// Strongly connected sets of two or more files (Tarjan).
fn circles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flatten() {
            if !t.index.contains_key(w.as_str()) {
                visit(t, w);
                let lw = t.low[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w.as_str()) {
                let iw = t.index[w.as_str()];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: vec![],
        on: BTreeSet::new(),
        out: vec![],
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn the_checker_finds_a_circle_through_use_trees_and_super() {
    let srcs: BTreeMap<String, String> = [
        ("a/mod", "pub mod x; pub mod y;"),
        ("a/x", "use crate::{b::{self, z::Q}, c};"),
        (
            "a/y",
            "// use crate::a::x;\nfn f() { let s = \"crate::a::x\"; }",
        ),
        ("b/mod", "pub mod z;"),
        ("b/z", "use super::super::a::x::P;"),
        ("c", ""),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let g = edges(&srcs);
    assert_eq!(
        g["a/x"],
        BTreeSet::from(["b/mod".into(), "b/z".into(), "c".into()])
    );
    assert!(
        g["a/y"].is_empty(),
        "comments and strings are not imports: {:?}",
        g["a/y"]
    );
    assert_eq!(
        circles(&g),
        vec![vec!["a/x".to_string(), "b/z".to_string()]]
    );
}

#[test]
fn no_import_circle_between_files() {
    let c = circles(&edges(&sources()));
    assert!(
        c.is_empty(),
        "import circles (move what both need down into a file both import): {c:#?}"
    );
}

#[test]
fn capabilities_never_import_the_cli() {
    let bad: Vec<String> = sources()
        .into_iter()
        .filter(|(f, t)| {
            !f.starts_with("cli/") && f != "main" && f != "lib" && strip(t).contains("crate::cli")
        })
        .map(|(f, _)| f)
        .collect();
    assert!(
        bad.is_empty(),
        "these capability files import crate::cli: {bad:?}"
    );
}

#[test]
fn analysis_and_report_never_import_candle() {
    let bad: Vec<String> = sources()
        .into_iter()
        .filter(|(f, t)| {
            (f.starts_with("analysis/") || f.starts_with("report/"))
                && ["candle_core", "candle_nn", "candle::", "use candle"]
                    .iter()
                    .any(|n| strip(t).contains(n))
        })
        .map(|(f, _)| f)
        .collect();
    assert!(
        bad.is_empty(),
        "analysis/report must not import candle: {bad:?}"
    );
}

#[test]
fn no_file_over_600_lines_of_non_test_code_without_a_reason() {
    let bad: Vec<String> = sources()
        .into_iter()
        .filter(|(f, _)| !f.ends_with("_tests") && !f.ends_with("/tests"))
        .filter_map(|(f, t)| {
            let code = t.split("#[cfg(test)]").next().unwrap().lines().count();
            let header: String = t.lines().take_while(|l| l.starts_with("//!")).collect();
            (code > 600 && !header.to_lowercase().contains("over 600 lines because"))
                .then(|| format!("{f}.rs: {code} lines"))
        })
        .collect();
    assert!(
        bad.is_empty(),
        "split these or say why in the header comment: {bad:?}"
    );
}

/// `kernels::simd::vector` compiles for AVX2 only what is inlined into it: a closure left out
/// of line runs as baseline SSE2 code (most of them were, silently), so every call passes an
/// `#[inline(always)]` closure.
#[test]
fn every_avx2_closure_is_inlined_into_the_avx2_function() {
    let mut calls = 0;
    let bad: Vec<String> = sources()
        .into_iter()
        .flat_map(|(f, t)| {
            let mut bad = Vec::new();
            for (i, _) in t.match_indices("vector(") {
                let before = &t[..i];
                if before.ends_with("fn ") || before.ends_with('_') || before.ends_with("::") {
                    continue;
                }
                if before.ends_with(|c: char| c.is_alphanumeric()) {
                    continue; // another name ending in `vector`
                }
                calls += 1;
                if !t[i + "vector(".len()..]
                    .trim_start()
                    .starts_with("#[inline(always)]")
                {
                    let line = before.lines().count();
                    bad.push(format!("{f}.rs:{line}"));
                }
            }
            bad
        })
        .collect();
    assert!(
        calls >= 10,
        "found only {calls} calls of vector(: the scan is broken"
    );
    assert!(
        bad.is_empty(),
        "pass `vector(#[inline(always)] || …)` so the closure is compiled for AVX2: {bad:?}"
    );
}

/// Non-test code of every file: test files (`*_tests.rs`, `tests.rs`) left out, and each file cut
/// at its first `#[cfg(test)]` (test modules sit at the end of a file).
fn non_test_sources() -> BTreeMap<String, String> {
    sources()
        .into_iter()
        .filter(|(f, _)| !f.ends_with("_tests") && !f.ends_with("/tests") && f != "tests")
        .map(|(f, t)| {
            let code = t.split("#[cfg(test)]").next().unwrap().to_string();
            (f, code)
        })
        .collect()
}

/// The floors ARCHITECTURE.md states under `## Floors`: room → floor (1 = the bottom). A room is
/// a top-level folder of src/ or a file directly in it (`units`, `spec`).
fn floors_of(md: &str) -> BTreeMap<String, usize> {
    let section = md
        .split("\n## Floors")
        .nth(1)
        .expect("ARCHITECTURE.md has a `## Floors` section");
    let mut out = BTreeMap::new();
    for line in section.lines().take_while(|l| !l.starts_with("## ")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(n) = cells.get(1).and_then(|c| c.parse::<usize>().ok()) else {
            continue;
        };
        for room in cells[2].split(',') {
            out.insert(room.trim().trim_matches('`').to_string(), n);
        }
    }
    out
}

/// The room of a file: `model/config/hf` → `model`, `units` → `units`.
fn room(file: &str) -> &str {
    file.split('/').next().unwrap()
}

/// Every import between rooms that does not go strictly down a floor (rooms on one floor do not
/// import each other), and every room without a floor. `lib` and `main` sit above all floors.
fn upward(g: &BTreeMap<String, BTreeSet<String>>, floors: &BTreeMap<String, usize>) -> Vec<String> {
    let mut bad = BTreeSet::new();
    for (f, targets) in g {
        let a = room(f);
        if a == "lib" || a == "main" {
            continue;
        }
        for t in targets {
            let b = room(t);
            if a == b {
                continue;
            }
            match (floors.get(a), floors.get(b)) {
                (Some(fa), Some(fb)) if fb < fa => {}
                (Some(fa), Some(fb)) => {
                    bad.insert(format!(
                        "{a} (floor {fa}) imports {b} (floor {fb}): {f}.rs names {t}.rs"
                    ));
                }
                _ => {
                    bad.insert(format!("no floor for {a} or {b} in ARCHITECTURE.md"));
                }
            }
        }
    }
    bad.into_iter().collect()
}

#[test]
fn the_floor_checker_finds_an_upward_import_and_a_room_without_a_floor() {
    let floors = floors_of("# x\n## Floors\n| floor | rooms |\n|---|---|\n| 1 | `units`, `kernels` |\n| 2 | `model` |\n## Next\n| 3 | `cli` |\n");
    assert_eq!(
        floors,
        BTreeMap::from([
            ("units".into(), 1),
            ("kernels".into(), 1),
            ("model".into(), 2)
        ])
    );
    let g = |pairs: &[(&str, &str)]| -> BTreeMap<String, BTreeSet<String>> {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in pairs {
            g.entry(a.to_string()).or_default().insert(b.to_string());
        }
        g
    };
    assert!(upward(
        &g(&[("model/gpt2", "kernels/linear"), ("lib", "cli/mod")]),
        &floors
    )
    .is_empty());
    let up = upward(&g(&[("kernels/linear", "model/scope")]), &floors);
    assert_eq!(up.len(), 1, "{up:?}");
    assert!(
        up[0].contains("kernels (floor 1) imports model (floor 2)"),
        "{up:?}"
    );
    let same = upward(&g(&[("kernels/linear", "units")]), &floors);
    assert_eq!(
        same.len(),
        1,
        "one floor's rooms do not import each other: {same:?}"
    );
    let none = upward(&g(&[("cli/mod", "model/gpt2")]), &floors);
    assert!(none[0].contains("no floor"), "{none:?}");
}

#[test]
fn every_room_imports_only_lower_floors() {
    let md =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/ARCHITECTURE.md")).unwrap();
    let floors = floors_of(&md);
    let srcs = non_test_sources();
    let rooms: BTreeSet<&str> = srcs.keys().map(|f| room(f)).collect();
    let missing: Vec<&&str> = rooms
        .iter()
        .filter(|r| !floors.contains_key(**r) && **r != "lib" && **r != "main")
        .collect();
    assert!(
        missing.is_empty(),
        "rooms with no floor in ARCHITECTURE.md: {missing:?}"
    );
    let bad = upward(&edges(&srcs), &floors);
    assert!(
        bad.is_empty(),
        "imports that go up or sideways (move what both need down a floor): {bad:#?}"
    );
}

/// Functions longer than `max` lines in non-test code whose doc comment does not say why
/// ("over N lines because …"): (file, function, lines).
fn long_functions(file: &str, code: &str, max: usize) -> Vec<String> {
    let stripped = strip(code);
    let lines: Vec<&str> = stripped.lines().collect();
    let raw: Vec<&str> = code.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let t = t
            .strip_prefix("pub(crate) ")
            .or_else(|| t.strip_prefix("pub(super) "))
            .or_else(|| t.strip_prefix("pub "))
            .unwrap_or(t);
        let t = t.strip_prefix("const ").unwrap_or(t);
        let t = t.strip_prefix("unsafe ").unwrap_or(t);
        let Some(rest) = t.strip_prefix("fn ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body: from the first `{` at or after the signature to its matching `}`.
        let (mut depth, mut opened, mut end) = (0i64, false, None);
        'scan: for (j, body) in lines.iter().enumerate().skip(i) {
            for c in body.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened => break 'scan, // a declaration without a body
                    _ => {}
                }
                if opened && depth == 0 {
                    end = Some(j);
                    break 'scan;
                }
            }
        }
        let Some(end) = end else { continue };
        let n = end - i + 1;
        if n <= max {
            continue;
        }
        let doc: String = raw[..i]
            .iter()
            .rev()
            .take_while(|l| {
                let l = l.trim_start();
                l.starts_with("///") || l.starts_with("#[")
            })
            .map(|l| l.to_lowercase())
            .collect();
        if !doc.contains("lines because") {
            out.push(format!("{file}.rs: fn {name}: {n} lines"));
        }
    }
    out
}

#[test]
fn the_long_function_checker_counts_bodies_and_reads_the_reason() {
    let body = "    let x = 1;\n".repeat(10);
    let long = format!("pub fn f(a: u8) -> u8 {{\n{body}    a\n}}\nfn g() {{}}\n");
    assert_eq!(
        long_functions("m", &long, 12),
        vec!["m.rs: fn f: 13 lines".to_string()]
    );
    assert!(long_functions("m", &long, 13).is_empty());
    let why = format!("/// Does f.\n/// Over 12 lines because it is one table.\n{long}");
    assert!(long_functions("m", &why, 12).is_empty());
    let braces_in_strings = format!("fn s() {{\n    let t = \"}}}}\";\n{body}}}\n");
    assert_eq!(long_functions("m", &braces_in_strings, 5).len(), 1);
}

/// Functions over 150 lines that are still to be split (each is one function with near-copies
/// or several jobs inside). The list only shrinks: a function split below 150 lines must leave it,
/// and no other function may join it.
const NOT_YET_SPLIT: &[&str] = &[];

#[test]
fn no_function_over_150_lines_without_a_reason() {
    let long: Vec<String> = non_test_sources()
        .iter()
        .flat_map(|(f, t)| long_functions(f, t, 150))
        .collect();
    let name = |l: &String| {
        l.rsplit_once(": ")
            .map_or(l.clone(), |(n, _)| n.to_string())
    };
    let new: Vec<&String> = long
        .iter()
        .filter(|l| !NOT_YET_SPLIT.contains(&name(l).as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "split these, or say why in the doc comment (\"over 150 lines because …\"): {new:#?}"
    );
    let split: Vec<&&str> = NOT_YET_SPLIT
        .iter()
        .filter(|n| !long.iter().any(|l| name(l) == **n))
        .collect();
    assert!(
        split.is_empty(),
        "these are no longer over 150 lines: take them off NOT_YET_SPLIT: {split:?}"
    );
}

/// The crates of `package`'s normal dependency tree (`cargo tree`) that belong to the
/// engine: candle's and gemm's.
fn engine_crates(package: &str) -> Vec<String> {
    let tree = cargo_tree(&["-p", package, "-e", "normal"]);
    let mut found: Vec<String> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| name.starts_with("candle") || *name == "gemm")
        .map(String::from)
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn the_python_extension_links_no_candle() {
    // The check finds the engine where it is: in the tool itself.
    assert!(
        engine_crates("memscope").contains(&"candle-core".to_string()),
        "the check no longer sees candle in the tool's own tree"
    );
    let found = engine_crates("memscope-python");
    assert!(
        found.is_empty(),
        "python/ depends on the engine ({found:?}): its memscope dependency must stay \
         `default-features = false`, and what it uses must not need the `engine` feature"
    );
}

/// The calls that create or replace a file.
const WRITE_CALLS: &[&str] = &["File::create", "fs::write", "fs::rename", "OpenOptions"];
/// Files that may make them outside `src/export/`, each with its reason.
const WRITES_ELSEWHERE: &[(&str, &str)] = &[(
    "sweep/limits",
    "a cgroup's control files (memory.max): kernel settings written in place, not outputs",
)];

/// `file:line: call` for each write call in `srcs` outside `export/` and the allowed files.
fn write_sites(srcs: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (file, code) in srcs {
        if file == "export" || file.starts_with("export/") {
            continue;
        }
        if WRITES_ELSEWHERE.iter().any(|(f, _)| f == file) {
            continue;
        }
        for (i, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            for call in WRITE_CALLS {
                if line.contains(call) {
                    found.push(format!("{file}:{}: {call}", i + 1));
                }
            }
        }
    }
    found
}

#[test]
fn the_write_site_checker_finds_a_write_outside_export() {
    let srcs: BTreeMap<String, String> = [
        (
            "cli/x".to_string(),
            "fn f() { std::fs::write(p, t).unwrap(); }\n// fs::write in a comment".to_string(),
        ),
        (
            "export/write".to_string(),
            "fn g() { std::fs::rename(a, b); }".to_string(),
        ),
        (
            "sweep/limits".to_string(),
            "fn h() { std::fs::write(p, t); }".to_string(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(write_sites(&srcs), ["cli/x:1: fs::write"]);
}

#[test]
fn every_file_is_written_through_export() {
    let mut srcs = non_test_sources();
    let ext = concat!(env!("CARGO_MANIFEST_DIR"), "/python/src/lib.rs");
    srcs.insert(
        "../python/src/lib".into(),
        std::fs::read_to_string(ext).unwrap(),
    );
    let found = write_sites(&srcs);
    assert!(
        found.is_empty(),
        "files written outside src/export/ (write them with export::write_atomic, \
         write_bytes_atomic or open_stream): {found:#?}"
    );
}

/// Flags a command declares again on purpose: the value is a list where the shared flag takes
/// one (`sweep`'s grid axes; `estimate --dtype`, one column per dtype).
const FLAGS_REDECLARED: &[(&str, &str, &str)] = &[
    ("sweep", "mode", "a grid axis: a comma list"),
    ("sweep", "batch", "a grid axis: a list or ranges"),
    ("sweep", "seq", "a grid axis: a list or ranges"),
    ("sweep", "dtype", "a grid axis: a comma list"),
    ("sweep", "warmup", "a grid axis: a list or ranges"),
    ("sweep", "grad-accum", "a grid axis: a list or ranges"),
    ("estimate", "dtype", "one column per dtype: a comma list"),
];

/// Every long flag declared in `files` (file → source): flag → the files declaring it. A
/// declaration is an `#[arg(...long...)]` attribute on a field (its name, or `long = "…"`).
fn flag_declarations(files: &BTreeMap<String, String>) -> BTreeMap<String, Vec<String>> {
    let mut flags: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (file, code) in files {
        let mut rest = code.as_str();
        while let Some(i) = rest.find("#[arg(") {
            rest = &rest[i + "#[arg(".len()..];
            let end = rest.find(")]").unwrap_or(rest.len());
            let attr = &rest[..end];
            let long = attr
                .split(',')
                .map(str::trim)
                .find(|a| *a == "long" || a.starts_with("long ") || a.starts_with("long="));
            let Some(long) = long else { continue };
            let field = rest[end..]
                .lines()
                .skip(1)
                .map(str::trim)
                .find(|l| !l.starts_with("#[") && !l.starts_with("///"))
                .and_then(|l| l.strip_prefix("pub "))
                .and_then(|l| l.split(':').next())
                .unwrap_or("?");
            let name = match long.split_once('=') {
                Some((_, v)) => v.trim().trim_matches('"').to_string(),
                None => field.replace('_', "-"),
            };
            flags.entry(name).or_default().push(file.clone());
        }
    }
    flags
}

/// Flags declared more than once, less the allowed redeclarations.
fn flags_declared_twice(files: &BTreeMap<String, String>) -> Vec<String> {
    flag_declarations(files)
        .into_iter()
        .filter_map(|(flag, mut at)| {
            at.retain(|f| {
                !FLAGS_REDECLARED
                    .iter()
                    .any(|(cmd, fl, _)| *fl == flag && f == &format!("cli/{cmd}"))
            });
            (at.len() > 1).then(|| format!("--{flag}: {at:?}"))
        })
        .collect()
}

#[test]
fn the_flag_checker_finds_a_flag_declared_twice() {
    let files: BTreeMap<String, String> = [
        ("cli/a".to_string(), "    /// Help\n    #[arg(long, short)]\n    pub quiet: bool,\n    #[arg(long = \"out-dir\")]\n    pub dir: PathBuf,".to_string()),
        ("cli/b".to_string(), "    #[arg(long, default_value_t = 0)]\n    pub quiet: bool,\n    #[arg(value_name = \"X\")]\n    pub dir: PathBuf,".to_string()),
        ("cli/sweep".to_string(), "    #[arg(long)]\n    pub out_dir: String,\n    #[arg(long)]\n    pub batch: String,".to_string()),
        ("cli/c".to_string(), "    #[arg(long)]\n    pub batch: usize,".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(
        flags_declared_twice(&files),
        [
            "--out-dir: [\"cli/a\", \"cli/sweep\"]",
            "--quiet: [\"cli/a\", \"cli/b\"]"
        ]
    );
}

#[test]
fn no_flag_is_declared_twice() {
    let cli: BTreeMap<String, String> = non_test_sources()
        .into_iter()
        .filter(|(f, _)| f.starts_with("cli/"))
        .collect();
    assert!(
        flag_declarations(&cli).len() > 40,
        "the checker no longer sees the CLI's flags"
    );
    let twice = flags_declared_twice(&cli);
    assert!(
        twice.is_empty(),
        "flags declared more than once (declare a shared flag once in src/cli/flags.rs and \
         flatten it; a command's own help goes in #[command(mut_arg(…))]): {twice:#?}"
    );
}

/// Each crate of memscope's tree with the features it is built with (`cargo tree --format`),
/// over the edges `edges` (`normal,build`: what `cargo build` compiles; `normal,build,dev`: what
/// `cargo test` compiles).
fn features_built(edges: &str) -> String {
    cargo_tree(&["-p", "memscope", "-e", edges, "--format", "{p} [{f}]"])
}

/// `cargo tree --locked --prefix none ARGS`'s output (it fails the test when cargo does). Not
/// `--offline`: on a fresh machine `cargo test` has fetched only the root package's crates, and
/// the tree of python/'s needs its own (pyo3's) fetched once.
fn cargo_tree(args: &[&str]) -> String {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "--prefix", "none"])
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The crates `cargo build`'s tree builds with other features than `cargo test`'s does (so are
/// built twice, with everything above them): `name version: build [..] / test [..]`.
fn built_twice(build: &str, test: &str) -> Vec<String> {
    let parse = |text: &str| -> std::collections::BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| {
                let l = l.trim_end_matches(" (*)");
                let (pkg, feats) = l.split_once(" [")?;
                // "name vX.Y.Z (path)" → "name vX.Y.Z"
                let id = pkg.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
                Some((id, feats.trim_end_matches(']').to_string()))
            })
            .collect()
    };
    let test = parse(test);
    parse(build)
        .into_iter()
        .filter_map(|(id, f)| match test.get(&id) {
            Some(t) if *t != f => Some(format!("{id}: build [{f}] / test [{t}]")),
            _ => None,
        })
        .collect()
}

#[test]
fn cargo_build_and_cargo_test_build_one_candle() {
    // Planted: a crate a dev-dependency adds a feature to is found.
    let planted = built_twice(
        "candle-core v0.11.1 [default]\nonce_cell v1.21.4 [alloc,race,std]\n",
        "candle-core v0.11.1 [default]\nonce_cell v1.21.4 [alloc,default,race,std] (*)\n",
    );
    assert_eq!(
        planted,
        ["once_cell v1.21.4: build [alloc,race,std] / test [alloc,default,race,std]"]
    );
    let twice = built_twice(
        &features_built("normal,build"),
        &features_built("normal,build,dev"),
    );
    assert!(
        twice.is_empty(),
        "dev-dependencies turn on features in crates the CLI shares with them, so `cargo build` \
         after `cargo test` (pip install ./python in .ci/run) builds them and everything above \
         them again: turn those features on in Cargo.toml's [dependencies] too ({twice:?})"
    );
}

/// Every source file ARCHITECTURE.md names: its path, its name in a folder's row (`link.rs`),
/// or a brace list (`src/cli/{bench,fit}.rs`); a folder's `mod.rs` / `__init__.py` by the
/// folder. Test modules (`tests.rs`, `*_tests.rs`) belong to the file they test.
fn unnamed_in(md: &str, files: &[String]) -> Vec<String> {
    let mut listed: BTreeSet<String> = BTreeSet::new();
    for (i, _) in md.match_indices('{') {
        let Some(len) = md[i..].find('}') else {
            continue;
        };
        let prefix: String = md[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_alphanumeric() || "/_.".contains(*c))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let ext: String = md[i + len + 1..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '.')
            .collect();
        for n in md[i + 1..i + len].split(',') {
            listed.insert(format!("{prefix}{}{ext}", n.trim()));
        }
    }
    files
        .iter()
        .filter(|f| {
            let (dir, name) = f.rsplit_once('/').unwrap_or(("", f));
            if name == "tests.rs" || name.ends_with("_tests.rs") {
                return false;
            }
            if name == "mod.rs" || name == "__init__.py" {
                let room = dir.rsplit('/').next().unwrap_or(dir);
                return !(md.contains(f.as_str())
                    || md.contains(&format!("{dir}/"))
                    || md.contains(&format!("`{room}`")));
            }
            !(md.contains(f.as_str())
                || listed.contains(f.as_str())
                || md.contains(&format!("`{name}`"))
                || md.contains(&format!("/{name}`")))
        })
        .cloned()
        .collect()
}

#[test]
fn the_file_checker_finds_a_file_architecture_does_not_name() {
    let md = "| `src/cli/{bench,fit}.rs` | … `link.rs` … | `src/torch/` |";
    let files: Vec<String> = [
        "src/cli/bench.rs",
        "src/cli/fit.rs",
        "src/torch/link.rs",
        "src/torch/mod.rs",
        "src/torch/tests.rs",
        "src/torch/nodes.rs",
    ]
    .map(String::from)
    .to_vec();
    assert_eq!(unnamed_in(md, &files), ["src/torch/nodes.rs"]);
}

#[test]
fn architecture_names_every_source_file() {
    let root = env!("CARGO_MANIFEST_DIR");
    let md = std::fs::read_to_string(format!("{root}/ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    for (top, ext) in [("src", "rs"), ("python/memscope", "py")] {
        let mut stack = vec![std::path::PathBuf::from(format!("{root}/{top}"))];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    if p.file_name().is_some_and(|n| n != "__pycache__") {
                        stack.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == ext) {
                    let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                    files.push(rel);
                }
            }
        }
    }
    files.sort();
    let missing = unnamed_in(&md, &files);
    assert!(
        missing.is_empty(),
        "source files ARCHITECTURE.md does not name (add each to its room's row): {missing:?}"
    );
}

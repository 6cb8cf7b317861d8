//! The HTML report rendered in a real browser: headless Chromium (Debian's `chromium`; `.ci/run`
//! installs it). The test fails — never skips — when Chromium is missing. It writes a report from
//! every kind of fixture input (tests/fixtures/, written by the real binary), then:
//! - the file is self-contained (no script, no external URL, nothing loaded from the network);
//! - Chromium's DOM of the page holds every expected chart (`<svg data-chart=…>`), each with
//!   drawn marks (the train fixture has per-phase marks: the stacked memory chart; the generate
//!   and leak fixtures predate them: the memory timeline);
//! - Chromium logs no console message for the page (checked to catch one on a page that has one);
//! - a 1200×3000 screenshot is taken (kept at target/report_html/report.png to look at).

mod support;
use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::process::Output;
use support::fixture;

const EXPECTED: &[&str] = &[
    "timing-step",
    "timing-forward",
    "timing-backward",
    "timing-optimizer",
    "timing-prefill",
    "timing-decode",
    "memory-stacked",
    "memory-timeline",
    "memory-breakdown",
    "scaling-batch",
    "scaling-seq",
    "leak-3",
    "roofline-7",
    "watch-memory",
];

fn chromium() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join("chromium"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("chromium not found on PATH: install chromium: apt-get install chromium")
        })
}

/// Runs headless Chromium on a file with `args`, its own profile dir, stderr logging on.
fn browse(profile: &Path, page: &Path, args: &[String]) -> Output {
    let out = std::process::Command::new("timeout")
        .arg("180")
        .arg(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Console messages Chromium logged for the page (`…:CONSOLE:line] "message", source: …`;
/// Chromium tags console.error as INFO, so every console message counts: a page without a
/// script should log none).
fn console_errors(stderr: &str) -> Vec<String> {
    stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(String::from)
        .collect()
}

/// The `<svg …>…</svg>` whose data-chart is `id` in `dom`.
fn chart<'a>(dom: &'a str, id: &str) -> Option<&'a str> {
    let at = dom.find(&format!("data-chart=\"{id}\""))?;
    let start = dom[..at].rfind("<svg")?;
    let end = dom[at..].find("</svg>")? + at;
    Some(&dom[start..end])
}

#[test]
fn report_renders_in_chromium_with_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let files = [
        "bench-train.json",
        "bench-generate.json",
        "leak-record.json",
        "leak-verdict.json",
        "sweep.jsonl",
        "estimate.json",
        "roofline.json",
        "watch-gpu.json",
    ];
    let out = Command::cargo_bin("memscope")
        .unwrap()
        .current_dir(fixture(""))
        .arg("report")
        .args(files)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();

    // Self-contained: no script, nothing fetched (the SVG namespace is a name, not a fetch).
    assert!(!html.contains("<script"), "the report needs no JavaScript");
    let without_ns = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
    for bad in ["http://", "https://", " src=", "@import", "url("] {
        assert!(
            !without_ns.contains(bad),
            "external reference {bad:?} in the report"
        );
    }

    // What Chromium built from it.
    let profile = dir.path().join("profile");
    let dump = browse(&profile, &page, &["--dump-dom".into()]);
    let dom = String::from_utf8(dump.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&dump.stderr).to_string();
    assert!(dom.contains("memscope report"), "empty DOM: {stderr}");
    for id in EXPECTED {
        let svg = chart(&dom, id).unwrap_or_else(|| panic!("chart {id} missing from the page"));
        let marks = [
            "<circle",
            "<polyline",
            "<rect",
            "<path",
            "<polygon",
            "<line",
        ]
        .iter()
        .map(|m| svg.matches(m).count())
        .sum::<usize>();
        assert!(marks >= 5, "chart {id} is empty ({marks} marks)");
        assert!(svg.contains("<text"), "chart {id} has no axis labels");
    }
    // The watch's GPU lines (the fixture carries NVML figures; this machine has no GPU).
    let w = chart(&dom, "watch-memory").unwrap();
    for l in [
        "RSS (summed)",
        "PSS (summed)",
        "GPU device used",
        "GPU, watched processes",
    ] {
        assert!(w.contains(l), "watch chart lacks {l}");
    }
    // The stacked chart of the train fixture (it has phase marks; the generate and leak
    // fixtures predate them and are drawn on the timeline): its 22 steps thinned to the first
    // and last few, the peak labelled.
    let st = chart(&dom, "memory-stacked").unwrap();
    for l in [
        "highest heap peak in a phase run",
        "by allocating phase",
        "⋯",
    ] {
        assert!(st.contains(l), "stacked chart lacks {l}");
    }
    assert!(
        st.matches("<polygon").count() >= 4,
        "stacked chart has no stacked areas"
    );
    assert_eq!(
        console_errors(&stderr),
        Vec::<String>::new(),
        "console errors"
    );

    // The console check sees errors when a page has them.
    let bad = dir.path().join("bad.html");
    std::fs::write(
        &bad,
        "<html><body><script>console.error('deliberate')</script></body></html>",
    )
    .unwrap();
    let b = browse(&profile, &bad, &["--dump-dom".into()]);
    assert!(
        !console_errors(&String::from_utf8_lossy(&b.stderr)).is_empty(),
        "the console check missed a deliberate error: {}",
        String::from_utf8_lossy(&b.stderr)
    );

    // The screenshot, kept for people to look at.
    let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/report_html");
    std::fs::create_dir_all(&keep).unwrap();
    let png = keep.join("report.png");
    let _ = std::fs::remove_file(&png);
    browse(
        &profile,
        &page,
        &[
            format!("--screenshot={}", png.display()),
            "--window-size=1200,3000".into(),
        ],
    );
    let bytes = std::fs::read(&png).expect("chromium wrote no screenshot");
    assert_eq!(&bytes[1..4], b"PNG");
    assert!(
        bytes.len() > 50_000,
        "screenshot too small: {} bytes",
        bytes.len()
    );
    std::fs::copy(&page, keep.join("report.html")).unwrap();
}

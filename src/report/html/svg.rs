//! The pieces every chart shares: the palette (one colour per input file, the same in every chart),
//! drawing with plotters into an SVG string, and the `<figure>` that carries a chart's id
//! (`data-chart`, which tests and readers look for) and its caption.

use plotters::prelude::*;

/// Errors from plotters' drawing calls (an SVG string backend fails only on a bug).
pub type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// Colour-blind-safe (Okabe–Ito) series colours, by input index.
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
];

pub const RED: RGBColor = RGBColor(200, 30, 30);
pub const GREY: RGBColor = RGBColor(150, 150, 150);

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// `#rrggbb` of a series colour, for the HTML legend swatches.
pub fn css(i: usize) -> String {
    let RGBColor(r, g, b) = color(i);
    format!("#{r:02x}{g:02x}{b:02x}")
}

pub const MIB: f64 = 1048576.0;

/// Draws a `w × h` chart into an SVG string: `draw` gets the root area (already white).
pub fn draw_svg(
    w: u32,
    h: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, plotters::coord::Shift>) -> DrawResult,
) -> anyhow::Result<String> {
    let mut buf = String::new();
    {
        let root = SVGBackend::with_string(&mut buf, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
        draw(&root).map_err(|e| anyhow::anyhow!("drawing a chart: {e}"))?;
        root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    Ok(buf)
}

/// A chart in the page: the SVG tagged with `data-chart="id"`, a title for screen readers and
/// the caption under it (HTML, already escaped by the caller).
pub fn figure(id: &str, title: &str, svg: &str, caption: &str) -> String {
    let tagged = svg.replacen(
        "<svg ",
        &format!(
            "<svg data-chart=\"{}\" role=\"img\" aria-label=\"{}\" ",
            esc(id),
            esc(title)
        ),
        1,
    );
    format!("<figure>\n{tagged}\n<figcaption>{caption}</figcaption>\n</figure>\n")
}

/// HTML-escapes text.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            _ => o.push(c),
        }
    }
    o
}

/// A deterministic horizontal jitter in [-0.5, 0.5) for the i-th raw sample (no randomness in a
/// report: the same input draws the same page).
pub fn jitter(i: usize) -> f64 {
    // Van der Corput sequence in base 2: evenly spread, never random.
    let mut n = i + 1;
    let (mut q, mut bk) = (0.0, 0.5);
    while n > 0 {
        if n & 1 == 1 {
            q += bk;
        }
        n >>= 1;
        bk /= 2.0;
    }
    q - 0.5
}

/// Axis range with 5% headroom; a flat or empty range gets a visible height.
pub fn padded(lo: f64, hi: f64) -> (f64, f64) {
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    let span = hi - lo;
    if span <= 0.0 {
        let d = if hi.abs() > 0.0 { hi.abs() * 0.05 } else { 1.0 };
        return (lo - d, hi + d);
    }
    (lo - span * 0.05, hi + span * 0.05)
}

/// The legend as HTML under a chart: a swatch per label.
pub fn legend(labels: &[(usize, String)]) -> String {
    labels
        .iter()
        .map(|(i, l)| {
            format!(
                "<span class=\"key\"><span class=\"sw\" style=\"background:{}\"></span>{}</span>",
                css(*i),
                esc(l)
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

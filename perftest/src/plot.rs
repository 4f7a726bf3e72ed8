//! `--plot FILE.svg`: latency and bandwidth against message size, side by side, one line
//! per run (per test, and per reference program under `--compare-ucx`), a hand-written
//! SVG with no dependencies. Both axes are logarithmic: sizes in powers of two, values on
//! a 1-2-5 grid (decades only when the range is wide).

use std::fmt::Write as _;
use std::path::Path;

use crate::report::Kind;
use crate::results::Series;

const W: f64 = 980.0;
const PANEL_W: f64 = 380.0;
const PANEL_H: f64 = 300.0;
const TOP: f64 = 60.0;
const LEFT: [f64; 2] = [80.0, 570.0];
/// Distinct, colour-blind-friendly line colours (Okabe-Ito), then repeated dashed.
const COLORS: [&str; 7] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000",
];

/// Writes the SVG for `series` to `path`.
pub fn write_svg(path: &Path, series: &[Series]) -> Result<(), String> {
    let svg = render(series)?;
    std::fs::write(path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `1536` as `1.5K`, `4194304` as `4M`.
fn size_label(n: f64) -> String {
    let (v, unit) = if n >= (1u64 << 30) as f64 {
        (n / (1u64 << 30) as f64, "G")
    } else if n >= (1 << 20) as f64 {
        (n / (1 << 20) as f64, "M")
    } else if n >= 1024.0 {
        (n / 1024.0, "K")
    } else {
        (n, "")
    };
    if (v - v.round()).abs() < 1e-9 {
        format!("{}{unit}", v.round())
    } else {
        format!("{v:.1}{unit}")
    }
}

fn value_label(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{}k", v / 1e3)
    } else if v >= 1.0 {
        format!("{v}")
    } else {
        // 0.5, 0.02, 0.001: as many decimals as the value needs.
        let s = format!("{v:.6}");
        s.trim_end_matches('0').to_string()
    }
}

/// A log axis: its range and tick values.
struct LogAxis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl LogAxis {
    /// Sizes: powers of two, at most 10 labelled ticks.
    fn sizes(min: f64, max: f64) -> LogAxis {
        let (mut a, mut b) = (min.log2().floor(), max.log2().ceil());
        if a == b {
            a -= 1.0;
            b += 1.0;
        }
        let step = ((b - a) / 9.0).ceil().max(1.0);
        let ticks = (0..)
            .map(|k| a + k as f64 * step)
            .take_while(|e| *e <= b + 1e-9)
            .map(f64::exp2)
            .collect();
        LogAxis {
            lo: a.exp2(),
            hi: b.exp2(),
            ticks,
        }
    }

    /// Values: a 1-2-5 grid around [min, max]; decades alone when that is too many.
    fn values(min: f64, max: f64) -> LogAxis {
        let grid = |e: i32| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e));
        let (e0, e1) = (min.log10().floor() as i32, max.log10().ceil() as i32);
        let all: Vec<f64> = (e0 - 1..=e1).flat_map(grid).collect();
        let lo = all
            .iter()
            .copied()
            .rfind(|v| *v <= min * 1.0001)
            .unwrap_or(min);
        let mut hi = all
            .iter()
            .copied()
            .find(|v| *v >= max * 0.9999)
            .unwrap_or(max);
        if hi <= lo {
            hi = lo * 2.0;
        }
        let mut ticks: Vec<f64> = all
            .iter()
            .copied()
            .filter(|v| *v >= lo * 0.9999 && *v <= hi * 1.0001)
            .collect();
        if ticks.len() > 10 {
            ticks.retain(|v| (v.log10() - v.log10().round()).abs() < 1e-9);
        }
        if ticks.len() < 4 {
            // A narrow range: a finer grid between the 1-2-5 steps.
            let fine = |e: i32| [1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0].map(|m| m * 10f64.powi(e));
            ticks = (e0 - 1..=e1)
                .flat_map(fine)
                .filter(|v| *v >= lo * 0.9999 && *v <= hi * 1.0001)
                .collect();
        }
        LogAxis { lo, hi, ticks }
    }

    /// Position of `v` in [0, 1].
    fn at(&self, v: f64) -> f64 {
        (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
    }
}

/// The SVG document.
pub fn render(series: &[Series]) -> Result<String, String> {
    let pts = |f: &dyn Fn(&(usize, f64, f64)) -> f64| -> Vec<f64> {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(f))
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect()
    };
    let sizes = pts(&|p| p.0 as f64);
    if sizes.is_empty() {
        return Err("--plot: no results to draw".into());
    }
    let range = |v: &[f64]| {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(0.0, f64::max);
        (min, max)
    };
    let (smin, smax) = range(&sizes);
    let x = LogAxis::sizes(smin, smax);
    let overhead = series.iter().any(|s| s.kind == Kind::Bandwidth);
    let panels = [
        (
            "Latency",
            if overhead {
                "latency / overhead per message (µs)"
            } else {
                "latency (µs)"
            },
            pts(&|p| p.1),
            1usize,
        ),
        ("Bandwidth", "bandwidth (MB/s)", pts(&|p| p.2), 2usize),
    ];
    let legend_rows = series.len().div_ceil(2);
    let h = TOP + PANEL_H + 70.0 + 22.0 * legend_rows as f64 + 10.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="16" font-weight="bold">rucx-perftest: latency and bandwidth against message size</text>"#,
        W / 2.0
    );
    for (i, (title, ylabel, values, col)) in panels.iter().enumerate() {
        let x0 = LEFT[i];
        let (vmin, vmax) = if values.is_empty() {
            (1.0, 10.0)
        } else {
            range(values)
        };
        let y = LogAxis::values(vmin, vmax);
        let px = |v: f64| x0 + x.at(v) * PANEL_W;
        let py = |v: f64| TOP + PANEL_H - y.at(v) * PANEL_H;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="14" font-weight="bold">{title}</text>"#,
            x0 + PANEL_W / 2.0,
            TOP - 10.0
        );
        // Grid and ticks.
        for t in &x.ticks {
            let gx = px(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#e0e0e0"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                TOP + PANEL_H,
                TOP + PANEL_H + 16.0,
                size_label(*t)
            );
        }
        for t in &y.ticks {
            let gy = py(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                x0 + PANEL_W,
                x0 - 6.0,
                gy + 4.0,
                value_label(*t)
            );
        }
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="#404040"/>"##
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">message size (bytes, log scale)</text>"#,
            x0 + PANEL_W / 2.0,
            TOP + PANEL_H + 36.0
        );
        let (lx, ly) = (x0 - 58.0, TOP + PANEL_H / 2.0);
        let _ = writeln!(
            s,
            r#"<text x="{lx:.1}" y="{ly:.1}" text-anchor="middle" transform="rotate(-90 {lx:.1} {ly:.1})">{ylabel}, log scale</text>"#
        );
        // The lines.
        for (k, ser) in series.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            let dash = if k >= COLORS.len() {
                r#" stroke-dasharray="6 3""#
            } else {
                ""
            };
            let p: Vec<(f64, f64)> = ser
                .points
                .iter()
                .map(|p| (p.0 as f64, if *col == 1 { p.1 } else { p.2 }))
                .filter(|(a, b)| *a > 0.0 && b.is_finite() && *b > 0.0)
                .map(|(a, b)| (px(a), py(b)))
                .collect();
            if p.is_empty() {
                continue;
            }
            let coords: Vec<String> = p.iter().map(|(a, b)| format!("{a:.1},{b:.1}")).collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                coords.join(" ")
            );
            for (a, b) in &p {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{a:.1}" cy="{b:.1}" r="3" fill="{color}"/>"#
                );
            }
        }
    }
    // Legend, two entries per row.
    let ly0 = TOP + PANEL_H + 64.0;
    for (k, ser) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let dash = if k >= COLORS.len() {
            r#" stroke-dasharray="6 3""#
        } else {
            ""
        };
        let lx = LEFT[k % 2];
        let ly = ly0 + 22.0 * (k / 2) as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{:.1}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><circle cx="{:.1}" cy="{ly}" r="3" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            lx + 30.0,
            lx + 15.0,
            lx + 38.0,
            ly + 4.0,
            esc(&ser.label)
        );
    }
    s.push_str("</svg>\n");
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_and_labels() {
        let x = LogAxis::sizes(8.0, 4.0 * 1048576.0);
        assert_eq!(x.lo, 8.0);
        assert_eq!(x.hi, 4194304.0);
        assert!(x.ticks.len() <= 10 && x.ticks[0] == 8.0, "{:?}", x.ticks);
        let y = LogAxis::values(0.13, 0.9);
        assert_eq!((y.lo, y.hi), (0.1, 1.0));
        assert_eq!(y.ticks, vec![0.1, 0.2, 0.5, 1.0]);
        let y = LogAxis::values(0.16, 0.19);
        assert_eq!((y.lo, y.hi), (0.1, 0.2));
        let want = [0.1, 0.15, 0.2];
        assert_eq!(y.ticks.len(), 3, "{:?}", y.ticks);
        assert!(y.ticks.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12));
        let y = LogAxis::values(0.05, 40000.0);
        assert!(y
            .ticks
            .iter()
            .all(|v| (v.log10() - v.log10().round()).abs() < 1e-9));
        assert_eq!(size_label(4194304.0), "4M");
        assert_eq!(size_label(1536.0), "1.5K");
        assert_eq!(value_label(0.02), "0.02");
        assert_eq!(value_label(20000.0), "20k");
        assert!((x.at(8.0)).abs() < 1e-12 && (x.at(4194304.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn svg_has_both_panels_a_line_per_series_and_a_legend() {
        let s = vec![
            Series {
                label: "rucx tag_lat [posix]".into(),
                kind: Kind::Latency,
                points: vec![(8, 0.1, 70.0), (64, 0.2, 300.0), (1024, 0.0, 0.0)],
            },
            Series {
                label: "ucx <1.22>".into(),
                kind: Kind::Latency,
                points: vec![(8, 0.15, 50.0), (64, 0.25, 250.0)],
            },
        ];
        let svg = render(&s).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<polyline").count(),
            4,
            "two panels x two lines"
        );
        assert!(svg.contains(">Latency<") && svg.contains(">Bandwidth<"));
        assert!(svg.contains("rucx tag_lat [posix]") && svg.contains("ucx &lt;1.22&gt;"));
        assert!(render(&[]).is_err());
    }
}

//! SVG charts of a suite's results: for each case, weft's speed against each
//! peer's as a ratio on a log scale, 1.0 marked, so that a reader sees at a
//! glance where weft wins (a green bar to the right of 1.0) and where it loses
//! (a red bar to the left).
//!
//! The chart is drawn from the JSON report, never from the live run, so the
//! same code charts a fresh run (`--json FILE` also writes `FILE.svg`, the
//! extension replaced) and any report already in `benchmarks/`
//! (`weft-bench chart FILE.json ...`).
//!
//! Which figures become bars: every metric measured in time (`ns`, lower is
//! better) or as a rate (`per_second`, higher is better); counts and
//! percentages have no better direction in general and are left to the
//! tables. Each contender whose name starts with `weft` is set against each
//! contender whose name does not, wherever both have a median. The bar is the
//! speed-up of weft over the peer: `peer time / weft time`, or
//! `weft rate / peer rate`.

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde_json::Value;

use crate::harness::Unit;

/// One bar: `label` names the case (and metric), `peer` the contender weft is
/// set against, `speedup` how many times as fast weft is.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub label: String,
    pub ours: String,
    pub peer: String,
    pub speedup: f64,
}

/// The bars of one report, in the report's case order.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub bars: Vec<Bar>,
}

/// Whether higher or lower values of a metric are better.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Better {
    Lower,
    Higher,
}

impl Better {
    /// The direction of `unit`: times and rates have one; counts and
    /// percentages have none in general (an allocation count, a share of
    /// spurious wake-ups), so they are left to the tables.
    pub(crate) fn of(unit: Unit) -> Option<Better> {
        match unit {
            Unit::Ns => Some(Better::Lower),
            Unit::Rate => Some(Better::Higher),
            Unit::Count | Unit::Percent => None,
        }
    }

    /// How many times as fast `ours` is as `theirs`: `theirs / ours` for
    /// times, `ours / theirs` for rates.
    pub(crate) fn speedup(self, ours: f64, theirs: f64) -> f64 {
        match self {
            Better::Lower => theirs / ours,
            Better::Higher => ours / theirs,
        }
    }
}

/// A median from a `{contender: number | null}` map.
pub(crate) fn median_of(map: &Value, contender: &str) -> Option<f64> {
    map.get(contender)?
        .as_f64()
        .filter(|x| x.is_finite() && *x > 0.0)
}

/// Whether contender `name` is one of weft's (`weft`, `weft-hyper`,
/// `weft-k0`, ...) rather than a peer's.
pub(crate) fn is_ours(name: &str) -> bool {
    name.starts_with("weft")
}

/// A report's JSON, its contenders and its cases.
pub(crate) struct Report<'a> {
    pub json: &'a Value,
    pub contenders: Vec<&'a str>,
    pub cases: &'a [Value],
}

impl<'a> Report<'a> {
    /// Checks that `json` has the fields every report has.
    pub(crate) fn of(json: &'a Value) -> Result<Report<'a>, String> {
        let contenders = json["contenders"]
            .as_array()
            .ok_or("the report has no contenders")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let cases = json["cases"].as_array().ok_or("the report has no cases")?;
        Ok(Report {
            json,
            contenders,
            cases,
        })
    }

    /// The suite (`command`) that wrote the report.
    pub(crate) fn command(&self) -> &'a str {
        self.json["command"].as_str().unwrap_or("?")
    }

    /// A top-level count (`cores`, `workers`, `rounds`); 0 where missing.
    pub(crate) fn count(&self, field: &str) -> u64 {
        self.json[field].as_u64().unwrap_or(0)
    }
}

/// Parses a report's text.
pub(crate) fn parse_json(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("not a report: {e}"))
}

/// One metric of a case as a report holds it.
pub(crate) struct MetricView<'a> {
    /// The case's name, with the metric's in brackets when it has one.
    pub label: String,
    /// What one value covers (`iter`, `sum`, ...).
    pub per: &'a str,
    /// `None` for a unit name this harness does not know.
    pub unit: Option<Unit>,
    /// `{contender: number | null}`.
    pub medians: &'a Value,
}

/// The metrics of one case of a report, in order.
pub(crate) fn metrics(case: &Value) -> Vec<MetricView<'_>> {
    fn view<'a>(case: &str, metric: &str, m: &'a Value, medians: &'a Value) -> MetricView<'a> {
        let label = if metric.is_empty() {
            case.to_string()
        } else {
            format!("{case} [{metric}]")
        };
        // Reports from before the case-level unit was written have times there.
        let unit = m["unit"].as_str().map_or(Some(Unit::Ns), Unit::from_name);
        MetricView {
            label,
            per: m["per"].as_str().unwrap_or(""),
            unit,
            medians,
        }
    }
    let name = case["name"].as_str().unwrap_or("?");
    match case.get("metrics").and_then(Value::as_array) {
        Some(list) => list
            .iter()
            .map(|m| view(name, m["metric"].as_str().unwrap_or(""), m, &m["median"]))
            .collect(),
        // A case's only metric.
        None => vec![view(name, "", case, &case["median_ns"])],
    }
}

/// Reads the bars out of a report written by the harness.
pub fn from_json(text: &str) -> Result<Chart, String> {
    let v = parse_json(text)?;
    let report = Report::of(&v)?;
    let (ours, peers): (Vec<&str>, Vec<&str>) = report.contenders.iter().partition(|c| is_ours(c));

    let mut bars = Vec::new();
    for case in report.cases {
        for m in metrics(case) {
            let Some(dir) = m.unit.and_then(Better::of) else {
                continue;
            };
            for o in &ours {
                let Some(w) = median_of(m.medians, o) else {
                    continue;
                };
                for p in &peers {
                    let Some(x) = median_of(m.medians, p) else {
                        continue;
                    };
                    bars.push(Bar {
                        label: m.label.clone(),
                        ours: o.to_string(),
                        peer: p.to_string(),
                        speedup: dir.speedup(w, x),
                    });
                }
            }
        }
    }
    let command = report.command();
    let cores = report.count("cores");
    let workers = report.count("workers");
    Ok(Chart {
        title: format!(
            "weft-bench {command}: weft's speed over each peer's ({cores} cores, {workers} workers)"
        ),
        bars,
    })
}

/// Where the chart of the report at `json` goes: the same name, `.svg`.
pub fn svg_path(json: &Path) -> PathBuf {
    json.with_extension("svg")
}

const ROW: u32 = 18;
const LABELS: u32 = 420;
const WIDTH: u32 = 1100;

/// Draws `chart` as an SVG file at `path`.
pub fn render(chart: &Chart, path: &Path) -> Result<(), String> {
    if chart.bars.is_empty() {
        return Err("nothing to chart: no case has a time or a rate for weft and a peer".into());
    }
    let n = chart.bars.len() as u32;
    let height = 90 + ROW * n;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    let err = |e: DrawingAreaErrorKind<_>| format!("cannot draw {}: {e:?}", path.display());
    root.fill(&WHITE).map_err(err)?;

    let lo = chart
        .bars
        .iter()
        .map(|b| b.speedup)
        .fold(1.0f64, f64::min)
        .max(1e-3);
    let hi = chart
        .bars
        .iter()
        .map(|b| b.speedup)
        .fold(1.0f64, f64::max)
        .min(1e3);
    // At least a factor of 2 either side of 1.0, so small differences do not
    // fill the width and look large.
    let (lo, hi) = ((lo / 1.25).min(0.5), (hi * 1.25).max(2.0));

    let (labels, plot) = root.split_horizontally(LABELS);
    let mut cc = ChartBuilder::on(&plot)
        .caption(&chart.title, ("sans-serif", 15))
        .margin_right(20)
        .margin_top(10)
        .x_label_area_size(40)
        .build_cartesian_2d((lo..hi).log_scale(), 0..n)
        .map_err(err)?;
    cc.configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("speed-up: peer time / weft time (right of 1.0: weft faster)")
        .x_labels(12)
        .x_label_formatter(&tick_label)
        .draw()
        .map_err(err)?;

    // Bars grow from the 1.0 line; row 0 is at the top.
    let row = |i: usize| n - 1 - i as u32;

    // Every other case on a shaded band, across the labels and the plot, so a
    // case's bars read as one group.
    let band = RGBColor(236, 240, 246);
    let mut group = 0;
    for (i, b) in chart.bars.iter().enumerate() {
        if i > 0 && b.label != chart.bars[i - 1].label {
            group += 1;
        }
        if group % 2 == 1 {
            let (x0, y0) = cc.backend_coord(&(lo, row(i) + 1));
            let (x1, y1) = cc.backend_coord(&(hi, row(i)));
            root.draw(&Rectangle::new(
                [(0, y0), (x1 + LABELS as i32 - (x0 - x0.min(0)), y1)],
                band.filled(),
            ))
            .map_err(err)?;
        }
    }
    cc.draw_series(chart.bars.iter().enumerate().map(|(i, b)| {
        let color = if b.speedup >= 1.0 {
            RGBColor(46, 139, 87)
        } else {
            RGBColor(200, 60, 50)
        };
        let y = row(i);
        let mut r = Rectangle::new([(1.0, y), (b.speedup.clamp(lo, hi), y + 1)], color.filled());
        r.set_margin(2, 2, 0, 0);
        r
    }))
    .map_err(err)?;
    cc.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, 0), (1.0, n)],
        BLACK.stroke_width(2),
    )))
    .map_err(err)?;

    // Value at the end of each bar, label in the left column at the same height.
    let text = ("sans-serif", 12).into_font();
    let mut previous = "";
    for (i, b) in chart.bars.iter().enumerate() {
        let (bx, by) = cc.backend_coord(&(b.speedup.clamp(lo, hi), row(i)));
        let (_, top) = cc.backend_coord(&(1.0, row(i) + 1));
        let mid = (by + top) / 2 - 6;
        let value = speedup_text(b.speedup);
        let vx = if b.speedup >= 1.0 { bx + 4 } else { bx - 46 };
        plot.draw(&Text::new(value, (vx - LABELS as i32, mid), text.clone()))
            .map_err(err)?;
        let first = b.label != previous;
        previous = &b.label;
        let vs = if b.ours == "weft" {
            format!("vs {}", b.peer)
        } else {
            format!("{} vs {}", b.ours, b.peer)
        };
        let line = if first {
            format!("{}  {vs}", b.label)
        } else {
            vs
        };
        let style = if first {
            ("sans-serif", 12).into_font().color(&BLACK)
        } else {
            ("sans-serif", 12).into_font().color(&RGBColor(90, 90, 90))
        };
        labels
            .draw(&Text::new(
                line,
                (LABELS as i32 - 8, mid),
                style.pos(anchored(HPos::Right)),
            ))
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// A speed-up as `2.37x`, with a third decimal below 0.1 so that a large loss
/// does not print as `0.00x`.
pub(crate) fn speedup_text(x: f64) -> String {
    if x < 0.1 {
        format!("{x:.3}x")
    } else {
        format!("{x:.2}x")
    }
}

/// Labels only the 1-2-5 ticks of the log axis; the others stay as grid lines.
fn tick_label(x: &f64) -> String {
    let mantissa = x / 10f64.powf(x.log10().floor());
    if [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|t| (mantissa - t).abs() < 1e-6)
    {
        format!("{x}x")
    } else {
        String::new()
    }
}

/// Text hanging from its anchor point, aligned left, centred or right by `h`.
pub(crate) fn anchored(h: HPos) -> Pos {
    Pos::new(h, VPos::Top)
}

/// Charts the report at `json` into the SVG beside it and returns its path.
pub fn chart_file(json: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(json)
        .map_err(|e| format!("cannot read {}: {e}", json.display()))?;
    let chart = from_json(&text).map_err(|e| format!("{}: {e}", json.display()))?;
    let out = svg_path(json);
    render(&chart, &out)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{
      "command": "demo", "cores": 2, "workers": 2, "rounds": 3,
      "contenders": ["weft", "tokio", "may"],
      "cases": [
        {"name": "fast", "per": "iter", "median_ns": {"weft": 50, "tokio": 100, "may": null}},
        {"name": "slow", "per": "iter", "median_ns": {"weft": 300, "tokio": 100, "may": 150}},
        {"name": "multi", "per": "second", "median_ns": {"weft": 1, "tokio": 1, "may": 1},
         "metrics": [
           {"metric": "rate", "unit": "per_second", "median": {"weft": 200, "tokio": 100, "may": 400}},
           {"metric": "errors", "unit": "count", "median": {"weft": 1, "tokio": 2, "may": 3}}
         ]},
        {"name": "allocs", "per": "10k msgs", "unit": "count", "median_ns": {"weft": 1, "tokio": 2}}
      ]
    }"#;

    #[test]
    fn bars_are_speedups_in_the_better_direction() {
        let c = from_json(REPORT).unwrap();
        let got: Vec<(String, String, f64)> = c
            .bars
            .iter()
            .map(|b| (b.label.clone(), b.peer.clone(), b.speedup))
            .collect();
        assert_eq!(
            got,
            vec![
                ("fast".into(), "tokio".into(), 2.0),
                ("slow".into(), "tokio".into(), 100.0 / 300.0),
                ("slow".into(), "may".into(), 0.5),
                ("multi [rate]".into(), "tokio".into(), 2.0),
                ("multi [rate]".into(), "may".into(), 0.5),
            ]
        );
    }

    #[test]
    fn every_weft_contender_meets_every_peer() {
        let c = from_json(
            r#"{"command": "http", "contenders": ["weft-a", "peer-a", "weft-b"],
                "cases": [{"name": "c", "median_ns": {"weft-a": 2, "peer-a": 4, "weft-b": 8}}]}"#,
        )
        .unwrap();
        let pairs: Vec<(&str, &str)> = c
            .bars
            .iter()
            .map(|b| (b.ours.as_str(), b.peer.as_str()))
            .collect();
        assert_eq!(pairs, vec![("weft-a", "peer-a"), ("weft-b", "peer-a")]);
    }

    #[test]
    fn renders_an_svg_with_every_bar() {
        let dir = std::env::temp_dir().join(format!("weft-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let json = dir.join("demo.json");
        std::fs::write(&json, REPORT).unwrap();
        let svg = chart_file(&json).unwrap();
        assert_eq!(svg, dir.join("demo.svg"));
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.starts_with("<svg"));
        for needle in ["2.00x", "0.33x", "0.50x", "multi [rate]", "vs may"] {
            assert!(text.contains(needle), "{needle} missing from the chart");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn speedups_keep_digits_when_small() {
        assert_eq!(speedup_text(2.371), "2.37x");
        assert_eq!(speedup_text(0.0081), "0.008x");
    }

    #[test]
    fn a_report_with_nothing_to_compare_is_an_error() {
        let c = from_json(r#"{"command": "x", "contenders": ["weft"], "cases": []}"#).unwrap();
        assert!(render(&c, Path::new("/nonexistent/x.svg")).is_err());
        assert!(from_json("not json").is_err());
    }
}

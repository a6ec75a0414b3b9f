//! How each contender's medians change with the number of workers: one
//! suite's reports at several `--workers` counts, drawn as a grid of small
//! line charts (`weft-bench scaling OUT.svg FILE.json ...`) and printed as a
//! markdown table for `BENCHMARKS.md`.
//!
//! A panel per case and metric with a better direction (times: lower is
//! better; rates: higher is better; counts and percentages are left out, as in
//! the [`chart`](crate::chart)s). Both axes are logarithmic: the x axis so that
//! each doubling of workers is one step, the y axis so that a contender that
//! halves its time per doubling falls in a straight line, whatever its
//! magnitude, and two contenders' gap reads as a ratio.
//!
//! A case named after the worker count it ran with (`forkjoin`'s `fib32_16t`
//! at 16 workers, `fib32_2t` at 2, `fib32_1t` at 1) is drawn as one case,
//! `fib32_Nt`, N being the worker count.
//!
//! A contender the reports treat as a baseline rather than a rival (its ratio
//! column is `X/weft`, e.g. `forkjoin`'s `seq`) is drawn dashed and grey, and
//! is never the "best peer" weft is compared with.

use std::path::Path;

use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::HPos;
use serde_json::Value;

use crate::chart::{
    anchored, is_ours, median_of, metrics, parse_json, speedup_text, Better, Report,
};
use crate::harness::Unit;

/// One case and metric: every contender's median at every worker count.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    /// The case's name, with the metric's in brackets when it has one.
    pub label: String,
    /// What one value covers (`iter`, `sum`, ...).
    pub per: String,
    /// A time or a rate: the units with a better direction.
    pub unit: Unit,
    /// `medians[c][w]`: contender `c`'s median at the `w`-th worker count.
    pub medians: Vec<Vec<Option<f64>>>,
    /// `failed[c][w]`: whether contender `c`'s measurement failed there
    /// (rather than having no such figure).
    pub failed: Vec<Vec<bool>>,
}

/// One suite's reports at several worker counts, merged.
#[derive(Debug, Clone, PartialEq)]
pub struct Scaling {
    /// The suite (the reports' `command`).
    pub suite: String,
    /// The machine's cores (all the reports agree on it).
    pub cores: u64,
    /// The fewest and the most rounds of the reports.
    pub rounds: (u64, u64),
    /// The worker counts, ascending, one per report.
    pub workers: Vec<u64>,
    /// Every contender of any report, in the order they are first named;
    /// `contenders[0]` is the subject of the speed-ups.
    pub contenders: Vec<String>,
    /// The contenders that are baselines rather than rivals.
    pub baselines: Vec<String>,
    /// The charted metrics, in the reports' case order.
    pub panels: Vec<Panel>,
    /// Labels of the metrics left out: counts and percentages.
    pub skipped: Vec<String>,
}

impl Scaling {
    /// Merges reports of one suite, each given as `(source, text)` where
    /// `source` (a file name) is only used in error messages. Refuses reports
    /// of different suites or machines, and two reports at one worker count.
    pub fn from_reports(reports: &[(String, String)]) -> Result<Scaling, String> {
        let parsed = reports
            .iter()
            .map(|(src, text)| parse_json(text).map_err(|e| format!("{src}: {e}")))
            .collect::<Result<Vec<Value>, String>>()?;
        let mut runs = Vec::new();
        for ((src, _), json) in reports.iter().zip(&parsed) {
            runs.push((
                src.as_str(),
                Report::of(json).map_err(|e| format!("{src}: {e}"))?,
            ));
        }
        let Some((first_src, first)) = runs.first() else {
            return Err("no reports".into());
        };
        let (suite, cores) = (first.command(), first.count("cores"));
        for (src, r) in &runs {
            if r.command() != suite {
                return Err(format!(
                    "{src} is a report of suite '{}', {first_src} of '{suite}': \
                     a scaling chart takes the reports of one suite",
                    r.command()
                ));
            }
            if r.count("cores") != cores {
                return Err(format!(
                    "{src} was measured on {} cores, {first_src} on {cores}: \
                     a scaling chart takes the reports of one machine",
                    r.count("cores")
                ));
            }
            if r.count("workers") == 0 {
                return Err(format!("{src}: the report has no worker count"));
            }
        }
        runs.sort_by_key(|(_, r)| r.count("workers"));
        if let Some(pair) = runs
            .windows(2)
            .find(|p| p[0].1.count("workers") == p[1].1.count("workers"))
        {
            return Err(format!(
                "{} and {} are both at {} workers: give one report per worker count",
                pair[0].0,
                pair[1].0,
                pair[0].1.count("workers")
            ));
        }

        let mut contenders: Vec<String> = Vec::new();
        for (_, r) in &runs {
            for c in &r.contenders {
                if !contenders.iter().any(|x| x == c) {
                    contenders.push(c.to_string());
                }
            }
        }
        let baselines = baselines(&runs, &contenders);

        let (panels, skipped) = gather(&runs, &contenders);

        let rounds = runs.iter().map(|(_, r)| r.count("rounds"));
        Ok(Scaling {
            suite: suite.to_string(),
            cores,
            rounds: (rounds.clone().min().unwrap_or(0), rounds.max().unwrap_or(0)),
            workers: runs.iter().map(|(_, r)| r.count("workers")).collect(),
            contenders,
            baselines,
            panels,
            skipped,
        })
    }

    /// Whether contender `c` is a baseline.
    fn is_baseline(&self, c: usize) -> bool {
        self.baselines.contains(&self.contenders[c])
    }

    /// At the largest worker count: how many times as fast the subject
    /// (`contenders[0]`) is as the best peer there, and that peer. `None`
    /// where the subject or every peer lacks a median.
    pub fn versus_best_peer(&self, panel: &Panel) -> Option<(f64, &str)> {
        let dir = Better::of(panel.unit)?;
        let last = self.workers.len().checked_sub(1)?;
        let ours = panel.medians.first()?[last]?;
        (0..self.contenders.len())
            .filter(|&c| !is_ours(&self.contenders[c]) && !self.is_baseline(c))
            .filter_map(|c| Some((dir.speedup(ours, panel.medians[c][last]?), c)))
            // The best peer is the one weft is least fast against.
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(x, c)| (x, self.contenders[c].as_str()))
    }

    /// The worker counts as `1 / 2 / 16`.
    fn worker_list(&self) -> String {
        let ws: Vec<String> = self.workers.iter().map(u64::to_string).collect();
        ws.join(" / ")
    }

    /// The rounds as `1 round` or `1-11 rounds`.
    fn rounds_text(&self) -> String {
        match self.rounds {
            (1, 1) => "1 round".into(),
            (a, b) if a == b => format!("{a} rounds"),
            (a, b) => format!("{a}-{b} rounds"),
        }
    }

    /// The markdown table: a row per panel, a column per contender whose
    /// cells hold its medians at each worker count, and the subject's
    /// speed-up over the best peer at the largest count.
    pub fn markdown(&self) -> String {
        let subject = self.contenders.first().map_or("weft", String::as_str);
        let most = self.workers.last().copied().unwrap_or(0);
        let mut o = format!(
            "### {}: medians at {} workers ({} cores, {})\n\n",
            self.suite,
            self.worker_list(),
            self.cores,
            self.rounds_text()
        );
        o.push_str("| case | per |");
        for c in &self.contenders {
            o.push_str(&format!(" {c} |"));
        }
        o.push_str(&format!(" {subject} vs best peer, {most} w |\n|---|---|"));
        o.push_str(&"---:|".repeat(self.contenders.len() + 1));
        o.push('\n');
        for p in &self.panels {
            o.push_str(&format!("| {} | {} |", p.label, p.per));
            for (series, failed) in p.medians.iter().zip(&p.failed) {
                let cells: Vec<String> = series
                    .iter()
                    .zip(failed)
                    .map(|(x, failed)| match (x, failed) {
                        (_, true) => "FAILED".into(),
                        (Some(x), false) => p.unit.format(*x),
                        (None, false) => "-".into(),
                    })
                    .collect();
                o.push_str(&format!(" {} |", cells.join(" / ")));
            }
            let vs = self.versus_best_peer(p).map_or("-".into(), |(x, peer)| {
                format!("{} {peer}", speedup_text(x))
            });
            o.push_str(&format!(" {vs} |\n"));
        }
        o.push_str(&format!(
            "\nThe last column: how many times as fast {subject} is as the fastest peer at \
             {most} workers (peer time / {subject} time; for rates, {subject} rate / peer rate).\n"
        ));
        if self.panels.iter().any(|p| p.label.contains("_Nt")) {
            o.push_str("`X_Nt`: the case `X_<N>t` (N threads) at N workers.\n");
        }
        if !self.baselines.is_empty() {
            o.push_str(&format!(
                "Baselines, not peers: {}.\n",
                self.baselines.join(", ")
            ));
        }
        if !self.skipped.is_empty() {
            o.push_str(&format!(
                "Left out (counts and percentages): {}.\n",
                self.skipped.join(", ")
            ));
        }
        o
    }
}

/// The panels of `runs` (sorted by worker count) for `contenders`, in case
/// order, and the labels of the metrics left out. A panel no contender has a
/// median in is dropped.
fn gather(runs: &[(&str, Report<'_>)], contenders: &[String]) -> (Vec<Panel>, Vec<String>) {
    // Stems of the cases named after a worker count above 1 (`fib32_16t` at
    // 16 workers): their `_1t` case at 1 worker is the same measurement.
    let per_count: Vec<String> = runs
        .iter()
        .filter(|(_, r)| r.count("workers") > 1)
        .flat_map(|(_, r)| r.cases.iter().map(|c| (c, r.count("workers"))))
        .filter_map(|(c, w)| threads_stem(c["name"].as_str()?, w).map(str::to_string))
        .collect();
    let mut panels: Vec<Panel> = Vec::new();
    let mut skipped: Vec<String> = Vec::new();
    for (w, (_, r)) in runs.iter().enumerate() {
        let workers = r.count("workers");
        for case in r.cases {
            let stem = case["name"]
                .as_str()
                .and_then(|name| threads_stem(name, workers))
                .filter(|stem| per_count.iter().any(|s| s == stem));
            for m in metrics(case) {
                let unit = match m.unit {
                    Some(u) if Better::of(u).is_some() => u,
                    _ => {
                        if !skipped.contains(&m.label) {
                            skipped.push(m.label);
                        }
                        continue;
                    }
                };
                let mut labels = vec![m.label.clone()];
                if let Some(stem) = stem {
                    let name = case["name"].as_str().unwrap_or_default();
                    let merged = m.label.replacen(name, &format!("{stem}_Nt"), 1);
                    // At 1 worker the case keeps its own panel (1 thread at
                    // every count) besides the merged one; above, it has only
                    // the merged one.
                    if workers > 1 {
                        labels.clear();
                    }
                    labels.push(merged);
                }
                for label in labels {
                    let i = match panels
                        .iter()
                        .position(|p| p.label == label && p.unit == unit)
                    {
                        Some(i) => i,
                        None => {
                            panels.push(Panel {
                                label,
                                per: m.per.to_string(),
                                unit,
                                medians: vec![vec![None; runs.len()]; contenders.len()],
                                failed: vec![vec![false; runs.len()]; contenders.len()],
                            });
                            panels.len() - 1
                        }
                    };
                    for (c, name) in contenders.iter().enumerate() {
                        panels[i].medians[c][w] = median_of(m.medians, name);
                        panels[i].failed[c][w] = case["failures"][name].is_string();
                    }
                }
            }
        }
    }
    panels.retain(|p| p.medians.iter().flatten().any(Option::is_some));
    (panels, skipped)
}

/// `fib32` for the case `fib32_16t` in a report at 16 workers: a case run
/// on as many threads as the report has workers. Such cases of one stem
/// share a panel, `fib32_Nt`, so that they make a line rather than one dot
/// per report.
fn threads_stem(case: &str, workers: u64) -> Option<&str> {
    case.strip_suffix(&format!("_{workers}t"))
}

/// Contenders that are bounds rather than runtimes: forkjoin's `split` is the work cut
/// by hand over plain threads, with no scheduler, the most the machine gives.
const REFERENCES: &[&str] = &["split"];

/// The contenders whose ratio column in some report is inverted
/// (`X/weft` instead of `weft/X`): the harness's mark of a baseline; and the
/// [`REFERENCES`].
fn baselines(runs: &[(&str, Report<'_>)], contenders: &[String]) -> Vec<String> {
    let Some(subject) = contenders.first() else {
        return Vec::new();
    };
    contenders[1..]
        .iter()
        .filter(|c| {
            let key = format!("{c}/{subject}");
            REFERENCES.contains(&c.as_str())
                || runs
                    .iter()
                    .flat_map(|(_, r)| r.cases)
                    .any(|case| case["ratios"].get(&key).is_some())
        })
        .cloned()
        .collect()
}

// ------------------------------------------------------------ drawing ----

const PANEL_W: u32 = 370;
const PANEL_H: u32 = 260;
const MAX_COLUMNS: usize = 4;
/// The title and the legend need about this much width.
const MIN_WIDTH: u32 = 1000;
const FONT: &str = "sans-serif";

/// weft's contenders: strong, saturated colours.
const OURS: [RGBColor; 3] = [
    RGBColor(214, 39, 40),
    RGBColor(31, 90, 200),
    RGBColor(130, 40, 170),
];
/// Peers: lighter, muted colours, still far enough apart to tell eight of
/// them (the `chan` suite) apart, with a marker shape each as well.
const PEERS: [RGBColor; 8] = [
    RGBColor(60, 160, 140),
    RGBColor(200, 150, 40),
    RGBColor(120, 150, 190),
    RGBColor(160, 110, 80),
    RGBColor(210, 130, 180),
    RGBColor(110, 170, 80),
    RGBColor(130, 130, 130),
    RGBColor(240, 140, 90),
];
const BASELINE: RGBColor = RGBColor(110, 110, 110);
const GRID: RGBColor = RGBColor(225, 225, 225);

#[derive(Debug, Clone, Copy, PartialEq)]
enum Marker {
    Dot,
    Triangle,
    Square,
    Diamond,
    Cross,
    Ring,
}

const PEER_MARKERS: [Marker; 5] = [
    Marker::Triangle,
    Marker::Square,
    Marker::Diamond,
    Marker::Ring,
    Marker::Cross,
];

/// How one contender's line is drawn.
#[derive(Debug, Clone, Copy)]
struct Look {
    color: RGBColor,
    width: u32,
    marker: Marker,
    dashed: bool,
}

/// Each contender's look: weft's bold in strong colours with dots, so that
/// they stand out from the peers' thinner, muted lines whatever the order.
fn looks(s: &Scaling) -> Vec<Look> {
    let (mut ours, mut peers, mut baselines) = (0, 0, 0);
    (0..s.contenders.len())
        .map(|c| {
            if s.is_baseline(c) {
                baselines += 1;
                // Grey and dashed alike; the marker tells two baselines apart.
                Look {
                    color: BASELINE,
                    width: 2,
                    marker: if baselines == 1 {
                        Marker::Ring
                    } else {
                        Marker::Cross
                    },
                    dashed: true,
                }
            } else if is_ours(&s.contenders[c]) {
                ours += 1;
                Look {
                    color: OURS[(ours - 1) % OURS.len()],
                    width: 3,
                    marker: Marker::Dot,
                    dashed: false,
                }
            } else {
                peers += 1;
                Look {
                    color: PEERS[(peers - 1) % PEERS.len()],
                    width: 2,
                    marker: PEER_MARKERS[(peers - 1) % PEER_MARKERS.len()],
                    dashed: false,
                }
            }
        })
        .collect()
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), String>;

fn drawn<E: std::fmt::Debug>(e: E) -> String {
    format!("cannot draw the scaling chart: {e:?}")
}

fn draw_marker(area: &Area<'_>, look: &Look, (x, y): (i32, i32)) -> Drawn {
    let style = look.color.filled();
    let outline = look.color.stroke_width(2);
    match look.marker {
        Marker::Dot => area.draw(&Circle::new((x, y), 4, style)),
        Marker::Ring => area.draw(&Circle::new((x, y), 4, outline)),
        Marker::Triangle => area.draw(&TriangleMarker::new((x, y), 5, style)),
        Marker::Square => area.draw(&Rectangle::new([(x - 4, y - 4), (x + 4, y + 4)], style)),
        Marker::Diamond => area.draw(&Polygon::new(
            vec![(x, y - 5), (x + 5, y), (x, y + 5), (x - 5, y)],
            style,
        )),
        Marker::Cross => area.draw(&Cross::new((x, y), 4, outline)),
    }
    .map_err(drawn)
}

fn draw_line(area: &Area<'_>, look: &Look, points: &[(i32, i32)]) -> Drawn {
    let style = look.color.stroke_width(look.width);
    if look.dashed {
        area.draw(&DashedPathElement::new(points.iter().copied(), 6, 4, style))
    } else {
        area.draw(&PathElement::new(points.to_vec(), style))
    }
    .map_err(drawn)
}

/// Text of `size` px hanging from its anchor point, aligned by `h`.
fn text(size: u32, color: RGBColor, h: HPos) -> TextStyle<'static> {
    (FONT, size).into_font().color(&color).pos(anchored(h))
}

/// Tick values for a log axis from `lo` to `hi`: the coarsest of 1, 1-3,
/// 1-2-5 and 1-1.5-2-3-5-7 per decade that gives at least 3 ticks, so that
/// a narrow range still has labels to read values against.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let steps: [&[f64]; 4] = [
        &[1.0],
        &[1.0, 3.0],
        &[1.0, 2.0, 5.0],
        &[1.0, 1.5, 2.0, 3.0, 5.0, 7.0],
    ];
    let mut ticks = Vec::new();
    for mantissas in steps {
        ticks.clear();
        let mut decade = 10f64.powf(lo.log10().floor());
        while decade <= hi {
            ticks.extend(
                mantissas
                    .iter()
                    .map(|m| m * decade)
                    .filter(|t| (lo..=hi).contains(t)),
            );
            decade *= 10.0;
        }
        if ticks.len() >= 3 {
            break;
        }
    }
    // Over many decades, every other one (or fewer) keeps labels apart.
    let keep = ticks.len().div_ceil(7).max(1);
    ticks.into_iter().step_by(keep).collect()
}

/// A tick label: at most 3 significant digits, no trailing zeros, in the
/// unit's readable multiple (`20 µs`, `1.5 M/s`).
fn tick_text(unit: Unit, x: f64) -> String {
    let (v, suffix) = unit.scaled(x);
    let digits = (2 - v.abs().log10().floor() as i32).clamp(0, 3) as usize;
    let mut s = format!("{v:.digits$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    format!("{s} {suffix}")
}

/// Draws `s` as an SVG file at `path`.
pub fn render(s: &Scaling, path: &Path) -> Drawn {
    if s.panels.is_empty() {
        return Err("nothing to chart: no case has a time or a rate".into());
    }
    let n = s.panels.len();
    let columns = n.min(MAX_COLUMNS);
    let rows = n.div_ceil(columns);
    let captions = s.panels.iter().map(|p| Caption::of(s, p).width(&p.label));
    let panel_w = captions
        .max()
        .unwrap_or(0)
        .max(PANEL_W)
        .max(MIN_WIDTH.div_ceil(columns as u32));
    let width = panel_w * columns as u32;
    let looks = looks(s);
    let legend = legend_layout(s, width);
    let header = 62 + 22 * legend.last().map_or(0, |e| e.row as u32 + 1);
    let height = header + PANEL_H * rows as u32 + 10;

    let root = SVGBackend::new(path, (width, height)).into_drawing_area();
    root.fill(&WHITE).map_err(drawn)?;

    let subject = s.contenders.first().map_or("weft", String::as_str);
    let title = format!(
        "weft-bench {}: medians by worker count ({} cores, {} per count)",
        s.suite,
        s.cores,
        s.rounds_text()
    );
    let left = |size: u32, color: RGBColor| text(size, color, HPos::Left);
    root.draw(&Text::new(title, (14, 10), left(20, BLACK)))
        .map_err(drawn)?;
    let subtitle = format!(
        "x: worker threads, y: median per unit, both log scales. Top right of each \
         panel: {subject}'s speed-up over the fastest peer at {} workers.",
        s.workers.last().unwrap_or(&0)
    );
    root.draw(&Text::new(
        subtitle,
        (14, 36),
        left(13, RGBColor(80, 80, 80)),
    ))
    .map_err(drawn)?;
    for e in &legend {
        let y = 70 + 22 * e.row as i32;
        let look = &looks[e.contender];
        draw_line(&root, look, &[(e.x, y), (e.x + 30, y)])?;
        draw_marker(&root, look, (e.x + 15, y))?;
        root.draw(&Text::new(
            legend_name(s, e.contender),
            (e.x + 38, y - 8),
            left(LEGEND_PX, BLACK),
        ))
        .map_err(drawn)?;
    }

    let (_, grid) = root.split_vertically(header);
    let cells = grid.split_evenly((rows, columns));
    for (panel, cell) in s.panels.iter().zip(&cells) {
        draw_panel(s, panel, cell, &looks)?;
    }
    root.present().map_err(drawn)?;
    Ok(())
}

/// Where one legend entry goes.
struct LegendEntry {
    contender: usize,
    row: usize,
    x: i32,
}

const LEGEND_PX: u32 = 14;

/// Contender `c` as the legend names it.
fn legend_name(s: &Scaling, c: usize) -> String {
    let name = &s.contenders[c];
    if s.is_baseline(c) {
        format!("{name} (baseline)")
    } else {
        name.clone()
    }
}

/// Lays the legend out in rows across `width`, weft's contenders first.
fn legend_layout(s: &Scaling, width: u32) -> Vec<LegendEntry> {
    let mut order: Vec<usize> = (0..s.contenders.len()).collect();
    order.sort_by_key(|&c| (!is_ours(&s.contenders[c]), s.is_baseline(c)));
    let (mut x, mut row) = (14, 0);
    let mut entries = Vec::new();
    for c in order {
        // The sample line, the name and a gap.
        let w = 38 + text_width(&legend_name(s, c), LEGEND_PX) as i32 + 28;
        if x + w > width as i32 - 14 && x > 14 {
            (x, row) = (14, row + 1);
        }
        entries.push(LegendEntry {
            contender: c,
            row,
            x,
        });
        x += w;
    }
    entries
}

const LABEL_PX: u32 = 14;
const NOTE_PX: u32 = 12;

/// About how wide `text` is at `px` pixels (a sans-serif character averages
/// about 0.55 em); the panels are sized by it so that captions do not meet.
fn text_width(text: &str, px: u32) -> u32 {
    (text.chars().count() as f64 * px as f64 * 0.55).ceil() as u32
}

/// The text above a panel's plot, besides its label.
struct Caption {
    /// What the values are and which way is better.
    what: String,
    /// The subject's speed-up over the best peer, green where it is ahead.
    versus: Option<(String, RGBColor)>,
}

impl Caption {
    fn of(s: &Scaling, p: &Panel) -> Caption {
        let direction = match Better::of(p.unit) {
            Some(Better::Higher) => "higher is better",
            _ => "lower is better",
        };
        // A rate's `per` names what is counted, except where it is the second.
        let what = match (p.unit, p.per.as_str()) {
            (Unit::Rate, "second") => "rate".to_string(),
            (Unit::Rate, per) => format!("rate ({per} / s)"),
            (_, per) => format!("time per {per}"),
        };
        let versus = s.versus_best_peer(p).map(|(x, peer)| {
            let text = speedup_text(x);
            // By the printed figure, so that 0.998 (`1.00x`) is not red.
            let ahead = (x * 100.0).round() >= 100.0;
            let color = if ahead {
                RGBColor(30, 130, 70)
            } else {
                RGBColor(200, 50, 40)
            };
            (format!("{text} vs {peer}"), color)
        });
        Caption {
            what: format!("{what}, {direction}"),
            versus,
        }
    }

    /// The narrowest panel that holds the label and this caption.
    fn width(&self, label: &str) -> u32 {
        let versus = self
            .versus
            .as_ref()
            .map_or(0, |(v, _)| text_width(v, NOTE_PX));
        let notes = text_width(&self.what, NOTE_PX) + 20 + versus;
        text_width(label, LABEL_PX).max(notes) + 28
    }
}

fn draw_panel(s: &Scaling, p: &Panel, area: &Area<'_>, looks: &[Look]) -> Drawn {
    let values = || p.medians.iter().flatten().flatten().copied();
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(0.0, f64::max);
    // At least a factor of 4 from bottom to top, so that a few per cent of
    // noise on a flat line does not look like a slope.
    let spread = ((4.0 * lo / hi).sqrt()).max(1.25);
    let (lo, hi) = (lo / spread, hi * spread);
    let (wlo, whi) = (
        *s.workers.first().unwrap_or(&1) as f64,
        *s.workers.last().unwrap_or(&1) as f64,
    );

    let caption = Caption::of(s, p);
    area.draw(&Text::new(
        p.label.clone(),
        (10, 6),
        text(LABEL_PX, BLACK, HPos::Left),
    ))
    .map_err(drawn)?;
    area.draw(&Text::new(
        caption.what,
        (10, 24),
        text(NOTE_PX, RGBColor(90, 90, 90), HPos::Left),
    ))
    .map_err(drawn)?;
    if let Some((versus, color)) = caption.versus {
        let (w, _) = area.dim_in_pixel();
        area.draw(&Text::new(
            versus,
            (w as i32 - 14, 24),
            text(NOTE_PX, color, HPos::Right),
        ))
        .map_err(drawn)?;
    }

    let x_axis = (wlo / 1.3..whi * 1.3)
        .log_scale()
        .with_key_points(s.workers.iter().map(|&w| w as f64).collect());
    let y_axis = (lo..hi).log_scale().with_key_points(log_ticks(lo, hi));
    let mut cc = ChartBuilder::on(area)
        .margin_top(42)
        .margin_left(6)
        .margin_right(16)
        .margin_bottom(6)
        .x_label_area_size(34)
        .y_label_area_size(60)
        .build_cartesian_2d(x_axis, y_axis)
        .map_err(drawn)?;
    cc.configure_mesh()
        .bold_line_style(GRID)
        .axis_style(RGBColor(120, 120, 120))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 12))
        .x_desc("workers")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| tick_text(p.unit, *y))
        .draw()
        .map_err(drawn)?;

    // Peers first, weft on top.
    let mut order: Vec<usize> = (0..s.contenders.len()).collect();
    order.sort_by_key(|&c| is_ours(&s.contenders[c]));
    // The chart maps to the whole image's pixels; `area` draws from its own corner.
    let (x0, y0) = area.get_base_pixel();
    let pixel = |w: u64, v: f64| {
        let (x, y) = cc.backend_coord(&(w as f64, v));
        (x - x0, y - y0)
    };
    for c in order {
        let points: Vec<Option<(i32, i32)>> = p.medians[c]
            .iter()
            .zip(&s.workers)
            .map(|(v, &w)| v.map(|v| pixel(w, v)))
            .collect();
        // A missing median breaks the line rather than bridging the gap.
        for run in points.split(Option::is_none) {
            let run: Vec<(i32, i32)> = run.iter().flatten().copied().collect();
            if run.len() > 1 {
                draw_line(area, &looks[c], &run)?;
            }
            for &pt in &run {
                draw_marker(area, &looks[c], pt)?;
            }
        }
    }
    Ok(())
}

/// `weft-bench scaling OUT.svg FILE.json ...`: draws the chart of the reports
/// into `out` and returns the markdown table.
pub fn scaling_files(out: &Path, files: &[&Path]) -> Result<String, String> {
    // A report named first by mistake would be overwritten by the chart.
    if out.extension().and_then(|e| e.to_str()) != Some("svg") {
        return Err(format!(
            "the first argument is the chart to write and must end in .svg, got {}",
            out.display()
        ));
    }
    if files.is_empty() {
        return Err("scaling needs one or more JSON reports after OUT.svg".into());
    }
    let reports = files
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .map(|text| (f.display().to_string(), text))
                .map_err(|e| format!("cannot read {}: {e}", f.display()))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let s = Scaling::from_reports(&reports)?;
    render(&s, out)?;
    Ok(s.markdown())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    /// A report of suite `suite` at `workers` workers, whose medians are
    /// `base / workers` for weft and `base` for tokio (weft scales, tokio does
    /// not); may has no median in `spawn`, where it fails at 2 workers.
    fn report(suite: &str, workers: u64) -> (String, String) {
        let w = workers as f64;
        let text = format!(
            r#"{{
          "command": "{suite}", "cores": 16, "workers": {workers}, "rounds": 3,
          "contenders": ["weft", "tokio", "may", "seq"],
          "cases": [
            {{"name": "spawn", "per": "task", "unit": "ns",
              "median_ns": {{"weft": {t}, "tokio": 800, "may": null, "seq": 1000}},
              "ratios": {{"weft/tokio": 1, "weft/may": null, "seq/weft": 1}},
              "failures": {{"weft": null, "tokio": null, "may": {may_failure}, "seq": null}}}},
            {{"name": "echo", "per": "round trip", "unit": "ns",
              "median_ns": {{"weft": 10, "tokio": 20, "may": 30, "seq": null}},
              "metrics": [
                {{"metric": "rate", "per": "second", "unit": "per_second",
                  "median": {{"weft": {r}, "tokio": 100, "may": 50, "seq": null}}}},
                {{"metric": "allocs", "per": "msg", "unit": "count",
                  "median": {{"weft": 1, "tokio": 2, "may": 3, "seq": null}}}},
                {{"metric": "apart", "per": "sample", "unit": "percent",
                  "median": {{"weft": 1, "tokio": 2, "may": 3, "seq": null}}}}
              ]}}
          ]
        }}"#,
            t = 1000.0 / w,
            r = 100.0 * w,
            may_failure = if workers == 2 { "\"panicked\"" } else { "null" },
        );
        (format!("{suite}-w{workers}.json"), text)
    }

    fn three() -> Scaling {
        // Out of order on purpose: the series go by worker count.
        let reports = vec![report("demo", 4), report("demo", 1), report("demo", 2)];
        Scaling::from_reports(&reports).unwrap()
    }

    #[test]
    fn series_per_contender_and_worker_count() {
        let s = three();
        assert_eq!(s.suite, "demo");
        assert_eq!((s.cores, s.rounds), (16, (3, 3)));
        assert_eq!(s.workers, [1, 2, 4]);
        assert_eq!(s.contenders, ["weft", "tokio", "may", "seq"]);
        assert_eq!(s.baselines, ["seq"]);
        let labels: Vec<&str> = s.panels.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(labels, ["spawn", "echo [rate]"]);

        let spawn = &s.panels[0];
        assert_eq!((spawn.unit, spawn.per.as_str()), (Unit::Ns, "task"));
        assert_eq!(
            spawn.medians,
            vec![
                vec![Some(1000.0), Some(500.0), Some(250.0)],
                vec![Some(800.0); 3],
                vec![None; 3],
                vec![Some(1000.0); 3],
            ]
        );
        let rate = &s.panels[1];
        assert_eq!(rate.unit, Unit::Rate);
        assert_eq!(rate.medians[0], [Some(100.0), Some(200.0), Some(400.0)]);
        assert_eq!(rate.medians[2], [Some(50.0); 3]);
        assert_eq!(spawn.failed[2], [false, true, false]);
        assert!(rate.failed.iter().flatten().all(|f| !f));
    }

    #[test]
    fn counts_and_percentages_are_skipped() {
        let s = three();
        assert_eq!(s.skipped, ["echo [allocs]", "echo [apart]"]);
        assert!(s.panels.iter().all(|p| Better::of(p.unit).is_some()));
    }

    #[test]
    fn speedup_is_against_the_best_peer_at_the_most_workers() {
        let s = three();
        // spawn at 4 workers: weft 250 ns, tokio 800 ns; may has none and
        // seq, though faster than tokio, is a baseline.
        assert_eq!(s.versus_best_peer(&s.panels[0]), Some((3.2, "tokio")));
        // echo rate at 4: weft 400/s, tokio 100/s (better than may's 50/s).
        assert_eq!(s.versus_best_peer(&s.panels[1]), Some((4.0, "tokio")));

        let md = s.markdown();
        assert!(md.starts_with("### demo: medians at 1 / 2 / 4 workers (16 cores, 3 rounds)"));
        assert!(md.contains("| weft vs best peer, 4 w |"), "{md}");
        assert!(md.contains("| spawn | task | 1.00 µs / 500.0 ns / 250.0 ns | 800.0 ns / 800.0 ns / 800.0 ns | - / FAILED / - |"), "{md}");
        assert!(md.contains(" 3.20x tokio |"), "{md}");
        assert!(
            md.contains("| echo [rate] | second | 100 /s / 200 /s / 400 /s |"),
            "{md}"
        );
        assert!(md.contains("echo [allocs], echo [apart]"), "{md}");
    }

    #[test]
    fn refuses_mixed_suites_machines_and_repeated_counts() {
        let e = Scaling::from_reports(&[report("demo", 1), report("other", 2)]).unwrap_err();
        assert!(
            e.contains("other-w2.json is a report of suite 'other'"),
            "{e}"
        );
        assert!(e.contains("one suite"), "{e}");

        let (name, text) = report("demo", 2);
        let moved = (name, text.replace("\"cores\": 16", "\"cores\": 2"));
        let e = Scaling::from_reports(&[report("demo", 1), moved]).unwrap_err();
        assert!(e.contains("one machine"), "{e}");

        let e = Scaling::from_reports(&[report("demo", 2), report("demo", 2)]).unwrap_err();
        assert!(e.contains("both at 2 workers"), "{e}");

        assert!(Scaling::from_reports(&[]).is_err());
        let bad = ("x.json".to_string(), "not json".to_string());
        assert!(Scaling::from_reports(&[bad])
            .unwrap_err()
            .starts_with("x.json: "));
    }

    #[test]
    fn cases_named_after_the_worker_count_make_one_line() {
        // fib_1t runs on 1 thread at every count; fib_<N>t on N threads.
        let reports: Vec<(String, String)> = [1u64, 2, 4]
            .iter()
            .map(|&w| {
                let own = if w == 1 {
                    String::new()
                } else {
                    format!(
                        r#", {{"name": "fib_{w}t", "median_ns": {{"weft": {}}}}}"#,
                        100 / w
                    )
                };
                let text = format!(
                    r#"{{"command": "fj", "cores": 4, "workers": {w}, "contenders": ["weft"],
                        "cases": [{{"name": "fib_1t", "median_ns": {{"weft": {}}}}}{own}]}}"#,
                    100 + w
                );
                (format!("fj-w{w}.json"), text)
            })
            .collect();
        let s = Scaling::from_reports(&reports).unwrap();
        let panels: Vec<(&str, &[Option<f64>])> = s
            .panels
            .iter()
            .map(|p| (p.label.as_str(), &p.medians[0][..]))
            .collect();
        assert_eq!(
            panels,
            [
                ("fib_1t", &[Some(101.0), Some(102.0), Some(104.0)][..]),
                ("fib_Nt", &[Some(101.0), Some(50.0), Some(25.0)][..]),
            ]
        );
        assert!(s.markdown().contains("`X_Nt`"));
        // Without a case per count, `_1t` is just a name.
        let one = Scaling::from_reports(&reports[..1]).unwrap();
        assert_eq!(one.panels.len(), 1);
        assert_eq!(threads_stem("fib32_16t", 16), Some("fib32"));
        assert_eq!(threads_stem("fib32_16t", 1), None);
    }

    #[test]
    fn ticks_and_their_labels() {
        assert_eq!(log_ticks(1.0, 1e4), [1.0, 10.0, 100.0, 1e3, 1e4]);
        assert_eq!(log_ticks(120.0, 900.0), [150.0, 200.0, 300.0, 500.0, 700.0]);
        assert_eq!(log_ticks(0.9, 40.0), [1.0, 3.0, 10.0, 30.0]);
        assert_eq!(tick_text(Unit::Ns, 2e4), "20 µs");
        assert_eq!(tick_text(Unit::Ns, 1500.0), "1.5 µs");
        assert_eq!(tick_text(Unit::Ns, 300.0), "300 ns");
        assert_eq!(tick_text(Unit::Rate, 2e6), "2 M/s");
    }

    #[test]
    fn writes_an_svg() {
        let dir = std::env::temp_dir().join(format!("weft-scaling-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut files = Vec::new();
        for w in [1, 2, 4] {
            let (name, text) = report("demo", w);
            let path = dir.join(name);
            std::fs::write(&path, text).unwrap();
            files.push(path);
        }
        let out = dir.join("demo.svg");
        let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let md = scaling_files(&out, &refs).unwrap();
        assert!(md.contains("| spawn |"));
        let svg = std::fs::read_to_string(&out).unwrap();
        assert!(svg.starts_with("<svg"));
        for needle in [
            "weft-bench demo",
            "spawn",
            "echo [rate]",
            "tokio",
            "3.20x vs tokio",
        ] {
            assert!(svg.contains(needle), "{needle} missing from the chart");
        }
        // The chart's name must end in .svg: a report there would be lost.
        assert!(scaling_files(&files[0], &refs).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

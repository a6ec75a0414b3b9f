//! Runtime-agnostic measurement harness: rounds, medians, the results table
//! and the JSON report.
//!
//! A [`Suite`] names its contenders (the first one is weft; ratios are
//! weft's median over each other contender's) and its [`Case`]s. For every
//! selected case the harness runs `rounds` rounds; in each round it measures
//! every contender once, one after another, rotating the order from round to
//! round so that no contender always goes first or last. One measurement
//! (`Case::measure`) builds the contender's runtime or pool fresh, warms it
//! up (each suite its own way), times it and shuts it down again, so no two
//! contenders are alive at once. Reported numbers are the median over the
//! rounds.
//!
//! A measurement yields one value per [`Metric`] of its case (most cases have
//! one: nanoseconds per unit); each metric is one row of the table. A value
//! may be NaN where a contender has no such figure (e.g. weft's futex wake
//! count has no tokio counterpart); it prints as `-`. A metric may carry a
//! [`Target`] for weft's median, which is checked and printed after the table.
//!
//! A watchdog thread aborts the process with exit code 3 when a single
//! measurement runs longer than `--timeout` (a hung runtime), after printing
//! which case and contender hung and writing whatever was finished to the
//! JSON file. It sleeps until the deadline rather than polling, so it costs
//! no CPU time while a measurement runs (the `wake` suite measures the
//! process's CPU time).

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

/// Exit code used when a measurement exceeds the timeout.
pub const EXIT_TIMEOUT: i32 = 3;

/// Settings shared by all subcommands.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker threads for every runtime.
    pub workers: usize,
    /// Number of rounds; the median over them is reported.
    pub rounds: usize,
    /// Where to write the JSON report, if anywhere.
    pub json: Option<PathBuf>,
    /// Case names to run; empty means all.
    pub cases: Vec<String>,
    /// Longest one measurement (one contender, one round) may take.
    pub timeout: Duration,
    /// How long the idle cases (`wake`) let a runtime sit idle.
    pub idle: Duration,
    /// Also run the largest inputs (`forkjoin`: the 134M-node tree).
    pub large: bool,
}

#[cfg(test)]
impl Options {
    /// Small options for the suites' own tests: 2 workers, 1 round, short limits.
    pub fn for_tests() -> Options {
        Options {
            workers: 2,
            rounds: 1,
            json: None,
            cases: Vec::new(),
            timeout: Duration::from_secs(1),
            idle: Duration::from_secs(1),
            large: false,
        }
    }
}

/// How the values of a metric are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Nanoseconds (printed with a time unit); lower is better.
    Ns,
    /// A plain count or quotient.
    Count,
    /// A percentage.
    Percent,
    /// Events per second; higher is better, so it gets no ratio.
    Rate,
}

impl Unit {
    const ALL: [Unit; 4] = [Unit::Ns, Unit::Count, Unit::Percent, Unit::Rate];

    /// The unit's name in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ns => "ns",
            Unit::Count => "count",
            Unit::Percent => "percent",
            Unit::Rate => "per_second",
        }
    }

    /// The unit a report names `name` ([`Unit::name`]); `None` for a name
    /// this harness never writes.
    pub fn from_name(name: &str) -> Option<Unit> {
        Unit::ALL.into_iter().find(|u| u.name() == name)
    }

    /// `x` as the tables print it, with a unit that keeps 3-4 significant
    /// digits for times and rates.
    pub fn format(self, x: f64) -> String {
        match self {
            Unit::Ns => format_ns(x),
            Unit::Count if x.abs() >= 100.0 => format!("{x:.0}"),
            Unit::Count => format!("{x:.2}"),
            Unit::Percent => format!("{x:.1} %"),
            Unit::Rate => {
                let (v, suffix) = self.scaled(x);
                let digits = if x >= 1e6 {
                    2
                } else if x >= 1e3 {
                    1
                } else {
                    0
                };
                format!("{v:.digits$} {suffix}")
            }
        }
    }

    /// `x` in the largest multiple of the unit it is at least 1 of (`µs`,
    /// `k/s`, ...) and that multiple's suffix; counts and percentages as
    /// they are.
    pub fn scaled(self, x: f64) -> (f64, &'static str) {
        let steps: &[(f64, &'static str)] = match self {
            Unit::Ns => &[(1.0, "ns"), (1e3, "µs"), (1e6, "ms"), (1e9, "s")],
            Unit::Rate => &[(1.0, "/s"), (1e3, "k/s"), (1e6, "M/s")],
            Unit::Count => &[(1.0, "")],
            Unit::Percent => &[(1.0, "%")],
        };
        let (div, suffix) = steps
            .iter()
            .rev()
            .find(|(div, _)| x >= *div)
            .unwrap_or(&steps[0]);
        (x / div, suffix)
    }
}

/// A bound that weft's median of a metric should respect.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// `<= x`.
    AtMost(f64),
    /// `< x`.
    Below(f64),
}

impl Target {
    fn met(self, x: f64) -> bool {
        match self {
            Target::AtMost(b) => x <= b,
            Target::Below(b) => x < b,
        }
    }

    fn describe(self, unit: Unit) -> String {
        match self {
            Target::AtMost(b) => format!("<= {}", unit.format(b)),
            Target::Below(b) => format!("< {}", unit.format(b)),
        }
    }
}

/// One figure a case reports (one row of the table).
#[derive(Debug, Clone)]
pub struct Metric {
    /// Short name shown next to the case name; empty for a case's only
    /// metric.
    pub name: &'static str,
    /// What one value covers, e.g. `"iter"` or `"burst"`.
    pub per: &'static str,
    /// How values are printed.
    pub unit: Unit,
    /// What weft's median should achieve, if anything.
    pub target: Option<Target>,
}

impl Metric {
    /// A metric without a target.
    pub const fn new(name: &'static str, per: &'static str, unit: Unit) -> Metric {
        Metric {
            name,
            per,
            unit,
            target: None,
        }
    }

    /// The same metric with a target for weft.
    pub const fn target(mut self, target: Target) -> Metric {
        self.target = Some(target);
        self
    }
}

/// Measures contender `index` once with `opts` and returns one value per
/// metric of its case (NaN where the contender has no such figure).
pub type Measure = Box<dyn Fn(usize, &Options) -> Vec<f64>>;

/// One benchmark case.
pub struct Case {
    /// Name used in the table, JSON and `--case`.
    pub name: String,
    /// The figures one measurement yields, in order.
    pub metrics: Vec<Metric>,
    /// A fixed number of rounds that overrides `--rounds` (e.g. 1 for
    /// cases that take seconds and have little noise).
    pub rounds: Option<usize>,
    /// Builds a fresh runtime for the contender, warms it up, measures.
    pub measure: Measure,
}

impl Case {
    /// A case reporting `metrics`, measured by `measure(index, opts)`, run
    /// for `--rounds` rounds.
    pub fn new(
        name: &str,
        metrics: Vec<Metric>,
        measure: impl Fn(usize, &Options) -> Vec<f64> + 'static,
    ) -> Case {
        Case {
            name: name.to_string(),
            metrics,
            rounds: None,
            measure: Box::new(measure),
        }
    }

    /// A case with a single metric: mean nanoseconds per `unit`, as returned
    /// by `measure(index, workers)`.
    pub fn timed(name: &str, unit: &'static str, measure: fn(usize, usize) -> f64) -> Case {
        Case::new(
            name,
            vec![Metric::new("", unit, Unit::Ns)],
            move |index, opts| vec![measure(index, opts.workers)],
        )
    }

    /// The same case with a fixed number of rounds that overrides
    /// `--rounds`.
    pub fn rounds(mut self, rounds: usize) -> Case {
        self.rounds = Some(rounds);
        self
    }
}

/// The cases of one subcommand and who competes in them.
pub struct Suite {
    /// Subcommand name, e.g. `"async"`.
    pub command: &'static str,
    /// Contender names; `contenders[0]` is weft.
    pub contenders: &'static [&'static str],
    /// All cases, in the order they run.
    pub cases: Vec<Case>,
    /// Lines printed under the table header (what the figures mean).
    pub notes: Vec<String>,
    /// A contender that is a baseline rather than a rival (e.g. a sequential
    /// run): its ratio column is inverted to `baseline/weft`, the speed-up.
    pub baseline: Option<usize>,
    /// Relative targets, checked after the table alongside the metrics'
    /// absolute [`Target`]s.
    pub checks: Vec<Check>,
}

/// A relative target: weft's median of metric `metric` of case `case` should
/// be at least `factor` times as fast as contender `vs`'s, i.e.
/// `vs / weft >= factor` (for time metrics, where lower is better).
#[derive(Debug, Clone)]
pub struct Check {
    /// The case's name.
    pub case: String,
    /// Index of the metric within the case.
    pub metric: usize,
    /// Index of the contender weft is compared with.
    pub vs: usize,
    /// How many times as fast weft should be (1.0: at least as fast).
    pub factor: f64,
    /// Printed after the check, e.g. why this case was chosen.
    pub note: String,
}

impl Check {
    /// A check of the first metric of `case`: weft at least `factor` times
    /// as fast as contender `vs`.
    pub fn new(case: &str, vs: usize, factor: f64) -> Check {
        Check {
            case: case.to_string(),
            metric: 0,
            vs,
            factor,
            note: String::new(),
        }
    }

    /// The same check with a note printed after it.
    pub fn note(mut self, note: &str) -> Check {
        self.note = note.to_string();
        self
    }

    /// `vs / weft` and whether it meets the factor, when both medians exist.
    fn evaluate(&self, c: &CaseResult) -> Option<(f64, bool)> {
        let speedup = ratio(
            c.series.get(self.vs)?.median(self.metric),
            c.series[0].median(self.metric),
        )?;
        Some((speedup, speedup >= self.factor))
    }
}

impl Suite {
    /// Names of all cases, comma separated (for error messages and help).
    pub fn case_names(&self) -> String {
        let names: Vec<&str> = self.cases.iter().map(|c| c.name.as_str()).collect();
        names.join(", ")
    }
}

/// Why a suite could not run to the end.
#[derive(Debug)]
pub enum Error {
    /// Bad options (exit code 2).
    Usage(String),
    /// Measurements failed or the report could not be written (exit code 1).
    Failed(String),
}

/// The samples of one contender in one case.
#[derive(Debug, Clone, Default)]
struct Series {
    /// `samples[m]`: the values of metric `m`, one per completed round.
    samples: Vec<Vec<f64>>,
    /// Set when a measurement panicked; no further rounds are run for it.
    failure: Option<String>,
}

impl Series {
    fn median(&self, metric: usize) -> Option<f64> {
        if self.failure.is_some() {
            return None;
        }
        let xs: Vec<f64> = self
            .samples
            .get(metric)?
            .iter()
            .copied()
            .filter(|x| !x.is_nan())
            .collect();
        median(&xs)
    }
}

/// Results of one case.
#[derive(Debug, Clone)]
struct CaseResult {
    name: String,
    metrics: Vec<Metric>,
    rounds: usize,
    series: Vec<Series>,
}

/// Everything that goes into the JSON report.
#[derive(Debug)]
struct Report {
    command: &'static str,
    contenders: &'static [&'static str],
    cores: usize,
    workers: usize,
    rounds: usize,
    cases: Vec<CaseResult>,
    timed_out: Option<String>,
    baseline: Option<usize>,
    checks: Vec<Check>,
}

/// Number of cores the OS lets this process use.
pub fn cores() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// Runs the selected cases of `suite`, printing the table to stdout as each
/// case finishes, and writes the JSON report if asked to.
pub fn run(suite: &Suite, opts: &Options) -> Result<(), Error> {
    let selected = select(suite, &opts.cases)?;
    if opts.workers == 0 {
        return Err(Error::Usage("--workers must be at least 1".into()));
    }
    if opts.rounds == 0 {
        return Err(Error::Usage("--rounds must be at least 1".into()));
    }

    let report = Arc::new(Mutex::new(Report {
        command: suite.command,
        contenders: suite.contenders,
        cores: cores(),
        workers: opts.workers,
        rounds: opts.rounds,
        cases: Vec::new(),
        timed_out: None,
        baseline: suite.baseline,
        checks: suite.checks.clone(),
    }));
    let watchdog = Watchdog::start(opts.timeout, report.clone(), opts.json.clone());
    let table = Table::new(suite, &selected);

    let subject = suite.contenders[0];
    let mut ratios = format!("ratio {subject}/X < 1.0: {subject} lower, i.e. faster for times");
    if let Some(b) = suite.baseline {
        let _ = write!(
            ratios,
            "; {}/{subject} > 1.0: {subject} faster",
            suite.contenders[b]
        );
    }
    if selected
        .iter()
        .any(|c| c.metrics.iter().any(|m| m.unit == Unit::Rate))
    {
        ratios.push_str("; rates: higher is better, no ratio");
    }
    println!(
        "weft-bench {}: cores={} workers={} rounds={} (median of rounds; {ratios})",
        suite.command,
        cores(),
        opts.workers,
        opts.rounds
    );
    if opts.rounds < 11 {
        println!("note: fewer than 11 rounds; medians are less robust");
    }
    for note in &suite.notes {
        println!("note: {note}");
    }
    println!();
    table.print_header();

    let n = suite.contenders.len();
    let mut any_failed = false;
    for (ci, case) in selected.iter().enumerate() {
        let rounds = case.rounds.unwrap_or(opts.rounds);
        eprintln!(
            "[{}/{}] {} ({rounds} round{}) ...",
            ci + 1,
            selected.len(),
            case.name,
            if rounds == 1 { "" } else { "s" }
        );
        let started = Instant::now();
        let mut series = vec![Series::default(); n];
        for round in 0..rounds {
            for k in 0..n {
                let who = (ci + round + k) % n;
                if series[who].failure.is_some() {
                    continue;
                }
                watchdog.arm(format!(
                    "case {} on {} (round {}/{rounds})",
                    case.name,
                    suite.contenders[who],
                    round + 1,
                ));
                let outcome = panic::catch_unwind(AssertUnwindSafe(|| (case.measure)(who, opts)));
                watchdog.disarm();
                match outcome {
                    Ok(values) if values.len() == case.metrics.len() => {
                        let s = &mut series[who].samples;
                        s.resize(values.len(), Vec::new());
                        for (m, v) in values.into_iter().enumerate() {
                            s[m].push(v);
                        }
                    }
                    Ok(values) => panic!(
                        "case {} returned {} values for {} metrics",
                        case.name,
                        values.len(),
                        case.metrics.len()
                    ),
                    Err(payload) => {
                        let msg = panic_message(&*payload);
                        eprintln!(
                            "  {} panicked in {} (round {}): {msg}",
                            suite.contenders[who],
                            case.name,
                            round + 1
                        );
                        series[who].failure = Some(msg);
                        any_failed = true;
                    }
                }
            }
        }
        eprintln!(
            "[{}/{}] {} done in {:.1} s",
            ci + 1,
            selected.len(),
            case.name,
            started.elapsed().as_secs_f64()
        );
        let result = CaseResult {
            name: case.name.clone(),
            metrics: case.metrics.clone(),
            rounds,
            series,
        };
        table.print_rows(&result);
        lock(&report).cases.push(result);
    }
    watchdog.stop();
    print_targets(&lock(&report));

    if let Some(path) = &opts.json {
        let json = to_json(&lock(&report));
        std::fs::write(path, json)
            .map_err(|e| Error::Failed(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
        // A chart that cannot be drawn does not fail the run: the numbers are saved.
        match crate::chart::chart_file(path) {
            Ok(svg) => eprintln!("wrote {}", svg.display()),
            Err(e) => eprintln!("no chart: {e}"),
        }
    }
    if any_failed {
        return Err(Error::Failed("some measurements panicked".into()));
    }
    Ok(())
}

/// Prints, for every metric with a target and every relative check, whether
/// weft's median meets it.
fn print_targets(r: &Report) {
    let subject = r.contenders[0];
    let mut lines = Vec::new();
    for c in &r.cases {
        for (m, metric) in c.metrics.iter().enumerate() {
            let Some(target) = metric.target else {
                continue;
            };
            let label = row_label(&c.name, metric.name);
            let bound = target.describe(metric.unit);
            lines.push(match c.series[0].median(m) {
                Some(x) => format!(
                    "  {label} per {}: {subject} {} (target {bound}): {}",
                    metric.per,
                    metric.unit.format(x),
                    if target.met(x) { "met" } else { "MISSED" }
                ),
                None => format!("  {label}: no result (target {bound})"),
            });
        }
    }
    for check in &r.checks {
        // Cases left out with --case are not checked.
        let Some(c) = r.cases.iter().find(|c| c.name == check.case) else {
            continue;
        };
        let metric = &c.metrics[check.metric];
        let label = row_label(&c.name, metric.name);
        let vs = r.contenders[check.vs];
        let target = format!("target >= {}x", check.factor);
        let note = if check.note.is_empty() {
            String::new()
        } else {
            format!(" [{}]", check.note)
        };
        lines.push(match check.evaluate(c) {
            Some((x, met)) => {
                let fmt = |i: usize| c.series[i].median(check.metric).map(|v| metric.unit.format(v));
                format!(
                    "  {label}: {subject} {x:.2}x as fast as {vs} ({subject} {}, {vs} {}; {target}): {}{note}",
                    fmt(0).unwrap_or_default(),
                    fmt(check.vs).unwrap_or_default(),
                    if met { "met" } else { "MISSED" }
                )
            }
            None => format!("  {label}: {subject} vs {vs}: no result ({target}){note}"),
        });
    }
    if !lines.is_empty() {
        println!("\ntargets for {subject} (its median):");
        for l in lines {
            println!("{l}");
        }
        let _ = io::stdout().flush();
    }
}

fn row_label(case: &str, metric: &str) -> String {
    if metric.is_empty() {
        case.to_string()
    } else {
        format!("{case} {metric}")
    }
}

/// The cases named in `wanted` (all if empty), in suite order.
fn select<'a>(suite: &'a Suite, wanted: &[String]) -> Result<Vec<&'a Case>, Error> {
    for name in wanted {
        if !suite.cases.iter().any(|c| &c.name == name) {
            return Err(Error::Usage(format!(
                "unknown case '{name}' for '{}'; known cases: {}",
                suite.command,
                suite.case_names()
            )));
        }
    }
    Ok(suite
        .cases
        .iter()
        .filter(|c| wanted.is_empty() || wanted.iter().any(|w| w == &c.name))
        .collect())
}

/// Locks `m`; a poisoned lock's data is taken as it is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Median of `xs`; the mean of the two middle values for an even count.
pub fn median(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

/// The `p`-th percentile (0 < p <= 100) of `xs` by the nearest-rank method:
/// the smallest value that at least `p` % of the values do not exceed.
pub fn percentile(xs: &[f64], p: f64) -> Option<f64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The header of the ratio column of contender `i` (> 0): `weft/i`, or
/// `i/weft` when `i` is the baseline.
fn ratio_name(contenders: &[&str], baseline: Option<usize>, i: usize) -> String {
    if baseline == Some(i) {
        format!("{}/{}", contenders[i], contenders[0])
    } else {
        format!("{}/{}", contenders[0], contenders[i])
    }
}

/// The value of the ratio column of contender `i` (> 0) for metric `m`.
fn ratio_value(r: &CaseResult, baseline: Option<usize>, m: usize, i: usize) -> Option<f64> {
    let (weft, other) = (r.series[0].median(m), r.series[i].median(m));
    match r.metrics[m].unit {
        Unit::Rate => None,
        _ if baseline == Some(i) => ratio(other, weft),
        _ => ratio(weft, other),
    }
}

/// `a / b` when both exist.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Formats nanoseconds with a unit that keeps 3-4 significant digits.
pub fn format_ns(ns: f64) -> String {
    let (v, suffix) = Unit::Ns.scaled(ns);
    let digits = if ns < 1e3 { 1 } else { 2 };
    format!("{v:.digits$} {suffix}")
}

// --------------------------------------------------------------- table ----

/// Fixed-width text table, printed one row per metric of each finished case.
struct Table {
    contenders: &'static [&'static str],
    baseline: Option<usize>,
    case_width: usize,
    /// Width of the metric column; 0 when no case has named metrics.
    metric_width: usize,
    unit_width: usize,
    time_widths: Vec<usize>,
    ratio_headers: Vec<String>,
}

impl Table {
    fn new(suite: &Suite, cases: &[&Case]) -> Table {
        let case_width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0).max(4);
        let metrics = || cases.iter().flat_map(|c| c.metrics.iter());
        let metric_width = metrics().map(|m| m.name.chars().count()).max().unwrap_or(0);
        let metric_width = if metric_width == 0 {
            0
        } else {
            metric_width.max(6)
        };
        let unit_width = metrics()
            .map(|m| m.per.chars().count())
            .max()
            .unwrap_or(0)
            .max(4);
        let time_widths = suite.contenders.iter().map(|c| c.len().max(10)).collect();
        let ratio_headers = (1..suite.contenders.len())
            .map(|i| ratio_name(suite.contenders, suite.baseline, i))
            .collect();
        Table {
            contenders: suite.contenders,
            baseline: suite.baseline,
            case_width,
            metric_width,
            unit_width,
            time_widths,
            ratio_headers,
        }
    }

    fn lead(&self, case: &str, metric: &str, per: &str) -> String {
        let mut line = format!("{case:<cw$}", cw = self.case_width);
        if self.metric_width > 0 {
            let _ = write!(line, "  {metric:<mw$}", mw = self.metric_width);
        }
        let _ = write!(line, "  {per:<uw$}", uw = self.unit_width);
        line
    }

    fn print_header(&self) {
        let mut line = self.lead("case", "metric", "per");
        for (name, w) in self.contenders.iter().zip(&self.time_widths) {
            let _ = write!(line, "  {name:>w$}");
        }
        for h in &self.ratio_headers {
            let _ = write!(line, "  {h:>w$}", w = h.len().max(6));
        }
        println!("{line}");
        println!("{}", "-".repeat(line.chars().count()));
        let _ = io::stdout().flush();
    }

    fn print_rows(&self, r: &CaseResult) {
        for (m, metric) in r.metrics.iter().enumerate() {
            let mut line = self.lead(&r.name, metric.name, metric.per);
            for (s, w) in r.series.iter().zip(&self.time_widths) {
                let cell = match (&s.failure, s.median(m)) {
                    (Some(_), _) => "FAILED".to_string(),
                    (None, Some(x)) => metric.unit.format(x),
                    (None, None) => "-".to_string(),
                };
                let _ = write!(line, "  {cell:>w$}");
            }
            for (i, h) in (1..r.series.len()).zip(&self.ratio_headers) {
                let cell = ratio_value(r, self.baseline, m, i)
                    .map_or("-".to_string(), |x| format!("{x:.2}"));
                let _ = write!(line, "  {cell:>w$}", w = h.len().max(6));
            }
            println!("{line}");
        }
        let _ = io::stdout().flush();
    }
}

// ---------------------------------------------------------------- json ----

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_num(x: Option<f64>) -> String {
    match x {
        Some(x) if x.is_finite() => format!("{x:.3}"),
        _ => "null".to_string(),
    }
}

/// `{"a": x, "b": y}` over the contenders, one per line at `indent`.
fn json_map(o: &mut String, indent: &str, entries: &[(String, String)]) {
    let _ = writeln!(o, "{{");
    for (j, (k, v)) in entries.iter().enumerate() {
        let comma = if j + 1 < entries.len() { "," } else { "" };
        let _ = writeln!(o, "{indent}  {}: {v}{comma}", json_str(k));
    }
    let _ = write!(o, "{indent}}}");
}

/// The medians, ratios and samples of metric `m` of `c`, as object members
/// named `median{suffix}`, `ratios` and `samples{suffix}`, at `indent`.
fn json_metric(o: &mut String, r: &Report, c: &CaseResult, m: usize, indent: &str, suffix: &str) {
    let medians: Vec<_> = r
        .contenders
        .iter()
        .zip(&c.series)
        .map(|(name, s)| (name.to_string(), json_num(s.median(m))))
        .collect();
    let ratios: Vec<_> = (1..r.contenders.len())
        .map(|i| {
            (
                ratio_name(r.contenders, r.baseline, i),
                json_num(ratio_value(c, r.baseline, m, i)),
            )
        })
        .collect();
    let samples: Vec<_> = r
        .contenders
        .iter()
        .zip(&c.series)
        .map(|(name, s)| {
            let xs: Vec<String> = s
                .samples
                .get(m)
                .map_or(&[][..], |v| &v[..])
                .iter()
                .map(|x| json_num(Some(*x)))
                .collect();
            (name.to_string(), format!("[{}]", xs.join(", ")))
        })
        .collect();
    let _ = write!(o, "{indent}\"median{suffix}\": ");
    json_map(o, indent, &medians);
    let _ = write!(o, ",\n{indent}\"ratios\": ");
    json_map(o, indent, &ratios);
    let _ = write!(o, ",\n{indent}\"samples{suffix}\": ");
    json_map(o, indent, &samples);
}

/// The report. Each case's top-level `per`, `median_ns`, `ratios` and
/// `samples_ns` describe its first metric (always nanoseconds, as in the
/// `async` suite's reports); cases with more than one metric also list all
/// of them under `metrics`.
fn to_json(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{{");
    let _ = writeln!(o, "  \"command\": {},", json_str(r.command));
    let _ = writeln!(o, "  \"cores\": {},", r.cores);
    let _ = writeln!(o, "  \"workers\": {},", r.workers);
    let _ = writeln!(o, "  \"rounds\": {},", r.rounds);
    let names: Vec<String> = r.contenders.iter().map(|c| json_str(c)).collect();
    let _ = writeln!(o, "  \"contenders\": [{}],", names.join(", "));
    let _ = writeln!(
        o,
        "  \"timed_out\": {},",
        r.timed_out.as_deref().map_or("null".to_string(), json_str)
    );
    let _ = writeln!(o, "  \"unit_of_times\": \"ns\",");
    let _ = writeln!(o, "  \"cases\": [");
    for (i, c) in r.cases.iter().enumerate() {
        let _ = writeln!(o, "    {{");
        let _ = writeln!(o, "      \"name\": {},", json_str(&c.name));
        if c.rounds != r.rounds {
            let _ = writeln!(o, "      \"rounds\": {},", c.rounds);
        }
        let _ = writeln!(o, "      \"per\": {},", json_str(c.metrics[0].per));
        let _ = writeln!(o, "      \"unit\": {},", json_str(c.metrics[0].unit.name()));
        json_metric(&mut o, r, c, 0, "      ", "_ns");
        let _ = writeln!(o, ",");
        if c.metrics.len() > 1 {
            let _ = writeln!(o, "      \"metrics\": [");
            for (m, metric) in c.metrics.iter().enumerate() {
                let _ = writeln!(o, "        {{");
                let _ = writeln!(o, "          \"metric\": {},", json_str(metric.name));
                let _ = writeln!(o, "          \"per\": {},", json_str(metric.per));
                let _ = writeln!(o, "          \"unit\": {},", json_str(metric.unit.name()));
                if let Some(t) = metric.target {
                    let met = c.series[0].median(m).map(|x| t.met(x));
                    let _ = writeln!(
                        o,
                        "          \"target\": {{\"bound\": {}, \"met\": {}}},",
                        json_str(&t.describe(metric.unit)),
                        met.map_or("null".to_string(), |b| b.to_string())
                    );
                }
                json_metric(&mut o, r, c, m, "          ", "");
                let comma = if m + 1 < c.metrics.len() { "," } else { "" };
                let _ = writeln!(o, "\n        }}{comma}");
            }
            let _ = writeln!(o, "      ],");
        }
        let failures: Vec<_> = r
            .contenders
            .iter()
            .zip(&c.series)
            .map(|(name, s)| {
                let f = s.failure.as_deref().map_or("null".to_string(), json_str);
                (name.to_string(), f)
            })
            .collect();
        let _ = write!(o, "      \"failures\": ");
        json_map(&mut o, "      ", &failures);
        let comma = if i + 1 < r.cases.len() { "," } else { "" };
        let _ = writeln!(o, "\n    }}{comma}");
    }
    if r.checks.is_empty() {
        let _ = writeln!(o, "  ]");
    } else {
        let _ = writeln!(o, "  ],");
        let _ = writeln!(o, "  \"checks\": [");
        for (i, check) in r.checks.iter().enumerate() {
            let c = r.cases.iter().find(|c| c.name == check.case);
            let result = c.and_then(|c| check.evaluate(c));
            let _ = write!(
                o,
                "    {{\"case\": {}, \"metric\": {}, \"vs\": {}, \"at_least_times_as_fast\": {}, \"times_as_fast\": {}, \"met\": {}, \"note\": {}}}",
                json_str(&check.case),
                json_str(c.map_or("", |c| c.metrics[check.metric].name)),
                json_str(r.contenders[check.vs]),
                json_num(Some(check.factor)),
                json_num(result.map(|(x, _)| x)),
                result.map_or("null".to_string(), |(_, met)| met.to_string()),
                json_str(&check.note)
            );
            let comma = if i + 1 < r.checks.len() { "," } else { "" };
            let _ = writeln!(o, "{comma}");
        }
        let _ = writeln!(o, "  ]");
    }
    let _ = writeln!(o, "}}");
    o
}

// ------------------------------------------------------------ watchdog ----

/// What the watchdog is currently guarding.
struct Armed {
    deadline: Instant,
    label: String,
}

/// What the watchdog thread waits on.
#[derive(Default)]
struct WatchState {
    armed: Option<Armed>,
    done: bool,
}

/// Kills the process when one measurement exceeds its time limit.
struct Watchdog {
    state: Arc<(Mutex<WatchState>, Condvar)>,
    timeout: Duration,
    thread: Option<thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(timeout: Duration, report: Arc<Mutex<Report>>, json: Option<PathBuf>) -> Watchdog {
        let state: Arc<(Mutex<WatchState>, Condvar)> = Arc::default();
        let thread = {
            let state = state.clone();
            thread::Builder::new()
                .name("weft-bench-watchdog".into())
                .spawn(move || {
                    let (m, cv) = &*state;
                    let mut s = lock(m);
                    // Sleeps until disarmed, re-armed or the deadline: no
                    // wake-ups while a measurement runs within its limit.
                    while !s.done {
                        let label = match &s.armed {
                            None => {
                                s = cv.wait(s).unwrap_or_else(PoisonError::into_inner);
                                continue;
                            }
                            Some(a) => {
                                let now = Instant::now();
                                if now < a.deadline {
                                    let wait = a.deadline - now;
                                    s = cv
                                        .wait_timeout(s, wait)
                                        .unwrap_or_else(PoisonError::into_inner)
                                        .0;
                                    continue;
                                }
                                a.label.clone()
                            }
                        };
                        drop(s);
                        Self::fire(&label, timeout, &report, json.as_ref());
                    }
                })
                .expect("cannot start the watchdog thread")
        };
        Watchdog {
            state,
            timeout,
            thread: Some(thread),
        }
    }

    fn fire(label: &str, timeout: Duration, report: &Mutex<Report>, json: Option<&PathBuf>) -> ! {
        let msg = format!("{label} did not finish within {} s", timeout.as_secs_f64());
        eprintln!("\nerror: TIMEOUT: {msg}; aborting (exit code {EXIT_TIMEOUT})");
        println!("TIMEOUT: {msg}");
        let _ = io::stdout().flush();
        if let Some(path) = json {
            let mut r = lock(report);
            r.timed_out = Some(label.to_string());
            if std::fs::write(path, to_json(&r)).is_ok() {
                eprintln!("wrote partial results to {}", path.display());
            }
        }
        std::process::exit(EXIT_TIMEOUT);
    }

    fn set(&self, armed: Option<Armed>) {
        let (m, cv) = &*self.state;
        lock(m).armed = armed;
        cv.notify_one();
    }

    fn arm(&self, label: String) {
        self.set(Some(Armed {
            deadline: Instant::now() + self.timeout,
            label,
        }));
    }

    fn disarm(&self) {
        self.set(None);
    }

    fn stop(mut self) {
        let (m, cv) = &*self.state;
        lock(m).done = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
    }

    #[test]
    fn percentiles() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), Some(50.0));
        assert_eq!(percentile(&xs, 99.0), Some(99.0));
        assert_eq!(percentile(&xs, 100.0), Some(100.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 99.0), None);
    }

    #[test]
    fn json_escapes() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }

    #[test]
    fn formats_units() {
        assert_eq!(format_ns(12.34), "12.3 ns");
        assert_eq!(format_ns(1_500.0), "1.50 µs");
        assert_eq!(format_ns(2_500_000.0), "2.50 ms");
        assert_eq!(Unit::Percent.format(4.25), "4.2 %");
        assert_eq!(Unit::Rate.format(2_500_000.0), "2.50 M/s");
        assert_eq!(Unit::Count.format(0.5), "0.50");
        assert_eq!(Unit::Rate.format(337_417.3), "337.4 k/s");
        assert_eq!(Unit::Rate.format(12.4), "12 /s");
        assert_eq!(format_ns(3e9), "3.00 s");
        for u in Unit::ALL {
            assert_eq!(Unit::from_name(u.name()), Some(u));
        }
        assert_eq!(Unit::from_name("furlongs"), None);
    }

    #[test]
    fn medians_skip_nan() {
        let s = Series {
            samples: vec![vec![f64::NAN, 1.0, 3.0], vec![f64::NAN]],
            failure: None,
        };
        assert_eq!(s.median(0), Some(2.0));
        assert_eq!(s.median(1), None);
    }

    #[test]
    fn targets() {
        assert!(Target::AtMost(1.0).met(1.0));
        assert!(!Target::Below(10.0).met(10.0));
        assert!(Target::Below(10.0).met(9.9));
    }
}

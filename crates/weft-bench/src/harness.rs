//! Runtime-agnostic measurement harness: rounds, medians, the results table
//! and the JSON report.
//!
//! A [`Suite`] names its contenders (the first one is weft; ratios are
//! weft's median over each other contender's) and its [`Case`]s. For every
//! selected case the harness runs `rounds` rounds; in each round it measures
//! every contender once, one after another, rotating the order from round to
//! round so that no contender always goes first or last. One measurement
//! (`Case::measure`) builds a fresh runtime, warms it up, times it and shuts
//! it down again, so only one runtime is ever alive. Reported numbers are the
//! median over the rounds.
//!
//! A watchdog thread aborts the process with exit code 3 when a single
//! measurement runs longer than `--timeout` (a hung runtime), after printing
//! which case and contender hung and writing whatever was finished to the
//! JSON file.

use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
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
}

/// One benchmark case.
pub struct Case {
    /// Name used in the table, JSON and `--case`.
    pub name: &'static str,
    /// What one reported time covers, e.g. `"iter"` or `"spawn+await"`.
    pub unit: &'static str,
    /// Measures contender `index` once on a fresh runtime with `workers`
    /// workers and returns the mean nanoseconds per unit.
    pub measure: fn(index: usize, workers: usize) -> f64,
}

/// The cases of one subcommand and who competes in them.
pub struct Suite {
    /// Subcommand name, e.g. `"async"`.
    pub command: &'static str,
    /// Contender names; `contenders[0]` is weft.
    pub contenders: &'static [&'static str],
    /// All cases, in the order they run.
    pub cases: Vec<Case>,
}

impl Suite {
    /// Names of all cases, comma separated (for error messages and help).
    pub fn case_names(&self) -> String {
        let names: Vec<&str> = self.cases.iter().map(|c| c.name).collect();
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
    /// Nanoseconds per unit, one per completed round.
    samples: Vec<f64>,
    /// Set when a measurement panicked; no further rounds are run for it.
    failure: Option<String>,
}

impl Series {
    fn median(&self) -> Option<f64> {
        if self.failure.is_some() {
            None
        } else {
            median(&self.samples)
        }
    }
}

/// Results of one case.
#[derive(Debug, Clone)]
struct CaseResult {
    name: &'static str,
    unit: &'static str,
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
    }));
    let watchdog = Watchdog::start(opts.timeout, report.clone(), opts.json.clone());
    let table = Table::new(suite, &selected);

    println!(
        "weft-bench {}: cores={} workers={} rounds={} (median of rounds; lower is better; ratio < 1.0 = weft faster)",
        suite.command,
        cores(),
        opts.workers,
        opts.rounds
    );
    if opts.rounds < 11 {
        println!("note: fewer than 11 rounds; medians are less robust");
    }
    println!();
    table.print_header();

    let n = suite.contenders.len();
    let mut any_failed = false;
    for (ci, case) in selected.iter().enumerate() {
        eprintln!("[{}/{}] {} ...", ci + 1, selected.len(), case.name);
        let started = Instant::now();
        let mut series = vec![Series::default(); n];
        for round in 0..opts.rounds {
            for k in 0..n {
                let who = (ci + round + k) % n;
                if series[who].failure.is_some() {
                    continue;
                }
                watchdog.arm(format!(
                    "case {} on {} (round {}/{})",
                    case.name,
                    suite.contenders[who],
                    round + 1,
                    opts.rounds
                ));
                let workers = opts.workers;
                let outcome =
                    panic::catch_unwind(AssertUnwindSafe(|| (case.measure)(who, workers)));
                watchdog.disarm();
                match outcome {
                    Ok(ns) => series[who].samples.push(ns),
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
            name: case.name,
            unit: case.unit,
            series,
        };
        table.print_row(&result);
        lock(&report).cases.push(result);
    }
    watchdog.stop();

    if let Some(path) = &opts.json {
        let json = to_json(&lock(&report));
        std::fs::write(path, json)
            .map_err(|e| Error::Failed(format!("cannot write {}: {e}", path.display())))?;
        eprintln!("wrote {}", path.display());
    }
    if any_failed {
        return Err(Error::Failed("some measurements panicked".into()));
    }
    Ok(())
}

/// The cases named in `wanted` (all if empty), in suite order.
fn select<'a>(suite: &'a Suite, wanted: &[String]) -> Result<Vec<&'a Case>, Error> {
    for name in wanted {
        if !suite.cases.iter().any(|c| c.name == name) {
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
        .filter(|c| wanted.is_empty() || wanted.iter().any(|w| w == c.name))
        .collect())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

/// `a / b` when both exist.
fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Formats nanoseconds with a unit that keeps 3-4 significant digits.
pub fn format_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

// --------------------------------------------------------------- table ----

/// Fixed-width text table, printed one row per finished case.
struct Table {
    contenders: &'static [&'static str],
    case_width: usize,
    unit_width: usize,
    time_widths: Vec<usize>,
    ratio_headers: Vec<String>,
}

impl Table {
    fn new(suite: &Suite, cases: &[&Case]) -> Table {
        let case_width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0).max(4);
        let unit_width = cases.iter().map(|c| c.unit.len()).max().unwrap_or(0).max(4);
        let time_widths = suite.contenders.iter().map(|c| c.len().max(10)).collect();
        let ratio_headers = suite.contenders[1..]
            .iter()
            .map(|c| format!("{}/{}", suite.contenders[0], c))
            .collect();
        Table {
            contenders: suite.contenders,
            case_width,
            unit_width,
            time_widths,
            ratio_headers,
        }
    }

    fn print_header(&self) {
        let mut line = format!(
            "{:<cw$}  {:<uw$}",
            "case",
            "per",
            cw = self.case_width,
            uw = self.unit_width
        );
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

    fn print_row(&self, r: &CaseResult) {
        let mut line = format!(
            "{:<cw$}  {:<uw$}",
            r.name,
            r.unit,
            cw = self.case_width,
            uw = self.unit_width
        );
        for (s, w) in r.series.iter().zip(&self.time_widths) {
            let cell = match (&s.failure, s.median()) {
                (Some(_), _) => "FAILED".to_string(),
                (None, Some(m)) => format_ns(m),
                (None, None) => "-".to_string(),
            };
            let _ = write!(line, "  {cell:>w$}");
        }
        let subject = r.series[0].median();
        for (s, h) in r.series[1..].iter().zip(&self.ratio_headers) {
            let cell = ratio(subject, s.median()).map_or("-".to_string(), |x| format!("{x:.2}"));
            let _ = write!(line, "  {cell:>w$}", w = h.len().max(6));
        }
        println!("{line}");
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
        let _ = writeln!(o, "      \"name\": {},", json_str(c.name));
        let _ = writeln!(o, "      \"per\": {},", json_str(c.unit));
        let subject = c.series[0].median();
        let _ = writeln!(o, "      \"median_ns\": {{");
        for (j, (name, s)) in r.contenders.iter().zip(&c.series).enumerate() {
            let comma = if j + 1 < c.series.len() { "," } else { "" };
            let _ = writeln!(
                o,
                "        {}: {}{comma}",
                json_str(name),
                json_num(s.median())
            );
        }
        let _ = writeln!(o, "      }},");
        let _ = writeln!(o, "      \"ratios\": {{");
        for (j, (name, s)) in r.contenders[1..].iter().zip(&c.series[1..]).enumerate() {
            let comma = if j + 2 < c.series.len() { "," } else { "" };
            let key = format!("{}/{}", r.contenders[0], name);
            let _ = writeln!(
                o,
                "        {}: {}{comma}",
                json_str(&key),
                json_num(ratio(subject, s.median()))
            );
        }
        let _ = writeln!(o, "      }},");
        let _ = writeln!(o, "      \"samples_ns\": {{");
        for (j, (name, s)) in r.contenders.iter().zip(&c.series).enumerate() {
            let comma = if j + 1 < c.series.len() { "," } else { "" };
            let xs: Vec<String> = s.samples.iter().map(|x| json_num(Some(*x))).collect();
            let _ = writeln!(o, "        {}: [{}]{comma}", json_str(name), xs.join(", "));
        }
        let _ = writeln!(o, "      }},");
        let _ = writeln!(o, "      \"failures\": {{");
        for (j, (name, s)) in r.contenders.iter().zip(&c.series).enumerate() {
            let comma = if j + 1 < c.series.len() { "," } else { "" };
            let f = s.failure.as_deref().map_or("null".to_string(), json_str);
            let _ = writeln!(o, "        {}: {f}{comma}", json_str(name));
        }
        let _ = writeln!(o, "      }}");
        let comma = if i + 1 < r.cases.len() { "," } else { "" };
        let _ = writeln!(o, "    }}{comma}");
    }
    let _ = writeln!(o, "  ]");
    let _ = writeln!(o, "}}");
    o
}

// ------------------------------------------------------------ watchdog ----

/// What the watchdog is currently guarding.
struct Armed {
    deadline: Instant,
    label: String,
}

/// Kills the process when one measurement exceeds its time limit.
struct Watchdog {
    armed: Arc<Mutex<Option<Armed>>>,
    done: Arc<std::sync::atomic::AtomicBool>,
    timeout: Duration,
    thread: Option<thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(timeout: Duration, report: Arc<Mutex<Report>>, json: Option<PathBuf>) -> Watchdog {
        let armed: Arc<Mutex<Option<Armed>>> = Arc::new(Mutex::new(None));
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let armed = armed.clone();
            let done = done.clone();
            thread::Builder::new()
                .name("weft-bench-watchdog".into())
                .spawn(move || {
                    while !done.load(std::sync::atomic::Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(50));
                        let label = match &*lock(&armed) {
                            Some(a) if Instant::now() >= a.deadline => a.label.clone(),
                            _ => continue,
                        };
                        Self::fire(&label, timeout, &report, json.as_ref());
                    }
                })
                .expect("cannot start the watchdog thread")
        };
        Watchdog {
            armed,
            done,
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

    fn arm(&self, label: String) {
        *lock(&self.armed) = Some(Armed {
            deadline: Instant::now() + self.timeout,
            label,
        });
    }

    fn disarm(&self) {
        *lock(&self.armed) = None;
    }

    fn stop(mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
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
    fn json_escapes() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\n\"");
    }

    #[test]
    fn formats_units() {
        assert_eq!(format_ns(12.34), "12.3 ns");
        assert_eq!(format_ns(1_500.0), "1.50 µs");
        assert_eq!(format_ns(2_500_000.0), "2.50 ms");
    }
}

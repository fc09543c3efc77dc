//! The report format shared by the evaluation suites (`retrieve`, `forget`, and later
//! `consolidate`).
//!
//! **Text**: aligned tables ([`Table`]) — right-aligned numbers, column groups separated by
//! `|`, a `TOTAL` row last, the row label (file or character) in the last column — followed by
//! a legend and a `wall …` timing line.
//!
//! **JSON** (`--json OUT`, `-` for stdout): one object whose shared keys are the same for every
//! suite ([`envelope`]):
//!
//! ```text
//! { "suite": "retrieve" | "forget" | …, "format": 1,
//!   "settings": { what the run used: embedder, reviser, modes, … },
//!   "definitions": { metric name → what it means },
//!   "totals": { group key → { "summary": {…counts…}, "rates": {…} , … } },
//!   "files": [ { "file": path, "name": …, … per-suite details, "cases": [ … ] } ],
//!   "errors": [ "file: message", … ],
//!   "timing": { "wall_secs": f64, … } ,
//!   … suite-specific keys }
//! ```
//!
//! When the JSON goes to stdout, the text report goes to stderr ([`Printer`]), so stdout stays
//! one parseable document.

use serde_json::{Map, Value};
use std::io::Write;
use std::path::PathBuf;

/// Version of the JSON layout; bumped when a shared key changes meaning.
pub const FORMAT_VERSION: u32 = 1;

/// Where the JSON report goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonDest {
    /// Standard output (the argument `-`).
    Stdout,
    /// A file.
    File(PathBuf),
}

impl JsonDest {
    /// Parses a `--json` value: `-` is stdout, anything else a path.
    pub fn parse(value: &str) -> JsonDest {
        if value == "-" {
            JsonDest::Stdout
        } else {
            JsonDest::File(PathBuf::from(value))
        }
    }

    /// Writes `doc` pretty-printed (with a trailing newline).
    pub fn write(&self, doc: &Value) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(doc)? + "\n";
        match self {
            JsonDest::Stdout => std::io::stdout().lock().write_all(text.as_bytes()),
            JsonDest::File(path) => std::fs::write(path, text),
        }
    }

    /// Writes `doc` and, for a file, says so through `out`. The error names the destination.
    pub fn emit(&self, doc: &Value, out: &Printer) -> Result<(), String> {
        self.write(doc)
            .map_err(|e| format!("cannot write {}: {e}", self.describe()))?;
        if let JsonDest::File(_) = self {
            out.line(format!("report written to {}", self.describe()));
        }
        Ok(())
    }

    /// How the destination is named in messages.
    pub fn describe(&self) -> String {
        match self {
            JsonDest::Stdout => "stdout".into(),
            JsonDest::File(p) => p.display().to_string(),
        }
    }
}

/// Parses `FILE|DIR... [--json OUT|-]`, the arguments of the file-driven suites; `missing`
/// is the error when no file or directory is given.
pub fn parse_targets(
    args: &[String],
    missing: &str,
) -> Result<(Vec<PathBuf>, Option<JsonDest>), String> {
    let mut targets = Vec::new();
    let mut json_dest = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--json" => {
                let v = it
                    .next()
                    .ok_or("--json needs a value (a path, or - for stdout)")?;
                json_dest = Some(JsonDest::parse(v));
            }
            s if s.starts_with("--") => return Err(format!("unknown option {s}")),
            s => targets.push(PathBuf::from(s)),
        }
    }
    if targets.is_empty() {
        return Err(missing.into());
    }
    Ok((targets, json_dest))
}

/// Prints the text report: to stdout, or to stderr when the JSON report takes stdout.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    to_stderr: bool,
}

impl Printer {
    /// A printer for a run whose JSON goes to `json`.
    pub fn new(json: Option<&JsonDest>) -> Printer {
        Printer {
            to_stderr: json == Some(&JsonDest::Stdout),
        }
    }

    /// Prints one line (or several, when `text` holds newlines).
    pub fn line(&self, text: impl AsRef<str>) {
        if self.to_stderr {
            eprintln!("{}", text.as_ref());
        } else {
            println!("{}", text.as_ref());
        }
    }
}

/// The shared keys of a suite's JSON report (see the module documentation). The suite
/// inserts its own extra keys into the returned map.
#[allow(clippy::too_many_arguments)]
pub fn envelope(
    suite: &str,
    settings: Value,
    definitions: Value,
    totals: Value,
    files: Vec<Value>,
    errors: Vec<String>,
    timing: Value,
) -> Map<String, Value> {
    let mut doc = Map::new();
    doc.insert("suite".into(), Value::from(suite));
    doc.insert("format".into(), Value::from(FORMAT_VERSION));
    doc.insert("settings".into(), settings);
    doc.insert("definitions".into(), definitions);
    doc.insert("totals".into(), totals);
    doc.insert("files".into(), Value::Array(files));
    doc.insert(
        "errors".into(),
        Value::Array(errors.into_iter().map(Value::from).collect()),
    );
    doc.insert("timing".into(), timing);
    doc
}

/// `n / den` as an `f64`, `None` when `den` is 0.
pub fn ratio(n: f64, den: usize) -> Option<f64> {
    (den > 0).then(|| n / den as f64)
}

/// A ratio as a percentage with one decimal, `-` when absent.
pub fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{:.1}", v * 100.0))
}

/// A number with three decimals, `-` when absent.
pub fn num(x: Option<f64>) -> String {
    x.map_or("-".into(), |v| format!("{v:.3}"))
}

/// Seconds with two decimals and a unit.
pub fn secs(x: f64) -> String {
    format!("{x:.2}s")
}

/// Column alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text (names, details).
    Left,
    /// Numbers.
    Right,
}

#[derive(Debug, Clone)]
struct Column {
    name: String,
    align: Align,
    /// A `|` separates this column from the previous one.
    group_start: bool,
    /// Not padded (the last, free-text column).
    free: bool,
}

/// An aligned text table. Widths count East Asian wide characters as two columns, so Chinese
/// names line up in a terminal.
#[derive(Debug, Clone, Default)]
pub struct Table {
    columns: Vec<Column>,
    rows: Vec<Vec<String>>,
    next_group: bool,
}

impl Table {
    /// An empty table.
    pub fn new() -> Table {
        Table::default()
    }

    /// Adds a column.
    pub fn col(mut self, name: impl Into<String>, align: Align) -> Table {
        let group_start = std::mem::take(&mut self.next_group) && !self.columns.is_empty();
        self.columns.push(Column {
            name: name.into(),
            align,
            group_start,
            free: false,
        });
        self
    }

    /// Adds the last column: left-aligned, not padded (labels, details).
    pub fn label(self, name: impl Into<String>) -> Table {
        let mut t = self.col(name, Align::Left);
        if let Some(c) = t.columns.last_mut() {
            c.free = true;
        }
        t
    }

    /// The next column starts a new group (a `|` before it).
    pub fn group(mut self) -> Table {
        self.next_group = true;
        self
    }

    /// Adds a row; missing trailing cells print empty.
    pub fn push(&mut self, cells: Vec<String>) {
        debug_assert!(
            cells.len() <= self.columns.len(),
            "row has {} cells for {} columns",
            cells.len(),
            self.columns.len()
        );
        self.rows.push(cells);
    }

    /// Header and rows, one per line.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let names: Vec<String> = self.columns.iter().map(|c| c.name.clone()).collect();
        let mut out = self.line(&names, &widths);
        for r in &self.rows {
            out.push('\n');
            out.push_str(&self.line(r, &widths));
        }
        out
    }

    fn widths(&self) -> Vec<usize> {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(i))
                    .map(|s| display_width(s))
                    .chain(std::iter::once(display_width(&c.name)))
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    fn line(&self, cells: &[String], widths: &[usize]) -> String {
        let mut out = String::new();
        for (i, c) in self.columns.iter().enumerate() {
            let cell = cells.get(i).map_or("", String::as_str);
            if i > 0 {
                out.push_str(if c.group_start { " | " } else { " " });
            }
            let pad = widths[i].saturating_sub(display_width(cell));
            match (c.align, c.free) {
                (_, true) => out.push_str(cell),
                (Align::Left, false) => {
                    out.push_str(cell);
                    out.extend(std::iter::repeat_n(' ', pad));
                }
                (Align::Right, false) => {
                    out.extend(std::iter::repeat_n(' ', pad));
                    out.push_str(cell);
                }
            }
        }
        out.trim_end().to_owned()
    }
}

/// Terminal width of `s`: East Asian wide and fullwidth characters count two.
pub fn display_width(s: &str) -> usize {
    s.chars().map(|c| if is_wide(c) { 2 } else { 1 }).sum()
}

fn is_wide(c: char) -> bool {
    matches!(c as u32,
        0x1100..=0x115F
        | 0x2E80..=0x303E
        | 0x3041..=0x33FF
        | 0x3400..=0x4DBF
        | 0x4E00..=0x9FFF
        | 0xA000..=0xA4CF
        | 0xAC00..=0xD7A3
        | 0xF900..=0xFAFF
        | 0xFE30..=0xFE4F
        | 0xFF00..=0xFF60
        | 0xFFE0..=0xFFE6
        | 0x20000..=0x3FFFD)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tables_align_numbers_right_groups_and_wide_characters() {
        let mut t = Table::new()
            .col("cases", Align::Right)
            .col("name", Align::Left)
            .group()
            .col("pass%", Align::Right)
            .label("file");
        t.push(vec![
            "3".into(),
            "丛雨".into(),
            "100.0".into(),
            "a.json".into(),
        ]);
        t.push(vec!["12".into(), "ab".into(), "5.0".into(), "TOTAL".into()]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cases name | pass% file");
        assert_eq!(lines[1], "    3 丛雨 | 100.0 a.json");
        assert_eq!(lines[2], "   12 ab   |   5.0 TOTAL");
    }

    #[test]
    fn missing_cells_print_empty() {
        let mut t = Table::new().col("a", Align::Right).label("b");
        t.push(vec!["1".into()]);
        assert_eq!(t.render(), "a b\n1");
    }

    #[test]
    fn envelope_has_the_shared_keys() {
        let doc = envelope(
            "forget",
            json!({"reviser": "scripted"}),
            json!({}),
            json!({"all": {}}),
            vec![json!({"file": "x.json"})],
            vec!["bad".into()],
            json!({"wall_secs": 0.5}),
        );
        let mut keys: Vec<&str> = doc.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "definitions",
                "errors",
                "files",
                "format",
                "settings",
                "suite",
                "timing",
                "totals"
            ]
        );
        assert_eq!(doc["suite"], "forget");
        assert_eq!(doc["format"], FORMAT_VERSION);
        assert_eq!(doc["errors"], json!(["bad"]));
    }

    #[test]
    fn formatting_helpers() {
        assert_eq!(pct(ratio(1.0, 3)), "33.3");
        assert_eq!(pct(ratio(1.0, 0)), "-");
        assert_eq!(num(Some(0.5)), "0.500");
        assert_eq!(secs(1.234), "1.23s");
        assert_eq!(display_width("丛雨a"), 5);
        assert_eq!(JsonDest::parse("-"), JsonDest::Stdout);
        assert_eq!(
            JsonDest::parse("out.json"),
            JsonDest::File(PathBuf::from("out.json"))
        );
    }
}

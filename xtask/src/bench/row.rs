//! One row of the bench report: a metric, its value, its target and whether
//! it was met; and the rows as a text table and a Markdown table.

use std::fmt::Write as _;

pub(super) struct Row {
    pub(super) metric: String,
    pub(super) value: String,
    pub(super) target: String,
    pub(super) ok: Option<bool>,
}

pub(super) fn row(
    metric: impl Into<String>,
    value: impl Into<String>,
    target: impl Into<String>,
    ok: Option<bool>,
) -> Row {
    Row { metric: metric.into(), value: value.into(), target: target.into(), ok }
}

/// The rows as a text table (for the terminal) and a Markdown table.
pub(super) fn render(rows: &[Row]) -> (String, String) {
    let w = |f: fn(&Row) -> &str| rows.iter().map(|r| f(r).chars().count()).max().unwrap_or(0);
    let (w0, w1, w2) = (w(|r| &r.metric).max(6), w(|r| &r.value).max(5), w(|r| &r.target).max(6));
    let ok = |o: Option<bool>| match o {
        Some(true) => "ok",
        Some(false) => "MISS",
        None => "-",
    };
    let pad = |s: &str, n: usize| format!("{s}{}", " ".repeat(n.saturating_sub(s.chars().count())));
    let mut text = format!("{}  {}  {}  ok?\n", pad("metric", w0), pad("value", w1), pad("target", w2));
    let mut md = "| metric | value | target | ok? |\n|---|---|---|---|\n".to_string();
    for r in rows {
        let _ = writeln!(text, "{}  {}  {}  {}", pad(&r.metric, w0), pad(&r.value, w1), pad(&r.target, w2), ok(r.ok));
        let _ = writeln!(md, "| {} | {} | {} | {} |", r.metric, r.value, r.target, ok(r.ok));
    }
    (text, md)
}

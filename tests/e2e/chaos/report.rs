//! The chaos table: one row per fault, and what counts as a failure.

use std::fmt::Write;

use super::faults::Row;

pub fn render(rows: &[Row]) -> String {
    let mut out = String::from(
        "| fault | queries | SERVFAIL | timeouts | wrong answers | nodes withdrawn | recovery | notes |\n\
         |---|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for r in rows {
        let recovery = r.recovery.map_or_else(|| "not recovered".to_string(), |d| format!("{:.1} s", d.as_secs_f64()));
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.fault, r.seen.sent, r.seen.servfail, r.seen.timeouts, r.seen.wrong, r.withdrawn, recovery, r.note
        );
    }
    out
}

/// Every row must show 0 of each: no fault here makes a SERVFAIL or a
/// timeout unavoidable, since every NS host keeps its table and every query
/// has an NS host that is not the fault's target to go to — and the
/// queriers here do not even retry elsewhere.
pub fn failures(rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rows {
        let s = &r.seen;
        for (what, n) in [("wrong answers", s.wrong), ("SERVFAIL", s.servfail), ("timeouts", s.timeouts)] {
            if n > 0 {
                out.push(format!("{}: {n} {what}", r.fault));
            }
        }
        if r.withdrawn > 0 {
            out.push(format!("{}: {} nodes withdrawn", r.fault, r.withdrawn));
        }
        if r.recovery.is_none() {
            out.push(format!("{}: not recovered", r.fault));
        }
        if r.fault_failed {
            out.push(format!("{}: {}", r.fault, r.note));
        }
        if s.sent == 0 {
            out.push(format!("{}: no query was sent", r.fault));
        }
    }
    out
}

/// Writes the table to `target/chaos/latest.md` (best effort).
pub fn save(table: &str) {
    let dir = crate::support::workspace_root().join("target").join("chaos");
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join("latest.md"), table);
    }
}

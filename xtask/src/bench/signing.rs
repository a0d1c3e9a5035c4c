//! The signing step: `bench_helper signing` (no root, no data files): the
//! time to sign a full route table for 1 000 nodes, the signatures made per
//! second, and the re-signing after one node went down, for ECDSA P-256
//! (algorithm 13) and Ed25519 (algorithm 15). `--only-signing` runs just
//! this step (see [`super::helper_step`]).

use super::row::{Row, row};
use super::{Bench, Options, Results, num};

impl Bench {
    /// `bench_helper signing`.
    pub(super) fn signing(&self) -> anyhow::Result<Results> {
        super::helper_step::run(&self.helper, "signing")
    }
}

/// The step's rows, per algorithm.
pub(super) fn rows(r: &Results, rows: &mut Vec<Row>) {
    for (label, name) in [("ecdsa", "ECDSA P-256"), ("ed25519", "Ed25519")] {
        let get = |k: &str| r.get(&format!("signing_{label}_{k}")).map_or("?", String::as_str);
        if let Some(v) = num(r, &format!("signing_{label}_full_table_ms")) {
            let what = format!("{} answers, {} RRSIGs", get("answers"), get("signatures"));
            rows.push(row(
                format!("signing ({name}): a full table for 1 000 nodes ({what})"),
                format!("{v:.1} ms"),
                "-",
                None,
            ));
        }
        if let Some(v) = num(r, &format!("signing_{label}_per_s")) {
            rows.push(row(
                format!("signing ({name}): signatures per second, 1 thread"),
                format!("{v:.0}/s"),
                "-",
                None,
            ));
        }
        if let Some(v) = num(r, &format!("signing_{label}_node_down_ms")) {
            let made = get("node_down_signatures");
            rows.push(row(
                format!("signing ({name}): the next table after one node down ({made} new RRSIGs)"),
                format!("{v:.1} ms"),
                "-",
                None,
            ));
        }
    }
}

/// `cargo xtask bench --only-signing`.
pub(super) fn exec_only(opts: &Options) -> anyhow::Result<()> {
    super::helper_step::exec_only(
        opts,
        "signing",
        "a full route table signed, signatures per second, one node down",
        rows,
    )
}

//! The edge comparison's section of the results document: the last section,
//! which `--edge` replaces and the other steps keep when they rewrite the document.

/// Where the edge section of the results document starts; it runs to the end.
pub(super) const SECTION_MARK: &str = "<!-- edge comparison: written by `cargo xtask bench --edge` -->";

/// `doc` with its edge section (from `SECTION_MARK` to the end) replaced by `summary`.
pub(super) fn with_section(doc: &str, summary: &str) -> String {
    let head = doc.split_once(SECTION_MARK).map_or(doc, |(head, _)| head).trim_end();
    format!("{head}\n\n{SECTION_MARK}\n{summary}")
}

/// The edge section of the results document, if it has one (kept when the
/// other steps rewrite the document).
pub(super) fn section(doc: &str) -> Option<String> {
    doc.split_once(SECTION_MARK).map(|(_, s)| format!("\n{SECTION_MARK}{s}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_replaces_only_its_own() {
        let once = with_section("# Results\n\nbody\n", "## Edge\nfirst\n");
        let twice = with_section(&once, "## Edge\nsecond\n");
        assert!(twice.starts_with("# Results\n\nbody\n\n"));
        assert!(twice.contains("second") && !twice.contains("first"));
        assert_eq!(section(&twice).unwrap().matches(SECTION_MARK).count(), 1);
    }
}

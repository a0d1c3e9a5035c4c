//! `cargo xtask house`: the structure rules of the product code, checked.
//!
//! Product code is every `*.rs` under the crates' `src/` directories and
//! `lagran-userspace/examples`, except test code: files named `tests.rs`, files
//! under a `tests/` directory, files of modules declared `#[cfg(test)] mod x;`,
//! anything under `fuzz/`, and generated files (`@generated` near the top).
//! In it:
//! - no file is over [`MAX_FILE_LINES`] lines;
//! - no function (free, inherent, trait default, nested) is over
//!   [`MAX_FN_LINES`] lines, except those in [`ALLOWED_LONG_FNS`], each with
//!   its reason;
//! - the top-level modules of a crate, and the sibling modules of each
//!   directory, do not import each other in a cycle (a module naming its own
//!   ancestor or descendant is not an edge; `#[cfg(test)]` items are ignored);
//! - no comment cites a document outside the repository (a specification
//!   section, a seed document, an issue number), in product or test code:
//!   comments quote the requirement instead.
//!
//! Every violation is listed with its place and measure, then the counts.

mod comments;
mod cycles;
mod functions;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::util;

/// The longest product source file, in lines.
pub const MAX_FILE_LINES: usize = 800;
/// The longest function, in lines from `fn` to its closing brace.
pub const MAX_FN_LINES: usize = 120;

/// A function allowed over [`MAX_FN_LINES`], and why.
pub struct AllowedLongFn {
    /// Relative to the workspace root.
    pub file: &'static str,
    pub name: &'static str,
    pub reason: &'static str,
}

pub const ALLOWED_LONG_FNS: &[AllowedLongFn] = &[AllowedLongFn {
    file: "lagran-ebpf/src/response.rs",
    name: "build",
    reason: "the BPF verifier must see the response's bounds checks and writes in one function: \
             split into calls, it loses the packet bounds it proved and rejects the program",
}];

/// The product source roots, relative to the workspace root. Each `src`
/// directory is one crate's module tree; under `examples`, every directory is
/// one example's tree and every file an example of its own.
const SOURCE_ROOTS: &[(&str, RootKind)] = &[
    ("lagran-userspace/src", RootKind::Crate),
    ("lagran-edge/src", RootKind::Crate),
    ("lagran-site/src", RootKind::Crate),
    ("lagran-ebpf/src", RootKind::Crate),
    ("lagran-common/src", RootKind::Crate),
    ("xtask/src", RootKind::Crate),
    ("lagran-userspace/examples", RootKind::Examples),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RootKind {
    Crate,
    Examples,
}

#[derive(Debug, Clone, clap::Parser)]
pub struct Options {}

/// One broken rule, where, and by how much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    LongFile { file: PathBuf, lines: usize },
    LongFn { file: PathBuf, line: usize, name: String, lines: usize },
    Cycle { tree: PathBuf, parent: String, members: Vec<String>, edges: Vec<String> },
    OutsideReference { file: PathBuf, line: usize, pattern: &'static str, text: String },
    Unparsable { file: PathBuf, error: String },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::LongFile { file, lines } => {
                write!(f, "{}:1: file has {lines} lines (limit {MAX_FILE_LINES})", file.display())
            }
            Violation::LongFn { file, line, name, lines } => {
                write!(f, "{}:{line}: fn `{name}` has {lines} lines (limit {MAX_FN_LINES})", file.display())
            }
            Violation::Cycle { tree, parent, members, edges } => write!(
                f,
                "{}: import cycle among the modules of {parent}: {}; edges: {}",
                tree.display(),
                members.join(", "),
                edges.join("; ")
            ),
            Violation::OutsideReference { file, line, pattern, text } => {
                write!(f, "{}:{line}: comment cites an outside document ({pattern:?}): {text}", file.display())
            }
            Violation::Unparsable { file, error } => write!(f, "{}: cannot parse: {error}", file.display()),
        }
    }
}

/// What the check found, and the allowed exceptions it met.
#[derive(Debug, Default)]
pub struct Report {
    pub violations: Vec<Violation>,
    pub allowed: Vec<String>,
    pub files: usize,
}

impl Report {
    fn count(&self, what: fn(&Violation) -> bool) -> usize {
        self.violations.iter().filter(|v| what(v)).count()
    }

    /// "N files over 800 lines, …": one line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} product files checked: {} over {MAX_FILE_LINES} lines, {} functions over {MAX_FN_LINES} lines, \
             {} import cycles, {} comments citing outside documents, {} unparsable",
            self.files,
            self.count(|v| matches!(v, Violation::LongFile { .. })),
            self.count(|v| matches!(v, Violation::LongFn { .. })),
            self.count(|v| matches!(v, Violation::Cycle { .. })),
            self.count(|v| matches!(v, Violation::OutsideReference { .. })),
            self.count(|v| matches!(v, Violation::Unparsable { .. })),
        )
    }
}

pub fn exec(_: Options) -> anyhow::Result<()> {
    let report = check(&util::workspace_root())?;
    for v in &report.violations {
        println!("{v}");
    }
    for a in &report.allowed {
        println!("allowed: {a}");
    }
    println!("{}", report.summary());
    if !report.violations.is_empty() {
        bail!("`cargo xtask house`: {} violations (listed above)", report.violations.len());
    }
    Ok(())
}

/// Checks every product source file under `root` (the workspace root).
pub fn check(root: &Path) -> anyhow::Result<Report> {
    let mut report = Report::default();
    for (dir, kind) in SOURCE_ROOTS {
        let dir = root.join(dir);
        if !dir.is_dir() {
            continue;
        }
        for tree in source::trees(&dir, *kind)? {
            check_tree(root, &tree, &mut report)?;
        }
    }
    check_citations(root, &mut report)?;
    Ok(report)
}

/// Where comments are read for citations: product and test code alike.
const CITATION_ROOTS: &[&str] =
    &["lagran-userspace", "lagran-edge", "lagran-site", "lagran-ebpf", "lagran-common", "xtask", "tests"];

/// Every comment of every Rust file under [`CITATION_ROOTS`], test code
/// included: a test's comment explains the code as much as a product's.
fn check_citations(root: &Path, report: &mut Report) -> anyhow::Result<()> {
    let mut files = Vec::new();
    for dir in CITATION_ROOTS.iter().map(|d| root.join(d)).filter(|d| d.is_dir()) {
        source::rust_files(&dir, &mut files)?;
    }
    for path in files {
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let file = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
        for c in comments::outside_references(&text) {
            report.violations.push(Violation::OutsideReference {
                file: file.clone(),
                line: c.line,
                pattern: c.pattern,
                text: c.text,
            });
        }
    }
    Ok(())
}

/// One module tree: each file's length, functions and comments, then the
/// tree's import graph.
fn check_tree(root: &Path, tree: &source::Tree, report: &mut Report) -> anyhow::Result<()> {
    let rel = |p: &Path| p.strip_prefix(root).unwrap_or(p).to_path_buf();
    let mut graph = cycles::Graph::default();
    for file in source::product_files(tree)? {
        let text = std::fs::read_to_string(&file.path).with_context(|| format!("reading {}", file.path.display()))?;
        let path = rel(&file.path);
        report.files += 1;
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            report.violations.push(Violation::LongFile { file: path.clone(), lines });
        }
        let ast = match syn::parse_file(&text) {
            Ok(ast) => ast,
            Err(e) => {
                let error = format!("line {}: {e}", e.span().start().line);
                report.violations.push(Violation::Unparsable { file: path, error });
                continue;
            }
        };
        for f in functions::long_functions(&ast, MAX_FN_LINES) {
            match allowed(&path, &f.name) {
                Some(reason) => report.allowed.push(format!(
                    "{}:{}: fn `{}` has {} lines: {reason}",
                    path.display(),
                    f.line,
                    f.name,
                    f.lines
                )),
                None => report.violations.push(Violation::LongFn {
                    file: path.clone(),
                    line: f.line,
                    name: f.name,
                    lines: f.lines,
                }),
            }
        }
        graph.add_file(&file.module, &path, &ast);
    }
    for c in graph.cycles() {
        report.violations.push(Violation::Cycle {
            tree: rel(&tree.dir),
            parent: c.parent,
            members: c.members,
            edges: c.edges,
        });
    }
    Ok(())
}

fn allowed(file: &Path, name: &str) -> Option<&'static str> {
    ALLOWED_LONG_FNS.iter().find(|a| Path::new(a.file) == file && a.name == name).map(|a| a.reason)
}

#[cfg(test)]
mod tests;

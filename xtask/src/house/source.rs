//! Which files are product code, and the module each one is.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use super::RootKind;

/// One module tree: a crate's `src`, an example's directory, or a one-file example.
pub struct Tree {
    pub dir: PathBuf,
    /// A one-file example: the tree is this file alone.
    pub single: Option<PathBuf>,
}

/// A product source file and its module path in its tree (`[]` for the root).
pub struct SourceFile {
    pub path: PathBuf,
    pub module: Vec<String>,
}

/// The module trees under one source root.
pub fn trees(dir: &Path, kind: RootKind) -> anyhow::Result<Vec<Tree>> {
    if kind == RootKind::Crate {
        return Ok(vec![Tree { dir: dir.to_path_buf(), single: None }]);
    }
    let mut out = Vec::new();
    for entry in sorted_entries(dir)? {
        if entry.is_dir() {
            out.push(Tree { dir: entry, single: None });
        } else if entry.extension().is_some_and(|e| e == "rs") {
            out.push(Tree { dir: dir.to_path_buf(), single: Some(entry) });
        }
    }
    Ok(out)
}

fn sorted_entries(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    v.sort();
    Ok(v)
}

/// Every `*.rs` under `dir`, at any depth, leaving out build output (`target/`).
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    for p in sorted_entries(dir)? {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    Ok(())
}

/// The module path of `file` in a tree rooted at `dir`: `a/b.rs` and
/// `a/b/mod.rs` are `[a, b]`; `lib.rs`, `main.rs` (and a one-file example) are `[]`.
pub fn module_of(dir: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(dir).unwrap_or(file).with_extension("");
    let mut parts: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    if parts.len() == 1 && (parts[0] == "lib" || parts[0] == "main") {
        parts.clear();
    }
    parts
}

/// The tree's product files: test files, `fuzz/`, generated files and the files
/// of `#[cfg(test)] mod x;` declarations left out.
pub fn product_files(tree: &Tree) -> anyhow::Result<Vec<SourceFile>> {
    if let Some(single) = &tree.single {
        return Ok(vec![SourceFile { path: single.clone(), module: Vec::new() }]);
    }
    let mut all = Vec::new();
    rust_files(&tree.dir, &mut all)?;
    let mut test_paths = Vec::new();
    for f in &all {
        let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        if let Ok(ast) = syn::parse_file(&text) {
            test_paths.extend(test_module_files(f, &ast));
        }
    }
    let mut out = Vec::new();
    for f in all {
        let rel = f.strip_prefix(&tree.dir).unwrap_or(&f);
        let excluded = f.file_name().is_some_and(|n| n == "tests.rs")
            || rel.iter().any(|c| c == "tests" || c == "fuzz")
            || test_paths.iter().any(|t| f == *t || f.starts_with(t.with_extension("")))
            || is_generated(&f);
        if !excluded {
            let module = module_of(&tree.dir, &f);
            out.push(SourceFile { path: f, module });
        }
    }
    Ok(out)
}

fn is_generated(file: &Path) -> bool {
    std::fs::read_to_string(file)
        .map(|t| t.lines().take(5).any(|l| l.contains("@generated") || l.contains("DO NOT EDIT")))
        .unwrap_or(false)
}

/// The files of the modules `file` declares under `#[cfg(test)]` without a body.
fn test_module_files(file: &Path, ast: &syn::File) -> Vec<PathBuf> {
    let dir = file.parent().unwrap_or(Path::new(""));
    let owns_dir = file.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs");
    let child_dir = if owns_dir { dir.to_path_buf() } else { file.with_extension("") };
    let mut out = Vec::new();
    for item in &ast.items {
        let syn::Item::Mod(m) = item else { continue };
        if m.content.is_some() || !is_cfg_test(&m.attrs) {
            continue;
        }
        if let Some(path) = path_attr(&m.attrs) {
            out.push(dir.join(path));
            continue;
        }
        let name = m.ident.to_string();
        out.push(child_dir.join(format!("{name}.rs")));
        out.push(child_dir.join(&name).join("mod.rs"));
    }
    out
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| match &a.meta {
        syn::Meta::NameValue(nv) => match &nv.value {
            syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(s), .. }) => Some(s.value()),
            _ => None,
        },
        _ => None,
    })
}

/// `#[cfg(test)]` exactly.
pub fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && matches!(&a.meta, syn::Meta::List(l) if l.tokens.to_string() == "test"))
}

//! The import graph of one module tree and its cycles among siblings.
//!
//! An edge goes from the module that names a path (`use crate::a::b`,
//! `use super::x`, or `crate::a::f()` in code, macros' tokens included) to the
//! longest module prefix of that path. A module naming its own ancestor or
//! descendant makes no edge; any other edge `x::p → x::q::…` is an edge
//! between the siblings `p` and `q` under `x`, and a strongly connected set of
//! siblings is a cycle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use proc_macro2::{Span, TokenStream, TokenTree};
use syn::visit::Visit;

use super::source::is_cfg_test;

type Module = Vec<String>;

/// The modules of a tree and the paths each one names.
#[derive(Default)]
pub struct Graph {
    modules: BTreeSet<Module>,
    /// (from, the absolute path named, where).
    uses: Vec<(Module, Vec<String>, String)>,
}

/// Sibling modules that import each other in a cycle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    /// The parent of the siblings (`crate` for the top level).
    pub parent: String,
    pub members: Vec<String>,
    /// `a -> b (file:line)`, one per edge between members.
    pub edges: Vec<String>,
}

impl Graph {
    /// Adds the file of `module` (`path` is where it is, for the report).
    pub fn add_file(&mut self, module: &[String], path: &Path, ast: &syn::File) {
        self.modules.insert(module.to_vec());
        let mut v = Collector { graph: self, stack: vec![module.to_vec()], file: path.display().to_string() };
        v.visit_file(ast);
    }

    /// The module a path names: its longest prefix that is a module.
    fn resolve(&self, path: &[String]) -> Module {
        (0..=path.len()).rev().map(|k| path[..k].to_vec()).find(|p| self.modules.contains(p)).unwrap_or_default()
    }

    /// Every cycle among siblings, in the order of their parents.
    pub fn cycles(&self) -> Vec<Cycle> {
        // parent -> sibling -> sibling it names -> first place it does.
        let mut sib: BTreeMap<Module, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
        for (from, path, at) in &self.uses {
            let to = self.resolve(path);
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue;
            }
            let parent = from[..common].to_vec();
            let entry = sib.entry(parent).or_default().entry(from[common].clone()).or_default();
            entry.entry(to[common].clone()).or_insert_with(|| at.clone());
        }
        let mut out = Vec::new();
        for (parent, g) in &sib {
            for scc in strongly_connected(g) {
                let members: BTreeSet<&String> = scc.iter().collect();
                let mut edges = Vec::new();
                for a in &scc {
                    for (b, at) in g.get(a).into_iter().flatten() {
                        if members.contains(b) {
                            edges.push(format!("{a} -> {b} ({at})"));
                        }
                    }
                }
                let parent = if parent.is_empty() { "crate".to_string() } else { parent.join("::") };
                out.push(Cycle { parent, members: scc, edges });
            }
        }
        out
    }
}

/// Tarjan's algorithm; only the components of more than one node, each sorted.
fn strongly_connected(g: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeMap<String, String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn connect<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(w.as_str()) {
                connect(s, w);
                let lw = s.low[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            connect(&mut s, v);
        }
    }
    s.out
}

/// Walks one file, recording the `crate::`/`super::` paths it names.
struct Collector<'g> {
    graph: &'g mut Graph,
    /// The file's module, then the inline modules the walk is in.
    stack: Vec<Module>,
    file: String,
}

impl Collector<'_> {
    fn current(&self) -> &Module {
        self.stack.last().expect("the file's module")
    }

    /// Records `segments` (as written) named at `span`, when it starts at
    /// `crate` or `super`.
    fn record(&mut self, segments: &[String], span: Span) {
        let mut abs = match segments.first().map(String::as_str) {
            Some("crate") => Vec::new(),
            Some("super") => self.current().clone(),
            _ => return,
        };
        let mut rest = &segments[1..];
        if segments[0] == "super" {
            abs.pop();
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        abs.extend(rest.iter().filter(|s| *s != "self").cloned());
        let at = format!("{}:{}", self.file, span.start().line);
        let from = self.current().clone();
        self.graph.uses.push((from, abs, at));
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_leaf(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.use_leaf(prefix, &r.ident),
            syn::UseTree::Glob(g) => self.record(prefix, g.star_token.spans[0]),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    fn use_leaf(&mut self, prefix: &mut Vec<String>, ident: &syn::Ident) {
        prefix.push(ident.to_string());
        self.record(prefix, ident.span());
        prefix.pop();
    }

    /// `crate :: a :: b` and `super :: x` sequences in a macro's tokens.
    fn tokens(&mut self, tokens: TokenStream) {
        let tts: Vec<TokenTree> = tokens.into_iter().collect();
        let mut i = 0;
        while i < tts.len() {
            match &tts[i] {
                TokenTree::Group(g) => self.tokens(g.stream()),
                TokenTree::Ident(id) if id == "crate" || id == "super" => {
                    let mut segs = vec![id.to_string()];
                    let mut j = i + 1;
                    while let (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b)), Some(TokenTree::Ident(n))) =
                        (tts.get(j), tts.get(j + 1), tts.get(j + 2))
                    {
                        if a.as_char() != ':' || b.as_char() != ':' {
                            break;
                        }
                        segs.push(n.to_string());
                        j += 3;
                    }
                    if segs.len() > 1 {
                        self.record(&segs, id.span());
                    }
                    i = j - 1;
                }
                _ => {}
            }
            i += 1;
        }
    }
}

impl<'ast> Visit<'ast> for Collector<'_> {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let test = match item {
            syn::Item::Fn(i) => is_cfg_test(&i.attrs),
            syn::Item::Mod(i) => is_cfg_test(&i.attrs),
            syn::Item::Impl(i) => is_cfg_test(&i.attrs),
            syn::Item::Use(i) => is_cfg_test(&i.attrs),
            syn::Item::Const(i) => is_cfg_test(&i.attrs),
            syn::Item::Static(i) => is_cfg_test(&i.attrs),
            syn::Item::Struct(i) => is_cfg_test(&i.attrs),
            syn::Item::Enum(i) => is_cfg_test(&i.attrs),
            syn::Item::Trait(i) => is_cfg_test(&i.attrs),
            syn::Item::Macro(i) => is_cfg_test(&i.attrs),
            _ => false,
        };
        if !test {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_mod(&mut self, i: &'ast syn::ItemMod) {
        if i.content.is_none() {
            return;
        }
        let mut m = self.current().clone();
        m.push(i.ident.to_string());
        self.graph.modules.insert(m.clone());
        self.stack.push(m);
        syn::visit::visit_item_mod(self, i);
        self.stack.pop();
    }

    fn visit_item_use(&mut self, i: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &i.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let Some(first) = p.segments.first() {
            self.record(&segs, first.ident.span());
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.tokens(m.tokens.clone());
        syn::visit::visit_macro(self, m);
    }
}

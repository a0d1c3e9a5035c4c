use std::path::Path;

use super::cycles::Graph;
use super::{comments, functions};

fn parse(src: &str) -> syn::File {
    syn::parse_file(src).expect("valid Rust")
}

fn module(path: &str) -> Vec<String> {
    if path.is_empty() { Vec::new() } else { path.split("::").map(String::from).collect() }
}

fn graph(files: &[(&str, &str)]) -> Graph {
    let mut g = Graph::default();
    for (m, src) in files {
        g.add_file(&module(m), Path::new(&format!("{m}.rs")), &parse(src));
    }
    g
}

#[test]
fn a_cycle_between_top_level_modules_is_found() {
    let g = graph(&[
        ("", "mod a; mod b;"),
        ("a", "use crate::b::Thing;"),
        ("b", "pub struct Thing; fn f() { crate::a::g(); }"),
    ]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].parent, "crate");
    assert_eq!(cycles[0].members, vec!["a".to_string(), "b".to_string()]);
    assert_eq!(cycles[0].edges.len(), 2);
}

#[test]
fn a_cycle_between_siblings_through_super_and_macros_is_found() {
    let g = graph(&[
        ("x", "mod p; mod q;"),
        ("x::p", "use super::q::{self, Q};"),
        ("x::q", "fn f() { println!(\"{}\", super::p::N); }"),
    ]);
    let cycles = g.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert_eq!(cycles[0].parent, "x");
}

#[test]
fn children_naming_ancestors_and_test_items_make_no_cycle() {
    let g = graph(&[
        ("", "mod a; mod b; use crate::a::A;"),
        ("a", "mod c; pub struct A; use crate::b::B;"),
        ("a::c", "use super::A; use crate::a::A as Z;"),
        ("b", "pub struct B; #[cfg(test)] mod tests { use crate::a::A; }"),
    ]);
    assert_eq!(g.cycles(), Vec::new());
}

fn long_fn(name: &str, body_lines: usize) -> String {
    format!("fn {name}() {{\n{}}}\n", "    let _x = 1;\n".repeat(body_lines))
}

#[test]
fn a_long_function_is_found_with_its_line_and_length() {
    let src = format!("{}\nimpl S {{\n{}}}\n", long_fn("short", 3), long_fn("long", 121));
    let found = functions::long_functions(&parse(&src), 120);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].name, "long");
    assert_eq!(found[0].line, 8);
    assert_eq!(found[0].lines, 123);
}

#[test]
fn nested_and_trait_default_functions_are_measured_and_tests_skipped() {
    let src = format!(
        "fn outer() {{\n{}}}\ntrait T {{\n{}}}\n#[cfg(test)]\nmod tests {{\n{}}}\n",
        long_fn("inner", 130),
        long_fn("default", 125),
        long_fn("a_test", 200)
    );
    let names: Vec<String> = functions::long_functions(&parse(&src), 120).into_iter().map(|f| f.name).collect();
    assert_eq!(names, vec!["outer", "inner", "default"]);
}

#[test]
fn the_allowlisted_function_passes_and_another_does_not() {
    assert!(super::allowed(Path::new("lagran-ebpf/src/response.rs"), "build").is_some());
    assert!(super::allowed(Path::new("lagran-ebpf/src/response.rs"), "other").is_none());
    assert!(super::allowed(Path::new("lagran-ebpf/src/dns.rs"), "build").is_none());
}

#[test]
fn comments_citing_outside_documents_are_found_and_strings_are_not_comments() {
    let src = "// SPEC §10 says so\n\
               /// as seed 004 §4.3 asks\n\
               fn f() { let s = \"// issue 8\"; let c = '\"'; } // Issue #12\n\
               /* the issue is 8 lines long; tissue 9 */\n\
               // issues 8 and 9\n\
               // RFC 7871 §7.1.1\n";
    let found: Vec<(usize, &str)> = comments::outside_references(src).iter().map(|c| (c.line, c.pattern)).collect();
    assert_eq!(found, vec![(1, "SPEC §"), (2, "seed 00"), (3, "issue <n>"), (5, "issue <n>")]);
}

#[test]
fn a_citation_wrapped_over_two_comment_lines_is_found_at_its_first_line() {
    let src = "//! and never withdraws itself (seed\n\
               //! 003: an outage).\n\
               fn f() {}\n\
               // the last line of one comment (issue\n\
               \n\
               // 4 is not a continuation)\n";
    let found: Vec<(usize, &str)> = comments::outside_references(src).iter().map(|c| (c.line, c.pattern)).collect();
    assert_eq!(found, vec![(1, "seed 00")]);
}

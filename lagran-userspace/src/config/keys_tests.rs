//! The configuration table against everything it describes: README's
//! table, the deserializer, the environment and the command line.

use std::cell::RefCell;
use std::collections::BTreeSet;

use super::Config;
use super::keys::{all_keys, markdown_table};
use crate::settings::KeyDefault;

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
const BEGIN: &str = "<!-- config-keys: generated from lagran-userspace's key table -->\n";
const END: &str = "\n<!-- /config-keys -->";
const REGENERATE: &str = "LAGRAN_WRITE_README=1 cargo test -p lagran-userspace --lib config::keys_tests";

/// The names a table row documents: its TOML key, environment variable and flags.
fn names_in_code() -> BTreeSet<String> {
    all_keys().flat_map(|k| k.toml.iter().chain(&k.env).chain(k.flags).map(|n| n.to_string())).collect()
}

/// The same names read back from the first two columns of README's table.
fn names_in(table: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in table.lines().skip(2).filter(|l| l.starts_with('|')) {
        for cell in line.split('|').skip(1).take(2) {
            names.extend(cell.split('`').skip(1).step_by(2).map(str::to_string));
        }
    }
    names
}

/// README's table, and the text before and after it.
fn readme_parts(readme: &str) -> (&str, &str, &str) {
    let start = readme.find(BEGIN).expect("README.md marks its configuration table") + BEGIN.len();
    let end = start + readme[start..].find(END).expect("README.md marks the end of its configuration table");
    (&readme[..start], &readme[start..end], &readme[end..])
}

#[test]
fn readme_documents_exactly_the_keys_of_the_code() {
    let readme = std::fs::read_to_string(README).expect("README.md");
    let (before, table, after) = readme_parts(&readme);
    let generated = markdown_table();
    if std::env::var_os("LAGRAN_WRITE_README").is_some() && table != generated {
        std::fs::write(README, format!("{before}{generated}{after}")).expect("README.md is writable");
        return;
    }
    let (code, documented) = (names_in_code(), names_in(table));
    let undocumented: Vec<_> = code.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "keys in the code but not in README's configuration table: {undocumented:?}; \
         in README's table but not in the code: {unknown:?} (regenerate: {REGENERATE})"
    );
    assert_eq!(table, generated, "README's configuration table is not the code's (regenerate: {REGENERATE})");
}

/// A TOML document setting `value(key)` for every TOML key of the table.
fn document(value: impl Fn(&crate::settings::Key) -> Option<&'static str>) -> String {
    let mut top = String::new();
    let mut tables: Vec<(&str, String)> = Vec::new();
    for key in all_keys() {
        let (Some(path), Some(v)) = (key.toml, value(key)) else { continue };
        match path.rsplit_once('.') {
            None => top.push_str(&format!("{path} = {v}\n")),
            Some((table, field)) => {
                let line = format!("{field} = {v}\n");
                match tables.iter_mut().find(|(t, _)| *t == table) {
                    Some((_, lines)) => lines.push_str(&line),
                    None => tables.push((table, line)),
                }
            }
        }
    }
    tables.into_iter().fold(top, |doc, (table, lines)| format!("{doc}[{table}]\n{lines}"))
}

#[test]
fn every_documented_key_parses() {
    let doc = document(|k| Some(k.example));
    let cfg: Config = toml::from_str(&doc).unwrap_or_else(|e| panic!("the documented keys:\n{doc}\n{e}"));
    assert!(cfg.schedule.caps.is_some() && cfg.schedule.distance.is_some() && cfg.schedule.spill.is_some());
}

#[test]
fn documented_defaults_are_the_code_defaults() {
    let doc = document(|k| match k.default {
        KeyDefault::Toml(v) => Some(v),
        KeyDefault::Described(_) => None,
    });
    let cfg: Config = toml::from_str(&doc).unwrap_or_else(|e| panic!("the documented defaults:\n{doc}\n{e}"));
    assert_eq!(cfg, Config::default(), "the documented defaults:\n{doc}");
}

/// The fields the deserializer accepts in `table` ("" for the top level), from
/// the error an unknown field gets; `None` when `table` is not a table.
fn fields_of(table: &str) -> Option<Vec<String>> {
    let doc = if table.is_empty() { "zz_probe = 0\n".to_string() } else { format!("[{table}]\nzz_probe = 0\n") };
    let err = toml::from_str::<Config>(&doc).err()?.to_string();
    let (_, expected) = err.split_once("unknown field `zz_probe`, expected")?;
    Some(expected.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

/// Every key the deserializer accepts, by TOML path.
fn keys_of_the_parser(table: &str, out: &mut BTreeSet<String>) {
    for field in fields_of(table).unwrap_or_default() {
        let path = if table.is_empty() { field } else { format!("{table}.{field}") };
        if fields_of(&path).is_some() {
            keys_of_the_parser(&path, out);
        } else {
            out.insert(path);
        }
    }
}

#[test]
fn the_table_lists_every_key_the_parser_accepts() {
    let mut parser = BTreeSet::new();
    keys_of_the_parser("", &mut parser);
    assert!(parser.contains("dns.ttl") && parser.contains("schedule.caps.penalty"), "the walk works: {parser:?}");
    let table: BTreeSet<String> = all_keys().filter_map(|k| k.toml).map(str::to_string).collect();
    let undocumented: Vec<_> = parser.difference(&table).collect();
    let unknown: Vec<_> = table.difference(&parser).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "keys the parser accepts but the table lacks: {undocumented:?}; in the table but not the parser: {unknown:?}"
    );
}

/// A TOML example as an environment variable gives it: no quotes, lists comma-separated.
fn env_form(example: &str) -> String {
    let items = example.strip_prefix("[\"").and_then(|e| e.strip_suffix("\"]")).unwrap_or(example);
    items.split("\", \"").map(|i| i.trim_matches('"')).collect::<Vec<_>>().join(",")
}

#[test]
fn the_table_lists_every_environment_variable_the_code_reads() {
    let asked = RefCell::new(BTreeSet::new());
    Config::default()
        .apply_env(|name| {
            asked.borrow_mut().insert(name.to_string());
            None
        })
        .unwrap();
    let table: BTreeSet<String> =
        all_keys().filter(|k| k.toml.is_some()).filter_map(|k| k.env).map(str::to_string).collect();
    assert_eq!(asked.into_inner(), table, "the variables Config::apply_env reads and those of the table");
    for key in all_keys().filter(|k| k.toml.is_some()) {
        let Some(name) = key.env else { continue };
        let value = env_form(key.example);
        let mut cfg = Config::default();
        cfg.apply_env(|n| (n == name).then(|| value.clone())).unwrap_or_else(|e| panic!("{name}={value}: {e}"));
        let from_toml: Config = toml::from_str(&document(|k| (k == key).then_some(k.example))).unwrap();
        assert_ne!(cfg, Config::default(), "{name}={value} changes nothing");
        assert_eq!(cfg, from_toml, "{name}={value} sets what `{}` = {} sets", key.toml.unwrap(), key.example);
    }
}

#[test]
fn the_command_line_has_every_documented_flag() {
    let main = include_str!("../main.rs");
    for key in all_keys() {
        for flag in key.flags {
            let field = format!("{}:", flag.trim_start_matches("--").replace('-', "_"));
            assert!(main.contains(&field), "{flag} is documented but main.rs has no field {field}");
        }
        if let (None, Some(env)) = (key.toml, key.env) {
            assert!(main.contains(&format!("env = \"{env}\"")), "{env} is documented but clap does not read it");
        }
    }
}

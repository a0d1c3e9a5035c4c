//! Comments that cite documents outside the repository.

/// A comment citing an outside document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Citation {
    pub line: usize,
    /// Which kind of citation: a specification section, a seed document, an issue number.
    pub pattern: &'static str,
    /// The comment's text on that line, trimmed.
    pub text: String,
}

/// Every comment line of `src` (line, block and doc comments) that cites a
/// specification section (the word "spec", a space and a section sign), a seed
/// document ("seed", a space and "00…") or an issue by number ("issue", an
/// optional "s" or "#", then a digit), case-insensitively.
///
/// A citation wrapped over two comment lines ("… (seed" then "003: …") is
/// found too, and reported at its first line.
pub fn outside_references(src: &str) -> Vec<Citation> {
    let lines = comment_lines(src);
    let mut out = Vec::new();
    for (i, (line, text)) in lines.iter().enumerate() {
        if let Some(pattern) = citation(text) {
            out.push(Citation { line: *line, pattern, text: text.trim().to_string() });
            continue;
        }
        let Some((_, next)) = lines.get(i + 1).filter(|(l, _)| *l == line + 1) else { continue };
        if citation(next).is_some() {
            continue;
        }
        let joined = format!("{} {}", comment_body(text), comment_body(next));
        if let Some(pattern) = citation(&joined) {
            let text = format!("{} / {}", text.trim(), next.trim());
            out.push(Citation { line: *line, pattern, text });
        }
    }
    out
}

/// A comment line without its leading `//`, `///`, `//!` or `*` markers and
/// surrounding blanks, so that two wrapped lines join as prose.
fn comment_body(text: &str) -> &str {
    text.trim().trim_start_matches(['/', '!', '*']).trim()
}

fn citation(text: &str) -> Option<&'static str> {
    let lower = text.to_lowercase();
    if lower.contains("spec §") {
        return Some("SPEC §");
    }
    if lower.contains("seed 00") {
        return Some("seed 00");
    }
    let mut rest = lower.as_str();
    while let Some(i) = rest.find("issue") {
        let before = rest[..i].chars().next_back();
        let after = rest[i + "issue".len()..].trim_start_matches('s').trim_start().trim_start_matches('#');
        if !before.is_some_and(char::is_alphanumeric) && after.starts_with(|c: char| c.is_ascii_digit()) {
            return Some("issue <n>");
        }
        rest = &rest[i + "issue".len()..];
    }
    None
}

/// The text of every comment, split by line, with its 1-based line number.
/// A small lexer: strings (plain, byte, raw), character literals and
/// lifetimes are told apart so that `//` inside a string is not a comment.
fn comment_lines(src: &str) -> Vec<(usize, String)> {
    let b: Vec<char> = src.chars().collect();
    let mut out: Vec<(usize, String)> = Vec::new();
    let (mut i, mut line) = (0, 1);
    let push = |out: &mut Vec<(usize, String)>, line: usize, c: char| match out.last_mut() {
        Some((l, s)) if *l == line => s.push(c),
        _ => out.push((line, c.to_string())),
    };
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                push(&mut out, line, b[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    if depth == 0 {
                        i += 2;
                        break;
                    }
                }
                if b[i] == '\n' {
                    line += 1;
                } else {
                    push(&mut out, line, b[i]);
                }
                i += 1;
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) {
            i = skip_raw_string(&b, i + 1, &mut line);
        } else if c == '"' {
            i = skip_string(&b, i + 1, &mut line);
        } else if c == '\'' {
            i = skip_char_or_lifetime(&b, i);
        } else {
            i += 1;
        }
    }
    out
}

fn ident_before(b: &[char], i: usize) -> bool {
    let Some(&prev) = i.checked_sub(1).and_then(|p| b.get(p)) else { return false };
    if prev == 'b' {
        // `br"…"` is a raw byte string unless that `b` ends a longer identifier.
        return ident_before(b, i - 1);
    }
    prev.is_alphanumeric() || prev == '_'
}

/// From after the opening quote to after the closing one.
fn skip_string(b: &[char], mut i: usize, line: &mut usize) -> usize {
    while i < b.len() {
        match b[i] {
            '\\' => i += 1,
            '"' => return i + 1,
            '\n' => *line += 1,
            _ => {}
        }
        i += 1;
    }
    i
}

/// From the first `#` or `"` after `r` to after the closing `"#…`.
fn skip_raw_string(b: &[char], mut i: usize, line: &mut usize) -> usize {
    let mut hashes = 0;
    while i < b.len() && b[i] == '#' {
        hashes += 1;
        i += 1;
    }
    if b.get(i) != Some(&'"') {
        return i;
    }
    i += 1;
    while i < b.len() {
        if b[i] == '\n' {
            *line += 1;
        } else if b[i] == '"' && (1..=hashes).all(|k| b.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

/// `'x'`, `'\n'`, `'\u{..}'` are skipped whole; a lifetime `'a` only its quote.
fn skip_char_or_lifetime(b: &[char], i: usize) -> usize {
    if b.get(i + 1) == Some(&'\\') {
        let mut j = i + 3;
        while j < b.len() && b[j] != '\'' && b[j] != '\n' {
            j += 1;
        }
        return j + 1;
    }
    if b.get(i + 2) == Some(&'\'') {
        return i + 3;
    }
    i + 1
}

//! The console page and its login form, embedded in the binary: one HTML
//! document each, with inline CSS, SVG and a small dependency-free script
//! (no CDN, nothing fetched at build time).

/// The console (served to a request whose credentials read).
pub fn console() -> &'static str {
    include_str!("ui.html")
}

/// The login form, with an error line when a token was refused.
pub fn login(error: Option<&str>) -> String {
    let error = error.map_or_else(String::new, |e| format!("<p class=\"error\" role=\"alert\">{}</p>", escape(e)));
    include_str!("login.html").replace("<!--ERROR-->", &error)
}

/// HTML-escapes text.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_self_contained() {
        for html in [console().to_string(), login(Some("<bad>"))] {
            assert!(html.starts_with("<!doctype html>"));
            for external in ["src=\"http", "href=\"http", "@import", "url(http", "src=\"//", "href=\"//"] {
                assert!(!html.contains(external), "nothing is fetched from elsewhere ({external})");
            }
        }
        assert!(login(Some("<bad>")).contains("&lt;bad&gt;"));
        assert!(console().contains("data-province"));
    }
}

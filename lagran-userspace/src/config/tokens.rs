//! The shared tokens (`agent_token`, `admin_token`) are refused at start
//! when empty or short: an empty `agent_token` would make an empty header
//! read the API, and a short one is a guess away.

use crate::settings::InvalidSetting;

/// The fewest characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Checks one token setting (`key` names it in the error).
pub fn check_token(key: &'static str, token: Option<&str>) -> Result<(), InvalidSetting> {
    let Some(token) = token else { return Ok(()) };
    let chars = token.chars().count();
    if token.trim().is_empty() {
        return Err(InvalidSetting::new(key, "is empty: remove the key to leave it unset, or give a token"));
    }
    if chars < MIN_TOKEN_CHARS {
        return Err(InvalidSetting::new(
            key,
            format!("is {chars} characters long: a token needs at least {MIN_TOKEN_CHARS}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_short_tokens_are_refused_naming_the_key() {
        assert!(check_token("agent_token", None).is_ok());
        assert!(check_token("agent_token", Some("0123456789abcdef")).is_ok());
        let e = check_token("agent_token", Some("")).unwrap_err().to_string();
        assert!(e.contains("agent_token") && e.contains("empty"), "{e}");
        let e = check_token("admin_token", Some("   ")).unwrap_err().to_string();
        assert!(e.contains("admin_token") && e.contains("empty"), "{e}");
        let e = check_token("admin_token", Some("admin-secret")).unwrap_err().to_string();
        assert!(e.contains("admin_token") && e.contains("12") && e.contains("16"), "{e}");
    }
}

//! Value checks shared by the records: names, DNS names, prefixes, numbers.
//!
//! Each returns [`StoreError::Invalid`] naming the field, so the API can answer
//! 4xx with the field and the reason without knowing the rules itself.

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

use super::StoreError;

/// Deserializes a field that may be absent (`None`), `null` (`Some(None)`: clear
/// it) or a value (`Some(Some(v))`). Use with `#[serde(default, deserialize_with
/// = "double_option")]` on an `Option<Option<T>>` field of a patch.
pub fn double_option<'de, T, D>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(de).map(Some)
}

/// A short identifier: node, pool and line names. `[a-z0-9][a-z0-9-_.]{0,62}`.
pub fn ident(field: &'static str, value: &str) -> Result<(), StoreError> {
    let bytes = value.as_bytes();
    let Some(&first) = bytes.first() else {
        return Err(StoreError::invalid(field, "must not be empty"));
    };
    if bytes.len() > 63 {
        return Err(StoreError::invalid(field, format!("{value:?} is longer than 63 characters")));
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) {
        return Err(StoreError::invalid(field, format!("{value:?} must start with a lowercase letter or a digit")));
    }
    if let Some(bad) =
        value.chars().find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.')))
    {
        return Err(StoreError::invalid(
            field,
            format!("{value:?} contains {bad:?}; allowed are a-z, 0-9, '-', '_' and '.'"),
        ));
    }
    Ok(())
}

/// A DNS name in Lagran's canonical form: lowercase, no trailing dot, labels of
/// 1–63 characters from `a-z 0-9 - _`, at most 253 characters in all.
pub fn dns_name(field: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() {
        return Err(StoreError::invalid(field, "must not be empty"));
    }
    if value.ends_with('.') {
        return Err(StoreError::invalid(field, format!("{value:?} must be written without the trailing dot")));
    }
    if value.len() > 253 {
        return Err(StoreError::invalid(field, format!("{value:?} is longer than 253 characters")));
    }
    for label in value.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(StoreError::invalid(
                field,
                format!("{value:?} has a label that is empty or longer than 63 characters"),
            ));
        }
        if let Some(bad) =
            label.chars().find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_')))
        {
            let hint = if bad.is_ascii_uppercase() { " (names are stored lowercase)" } else { "" };
            return Err(StoreError::invalid(field, format!("{value:?} contains {bad:?}{hint}")));
        }
    }
    Ok(())
}

/// A CIDR prefix written without host bits (`1.2.3.0/24`, not `1.2.3.4/24`), so
/// that one prefix has one stored spelling.
pub fn prefix(field: &'static str, value: &IpNet) -> Result<(), StoreError> {
    let canonical = value.trunc();
    if canonical != *value {
        return Err(StoreError::invalid(field, format!("{value} has host bits set; did you mean {canonical}?")));
    }
    Ok(())
}

/// A finite number within `min..=max`.
pub fn range_f64(field: &'static str, value: f64, min: f64, max: f64) -> Result<(), StoreError> {
    if !value.is_finite() || value < min || value > max {
        return Err(StoreError::invalid(field, format!("{value} is outside {min}..={max}")));
    }
    Ok(())
}

/// A finite number that is not negative.
pub fn non_negative_f64(field: &'static str, value: f64) -> Result<(), StoreError> {
    if !value.is_finite() || value < 0.0 {
        return Err(StoreError::invalid(field, format!("{value} must be a finite number >= 0")));
    }
    Ok(())
}

/// An integer that is not negative.
pub fn non_negative_i64(field: &'static str, value: i64) -> Result<(), StoreError> {
    if value < 0 {
        return Err(StoreError::invalid(field, format!("{value} must be >= 0")));
    }
    Ok(())
}

/// An optional free-text filter: `None` matches everything, so an empty string
/// would be ambiguous and is refused.
pub fn non_empty_opt(field: &'static str, value: Option<&str>) -> Result<(), StoreError> {
    if value.is_some_and(|v| v.trim().is_empty()) {
        return Err(StoreError::invalid(field, "must be null (match everything) or a non-empty value"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers() {
        for ok in ["gz-01", "a", "0", "hk_01.b", &"a".repeat(63)] {
            assert!(ident("name", ok).is_ok(), "{ok:?} should be accepted");
        }
        for bad in ["", "-a", "_a", ".a", "GZ", "a b", "a/b", &"a".repeat(64)] {
            assert!(ident("name", bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn dns_names() {
        for ok in ["edge.lagran.net", "a", "_version.x", "xn--fiq.cn"] {
            assert!(dns_name("name", ok).is_ok(), "{ok:?} should be accepted");
        }
        for bad in ["", "a.", "A.b", "a..b", ".a", "a b.c", &"a".repeat(64)] {
            assert!(dns_name("name", bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn prefixes_without_host_bits() {
        assert!(prefix("prefix", &"1.2.3.0/24".parse().unwrap()).is_ok());
        let err = prefix("prefix", &"1.2.3.4/24".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("1.2.3.0/24"), "{err}");
        assert!(prefix("prefix", &"2001:db8::/32".parse().unwrap()).is_ok());
    }
}

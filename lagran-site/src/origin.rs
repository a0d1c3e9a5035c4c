//! The origin URL of a site: `http://` or `https://host[:port][/base]`, nothing else.

use http::Uri;
use http::uri::{Authority, Scheme};

/// Why an origin URL is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("is not a URL")]
    NotAUrl,
    #[error("only http:// and https:// origins are supported")]
    NotHttp,
    #[error("has no host")]
    NoHost,
    #[error("user info is not allowed")]
    UserInfo,
    #[error("a query is not allowed")]
    Query,
}

/// An origin URL split into the parts a proxy needs: how and where to connect
/// and the path prefix put before every request path (no trailing `/`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginUrl {
    /// `http` or `https`.
    pub scheme: Scheme,
    pub authority: Authority,
    pub base_path: String,
}

impl OriginUrl {
    pub fn parse(url: &str) -> Result<OriginUrl, OriginError> {
        let uri: Uri = url.parse().map_err(|_| OriginError::NotAUrl)?;
        let scheme = match uri.scheme() {
            Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => s.clone(),
            _ => return Err(OriginError::NotHttp),
        };
        let authority = uri.authority().cloned().ok_or(OriginError::NoHost)?;
        if authority.as_str().contains('@') {
            return Err(OriginError::UserInfo);
        }
        if uri.query().is_some() {
            return Err(OriginError::Query);
        }
        Ok(OriginUrl { scheme, authority, base_path: uri.path().trim_end_matches('/').to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_or_https_without_user_or_query() {
        let o = OriginUrl::parse("http://10.0.0.6:8000/static/").unwrap();
        assert_eq!((o.authority.as_str(), o.base_path.as_str()), ("10.0.0.6:8000", "/static"));
        assert_eq!(OriginUrl::parse("https://o").unwrap().scheme, Scheme::HTTPS);
        assert_eq!(OriginUrl::parse("ftp://o"), Err(OriginError::NotHttp));
        assert_eq!(OriginUrl::parse("http://u@o"), Err(OriginError::UserInfo));
        assert_eq!(OriginUrl::parse("http://o/?q"), Err(OriginError::Query));
        assert_eq!(OriginUrl::parse("/path"), Err(OriginError::NotHttp));
        assert_eq!(OriginUrl::parse("http://o o"), Err(OriginError::NotAUrl));
    }
}

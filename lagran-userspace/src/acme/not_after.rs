//! When a certificate expires: the `notAfter` of the leaf of a PEM chain, in
//! seconds since the Unix epoch.
//!
//! Read by hand from the DER (RFC 5280 §4.1: `Certificate` → `tbsCertificate`
//! → `validity` → `notAfter`): that one field is all the control plane reads of
//! a certificate, and the crates that parse X.509 whole (x509-parser and its
//! ASN.1 stack) would be five more dependencies for it.

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The leaf's `notAfter` (Unix seconds); `None` when the PEM holds no readable certificate.
pub fn not_after_of_pem(pem: &str) -> Option<i64> {
    let leaf = CertificateDer::pem_slice_iter(pem.as_bytes()).next()?.ok()?;
    not_after(&leaf)
}

/// One DER TLV: `(tag, contents, rest)`.
fn tlv(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

const SEQUENCE: u8 = 0x30;
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The `notAfter` of one DER certificate.
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (SEQUENCE, cert, _) = tlv(der)? else { return None };
    let (SEQUENCE, tbs, _) = tlv(cert)? else { return None };
    let mut fields = tbs;
    if fields.first() == Some(&VERSION) {
        fields = tlv(fields)?.2;
    }
    let (_serial, _, rest) = tlv(fields)?;
    let (_signature, _, rest) = tlv(rest)?;
    let (_issuer, _, rest) = tlv(rest)?;
    let (SEQUENCE, validity, _) = tlv(rest)? else { return None };
    let (_not_before, _, rest) = tlv(validity)?;
    let (tag, time, _) = tlv(rest)?;
    let text = std::str::from_utf8(time).ok()?;
    match tag {
        // RFC 5280 §4.1.2.5.1: YYMMDDHHMMSSZ, YY >= 50 is 19YY.
        UTC_TIME => {
            let yy: i64 = text.get(..2)?.parse().ok()?;
            let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
            unix_seconds(year, text.get(2..)?)
        }
        GENERALIZED_TIME => unix_seconds(text.get(..4)?.parse().ok()?, text.get(4..)?),
        _ => None,
    }
}

/// `MMDDHHMMSSZ` of `year` as Unix seconds.
fn unix_seconds(year: i64, rest: &str) -> Option<i64> {
    if rest.len() != 11 || !rest.ends_with('Z') || !rest[..10].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |i: usize| rest[i..i + 2].parse::<i64>().ok();
    let (month, day, hour, minute, second) = (n(0)?, n(2)?, n(4)?, n(6)?, n(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the "days from civil"
/// algorithm: years counted from March, so the leap day ends a year).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert_expiring(year: i32, month: u8, day: u8) -> String {
        let mut params = rcgen::CertificateParams::new(vec!["a.test".to_string()]).unwrap();
        params.not_after = rcgen::date_time_ymd(year, month, day);
        let key = rcgen::KeyPair::generate().unwrap();
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn reads_utc_and_generalized_times() {
        // 2030-06-15T00:00:00Z (a UTCTime) and 2051-01-01T00:00:00Z (a GeneralizedTime).
        assert_eq!(not_after_of_pem(&cert_expiring(2030, 6, 15)), Some(1_907_712_000));
        assert_eq!(not_after_of_pem(&cert_expiring(2051, 1, 1)), Some(2_556_144_000));
        assert_eq!(not_after_of_pem(&cert_expiring(2000, 3, 1)), Some(951_868_800), "after a leap day");
    }

    #[test]
    fn garbage_is_none() {
        assert_eq!(not_after_of_pem("no pem here"), None);
        assert_eq!(not_after(&[0x30, 0x03, 0x02, 0x01]), None, "truncated");
        assert_eq!(not_after(&[]), None);
        assert_eq!(unix_seconds(2030, "1301000000Z"), None, "month 13");
        assert_eq!(days_from_civil(1970, 1, 1), 0);
    }
}

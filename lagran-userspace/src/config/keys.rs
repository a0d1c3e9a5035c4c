//! The configuration table: every key, its environment variable and flags,
//! its default and meaning. Each subsystem lists its own rows; this module
//! adds the top-level keys and the command-line options, and renders the
//! Markdown table that README's "Configuration" section holds.

use crate::settings::{Key, KeyDefault};

/// The keys at the top of the TOML file.
pub const TOP_LEVEL_KEYS: &[Key] = &[
    Key::toml(
        "dns_listen",
        KeyDefault::Toml("\"127.0.0.1:5353\""),
        "[\"10.0.0.2:53\", \"[2001:db8::2]:53\"]",
        "DNS listeners, UDP and TCP: a string or an array (`--dns-listen` repeatable, `DNS_LISTEN` comma-separated, \
         IPv4 and IPv6); the XDP fast path answers only packets addressed to these",
    )
    .env("DNS_LISTEN")
    .flags(&["--dns-listen"]),
    Key::toml("api_listen", KeyDefault::Toml("\"127.0.0.1:8080\""), "\"0.0.0.0:8080\"", "control API listener")
        .env("API_LISTEN")
        .flags(&["--api-listen"]),
    Key::toml(
        "database_url",
        KeyDefault::Toml("\"sqlite://./lagran-data/lagran.db\""),
        "\"postgres://lagran@db/lagran\"",
        "`sqlite://…` or `postgres://…`",
    )
    .env("DATABASE_URL"),
    Key::toml(
        "agent_token",
        KeyDefault::Described("none"),
        "\"agent-secret-0123456789\"",
        "`x-lagran-agent-token` for API reads",
    )
    .env("AGENT_TOKEN"),
    Key::toml(
        "admin_token",
        KeyDefault::Described("none"),
        "\"admin-secret-0123456789\"",
        "`Authorization: Bearer …` for API writes",
    )
    .env("ADMIN_TOKEN"),
    Key::toml(
        "public_resolvers",
        KeyDefault::Toml("[]"),
        "[\"192.0.2.0/24\"]",
        "resolver prefixes (beyond the built-in list of well-known ones) a line may only cover with `force`",
    ),
    Key::toml(
        "dnssec_key_dir",
        KeyDefault::Toml("\"./lagran-data/dnssec\""),
        "\"/etc/lagran/dnssec\"",
        "key files of an earlier version (one KSK and one ZSK per signed zone), imported into the database \
         once at start",
    )
    .env("DNSSEC_KEY_DIR"),
    Key::toml(
        "dnssec_key_file",
        KeyDefault::Toml("\"./lagran-data/dnssec.key\""),
        "\"/etc/lagran/dnssec.key\"",
        "32 random bytes (raw or 64 hex digits) sealing the DNSSEC private keys in the database (AES-256-GCM); \
         made when missing and the database holds no key; every control process needs the same file",
    )
    .env("DNSSEC_KEY_FILE"),
    Key::toml(
        "dnssec_delete_wait_secs",
        KeyDefault::Toml("172800"),
        "3600",
        "a zone whose signing is turned off serves signed CDS/CDNSKEY DELETE records this long before it is \
         served unsigned",
    )
    .env("DNSSEC_DELETE_WAIT_SECS"),
    Key::toml(
        "zones",
        KeyDefault::Toml("{}"),
        "{ \"cdn.example.net\" = { ns_hosts = [{ name = \"ns1.cdn.example.net\", ipv4 = \"192.0.2.53\" }], \
         dnssec = true } }",
        "zones declared at each control start, one `[zones.\"name\"]` table each with the fields of `PUT \
         /api/v1/zones/{name}` (SOA, `ns_hosts`, `dnssec`, `dnssec_*`); the file wins over API changes to them at \
         the next start",
    ),
];

/// Options of the command line that have no TOML key.
pub const COMMAND_LINE_KEYS: &[Key] = &[
    Key::command_line(&["--config"], "none", "the TOML file; the environment wins over it").env("LAGRAN_CONFIG"),
    Key::command_line(&["--api"], "`http://<api_listen>`", "operator commands: the control API they talk to")
        .env("LAGRAN_API"),
    Key::command_line(
        &["--control"],
        "required",
        "`lagran dns`: the control processes' API URLs, tried in order (the flag repeatable, \
         the variable comma-separated)",
    )
    .env("LAGRAN_CONTROL"),
    Key::command_line(&["--name"], "host name/DNS address", "`lagran dns`: this NS host's name in its reports"),
];

/// Every group of rows, in the order of the table.
pub const KEY_GROUPS: &[&[Key]] = &[
    TOP_LEVEL_KEYS,
    crate::dns::settings::DNS_KEYS,
    crate::dns::settings::TLS_KEYS,
    crate::redirect::settings::HTTP_REDIRECT_KEYS,
    crate::dns::rrl::RRL_KEYS,
    crate::dns::cookie::COOKIE_KEYS,
    crate::dnstap::DNSTAP_KEYS,
    crate::scheduler::settings::SCHEDULE_KEYS,
    crate::steering::settings::STEERING_KEYS,
    crate::health::HEALTH_KEYS,
    crate::ns_reports::CLUSTER_KEYS,
    crate::geo::settings::GEO_KEYS,
    crate::control_tls::API_TLS_KEYS,
    crate::control_tls::CLIENT_KEYS,
    crate::acme::ACME_KEYS,
    COMMAND_LINE_KEYS,
];

/// Every row of the table.
pub fn all_keys() -> impl Iterator<Item = &'static Key> {
    KEY_GROUPS.iter().flat_map(|group| group.iter())
}

/// The Markdown table README's "Configuration" section holds.
pub fn markdown_table() -> String {
    let mut out = String::from("| TOML key | environment, flags | default | meaning |\n|---|---|---|---|\n");
    for key in all_keys() {
        let toml = key.toml.map_or_else(|| "—".to_string(), |t| format!("`{t}`"));
        let overrides: Vec<String> = key.env.iter().chain(key.flags).map(|n| format!("`{n}`")).collect();
        let overrides = if overrides.is_empty() { "—".to_string() } else { overrides.join(", ") };
        let default = match key.default {
            KeyDefault::Toml(v) => match v.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                Some(text) => format!("`{text}`"),
                None => v.to_string(),
            },
            KeyDefault::Described(text) => text.to_string(),
        };
        out.push_str(&format!("| {toml} | {overrides} | {default} | {} |\n", key.meaning));
    }
    out
}

-- DNSSEC keys in the database, so every control process (leader and
-- standbys) sees the same key set. Several keys per zone and role, each in
-- one state of its rollover (generated, published, active, retired,
-- withdrawing, removed) with the time it entered each. The private key is
-- sealed (AES-256-GCM, nonce first, hex) with the operator's key file
-- (dnssec_key_file); the public DNSKEY and the DS are kept in the clear for
-- status pages that hold no key file.
--
-- Keep in step with migrations/postgres/0014_dnssec_keys.sql.
CREATE TABLE dnssec_keys (
    id                 TEXT    NOT NULL PRIMARY KEY,
    zone               TEXT    NOT NULL,
    role               TEXT    NOT NULL,
    algorithm          BIGINT  NOT NULL,
    tag                BIGINT  NOT NULL,
    state              TEXT    NOT NULL,
    dnskey             TEXT    NOT NULL,
    ds                 TEXT    NOT NULL,
    sealed             TEXT    NOT NULL,
    created_at_ms      BIGINT  NOT NULL,
    published_at_ms    BIGINT,
    active_at_ms       BIGINT,
    retired_at_ms      BIGINT,
    withdrawing_at_ms  BIGINT,
    removed_at_ms      BIGINT
);
CREATE INDEX dnssec_keys_zone ON dnssec_keys (zone);

-- Issue 12: the edge takes its sites from the control plane (/api/v1/sites).
-- One row holds what one [[site]] of lagran-edge's TOML holds (certificates are
-- in the `certificates` table, matched by SNI name). Lists are JSON arrays of
-- strings; rate_limit_rps NULL = unlimited.
--
-- Keep in step with migrations/postgres/0004_sites.sql.
CREATE TABLE sites (
    host              TEXT   NOT NULL PRIMARY KEY,
    origin            TEXT   NOT NULL,
    cache_ttl_secs    BIGINT NOT NULL DEFAULT 60 CHECK (cache_ttl_secs >= 0),
    allow_cidrs       TEXT   NOT NULL DEFAULT '[]',
    deny_cidrs        TEXT   NOT NULL DEFAULT '[]',
    deny_paths        TEXT   NOT NULL DEFAULT '[]',
    deny_user_agents  TEXT   NOT NULL DEFAULT '[]',
    rate_limit_rps    REAL,
    rate_limit_burst  BIGINT CHECK (rate_limit_burst >= 1),
    referer_allow     TEXT   NOT NULL DEFAULT '[]',
    created_at_ms     BIGINT NOT NULL,
    updated_at_ms     BIGINT NOT NULL
);

-- Lagran control-plane schema, SQLite dialect.
--
-- Keep in step with migrations/postgres/0001_init.sql: same tables, same columns,
-- same constraints. Portable types only, so the sqlx `Any` driver reads both alike:
-- TEXT, BIGINT (integers), REAL (floats); timestamps are BIGINT unix milliseconds;
-- addresses and CIDR prefixes are TEXT in their canonical Rust `Display` form.

-- Edge nodes (model::Node) plus the hash of the node's own agent token.
CREATE TABLE nodes (
    name                TEXT    NOT NULL PRIMARY KEY,
    status              TEXT    NOT NULL DEFAULT 'online'
                                CHECK (status IN ('online', 'offline', 'disabled')),
    public_ip           TEXT,
    public_ipv6         TEXT,
    country             TEXT    NOT NULL DEFAULT '',
    province            TEXT    NOT NULL DEFAULT '',
    city                TEXT    NOT NULL DEFAULT '',
    isp                 TEXT    NOT NULL DEFAULT '',
    weight              BIGINT  NOT NULL DEFAULT 100,
    cpu_usage           REAL    NOT NULL DEFAULT 0,
    memory_usage        REAL    NOT NULL DEFAULT 0,
    bandwidth_mbps      REAL    NOT NULL DEFAULT 0,
    max_bandwidth_mbps  REAL    NOT NULL DEFAULT 0,
    conns               BIGINT  NOT NULL DEFAULT 0,
    max_conns           BIGINT  NOT NULL DEFAULT 0,
    agent_url           TEXT    NOT NULL DEFAULT '',
    probe_port          BIGINT  CHECK (probe_port BETWEEN 1 AND 65535),
    pool                TEXT    NOT NULL DEFAULT 'default',
    lat                 REAL,
    lon                 REAL,
    last_heartbeat_ms   BIGINT,
    created_at_ms       BIGINT  NOT NULL,
    updated_at_ms       BIGINT  NOT NULL,
    -- lowercase hex SHA-256 of the node's agent token; NULL = only the global token works
    auth_token_hash     TEXT
);

-- Authoritative zones with their SOA data (model::Zone).
CREATE TABLE zones (
    name         TEXT   NOT NULL PRIMARY KEY,
    soa_mname    TEXT   NOT NULL,
    soa_rname    TEXT   NOT NULL,
    soa_serial   BIGINT NOT NULL CHECK (soa_serial BETWEEN 0 AND 4294967295),
    soa_refresh  BIGINT NOT NULL CHECK (soa_refresh BETWEEN 0 AND 4294967295),
    soa_retry    BIGINT NOT NULL CHECK (soa_retry BETWEEN 0 AND 4294967295),
    soa_expire   BIGINT NOT NULL CHECK (soa_expire BETWEEN 0 AND 4294967295),
    soa_minimum  BIGINT NOT NULL CHECK (soa_minimum BETWEEN 0 AND 4294967295),
    ns_ttl       BIGINT NOT NULL CHECK (ns_ttl BETWEEN 0 AND 4294967295)
);

-- A zone's name servers with their glue (model::NsHost); `position` keeps their order.
CREATE TABLE ns_hosts (
    zone      TEXT   NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    name      TEXT   NOT NULL,
    position  BIGINT NOT NULL,
    ipv4      TEXT,
    ipv6      TEXT,
    PRIMARY KEY (zone, name)
);

-- Scheduled names (model::Domain); they go with their zone.
CREATE TABLE domains (
    name       TEXT   NOT NULL PRIMARY KEY,
    zone       TEXT   NOT NULL REFERENCES zones (name) ON DELETE CASCADE,
    pool       TEXT   NOT NULL DEFAULT 'default',
    ttl        BIGINT CHECK (ttl BETWEEN 0 AND 4294967295),
    origin_ip  TEXT
);
CREATE INDEX domains_zone ON domains (zone);

-- Manual pins and canary splits (seed 002 §5.4). NULL filters match everything.
-- A rule goes with its domain; a node with rules cannot be deleted.
CREATE TABLE rules (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    kind           TEXT    NOT NULL CHECK (kind IN ('manual', 'canary')),
    domain         TEXT    REFERENCES domains (name) ON DELETE CASCADE,
    country        TEXT,
    province       TEXT,
    city           TEXT,
    isp            TEXT,
    prefix         TEXT,
    node           TEXT    NOT NULL REFERENCES nodes (name),
    percent        BIGINT  NOT NULL DEFAULT 100 CHECK (percent BETWEEN 1 AND 100),
    priority       BIGINT  NOT NULL DEFAULT 0,
    expires_at_ms  BIGINT,
    note           TEXT    NOT NULL DEFAULT '',
    created_at_ms  BIGINT  NOT NULL
);
CREATE INDEX rules_node ON rules (node);
CREATE INDEX rules_domain ON rules (domain);

-- Lines (seed 003): named prefix lists that override the geo partition.
-- `domains` is a JSON array of domain names; empty = every domain.
CREATE TABLE lines (
    name           TEXT   NOT NULL PRIMARY KEY,
    domains        TEXT   NOT NULL DEFAULT '[]',
    answer         TEXT   NOT NULL CHECK (answer IN ('schedule', 'node', 'origin')),
    node           TEXT   REFERENCES nodes (name),
    note           TEXT   NOT NULL DEFAULT '',
    created_at_ms  BIGINT NOT NULL,
    updated_at_ms  BIGINT NOT NULL,
    CHECK ((answer = 'node') = (node IS NOT NULL))
);
CREATE INDEX lines_node ON lines (node);

CREATE TABLE line_prefixes (
    line    TEXT NOT NULL REFERENCES lines (name) ON DELETE CASCADE,
    prefix  TEXT NOT NULL,
    PRIMARY KEY (line, prefix)
);

-- Operator corrections to the geo database (seed 001): CIDR -> geo tuple.
CREATE TABLE geo_overrides (
    prefix         TEXT   NOT NULL PRIMARY KEY,
    country        TEXT   NOT NULL DEFAULT '',
    province       TEXT   NOT NULL DEFAULT '',
    city           TEXT   NOT NULL DEFAULT '',
    isp            TEXT   NOT NULL DEFAULT '',
    note           TEXT   NOT NULL DEFAULT '',
    created_by     TEXT   NOT NULL DEFAULT '',
    created_at_ms  BIGINT NOT NULL
);

-- TLS certificates served by the edge, per SNI name (`*.example.com` allowed).
CREATE TABLE certificates (
    domain         TEXT   NOT NULL PRIMARY KEY,
    cert_pem       TEXT   NOT NULL,
    key_pem        TEXT   NOT NULL,
    updated_at_ms  BIGINT NOT NULL
);

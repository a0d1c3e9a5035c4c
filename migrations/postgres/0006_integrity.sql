-- Integrity and fail-static support.
--
-- Keep in step with migrations/sqlite/0006_integrity.sql.

-- One node per hostname, compared as DNS compares names (case-insensitive,
-- without the trailing dot): CNAME answers name the node by it, so two
-- nodes holding one hostname would send clients to the wrong one. The API
-- checks the other collisions (zones, domains) in the write's transaction.
CREATE UNIQUE INDEX nodes_hostname_normal ON nodes (lower(rtrim(hostname, '.')));

-- A row the control process rewrites every few seconds, to know whether the
-- store accepts writes even when no heartbeat arrives (at most one row, id = 1).
CREATE TABLE store_write_probe (
    id             BIGINT  NOT NULL PRIMARY KEY CHECK (id = 1),
    written_at_ms  BIGINT  NOT NULL
);

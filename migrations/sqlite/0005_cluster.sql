-- Control-plane high availability (issue 12): the leader's term, the tables it
-- published (so a standby serves the route-table stream from the database),
-- and what each NS host last reported on the stream.
--
-- Only `lagran control` on PostgreSQL runs several processes; on SQLite the
-- tables exist (one schema for both engines) and only ns_host_reports is written.
--
-- Keep in step with migrations/postgres/0004_cluster.sql.

-- The leadership term: at most one row (id = 1). A process that takes the
-- PostgreSQL advisory lock increments epoch; the leader stamps confirmed_at_ms
-- (its own clock) every second while its recomputes succeed, and standbys
-- confirm their copy of the table only while that moves.
CREATE TABLE control_leader (
    id               BIGINT  NOT NULL PRIMARY KEY CHECK (id = 1),
    epoch            BIGINT  NOT NULL,
    -- The leader's control API URL, as it advertises itself.
    holder           TEXT    NOT NULL,
    since_ms         BIGINT  NOT NULL,
    confirmed_at_ms  BIGINT  NOT NULL
);

-- The recent route tables published by the leaders, in the stream's JSON form.
CREATE TABLE route_tables (
    version          BIGINT  NOT NULL PRIMARY KEY,
    epoch            BIGINT  NOT NULL,
    table_json       TEXT    NOT NULL,
    published_at_ms  BIGINT  NOT NULL
);

-- The last report of each NS host (GET /api/v1/nshosts).
CREATE TABLE ns_host_reports (
    name              TEXT    NOT NULL PRIMARY KEY,
    version           BIGINT  NOT NULL,
    epoch             BIGINT  NOT NULL,
    queries           BIGINT  NOT NULL,
    confirmed_ms_ago  BIGINT  NOT NULL,
    -- Which control process took the report (its advertised API URL).
    reported_to       TEXT    NOT NULL,
    reported_at_ms    BIGINT  NOT NULL
);

-- A rollback's freeze (SPEC §7, issue 8 item 5): the table a rollback put back,
-- held until `POST /api/v1/routes/resume`. Kept here so the freeze — and the
-- table it holds — survive a control-plane restart. At most one row (id = 1);
-- no row means "not frozen".
--
-- Keep in step with migrations/sqlite/0002_route_freeze.sql.
CREATE TABLE route_freeze (
    id            BIGINT  NOT NULL PRIMARY KEY CHECK (id = 1),
    -- The version the held table was republished under.
    version       BIGINT  NOT NULL,
    -- The held table, in the route-table stream's JSON form.
    table_json    TEXT    NOT NULL,
    frozen_at_ms  BIGINT  NOT NULL
);

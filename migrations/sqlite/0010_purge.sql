-- Cache purges asked of the edges, and each edge's confirmation.
-- - purges: one row per request; `kind` says what `targets` (a JSON list of
--   strings) holds: the paths of the site to remove ('urls'), one path
--   prefix ('prefix') or the origin's surrogate keys ('tags'). Edges read the
--   rows after the last id they applied.
-- - purge_confirmations: one row per (purge, edge) once the edge applied it,
--   with how many cached objects it removed.
--
-- Keep in step with migrations/postgres/0010_purge.sql.
CREATE TABLE purges (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    site           TEXT    NOT NULL,
    kind           TEXT    NOT NULL CHECK (kind IN ('urls', 'prefix', 'tags')),
    targets        TEXT    NOT NULL,
    created_at_ms  BIGINT  NOT NULL
);
CREATE INDEX purges_created ON purges (created_at_ms);

CREATE TABLE purge_confirmations (
    purge_id         BIGINT  NOT NULL REFERENCES purges (id) ON DELETE CASCADE,
    node             TEXT    NOT NULL REFERENCES nodes (name) ON DELETE CASCADE,
    confirmed_at_ms  BIGINT  NOT NULL,
    removed          BIGINT  NOT NULL CHECK (removed >= 0),
    PRIMARY KEY (purge_id, node)
);

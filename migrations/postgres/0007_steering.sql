-- Steering by measured latency.
-- - domains.steering: 'geo' (the location scoring decides) or 'latency' (the
--   lowest measured RTT decides where it is measured).
-- - domains.strategy: 'best', 'weighted' (a weighted split by partition hash)
--   or 'hash' (consistent hashing over the best region's nodes).
-- - measurement_cells: the leader's measurement matrix, one row per
--   (partition location, node): the cell's last reports as JSON, so the next
--   leader (and `lagran explain`) starts from the same matrix.
--
-- Keep in step with migrations/sqlite/0007_steering.sql.
ALTER TABLE domains ADD COLUMN steering TEXT NOT NULL DEFAULT 'geo' CHECK (steering IN ('geo', 'latency'));
ALTER TABLE domains ADD COLUMN strategy TEXT NOT NULL DEFAULT 'best' CHECK (strategy IN ('best', 'weighted', 'hash'));

CREATE TABLE measurement_cells (
    country        TEXT    NOT NULL,
    province       TEXT    NOT NULL,
    city           TEXT    NOT NULL,
    isp            TEXT    NOT NULL,
    node           TEXT    NOT NULL,
    cell_json      TEXT    NOT NULL,
    updated_at_ms  BIGINT  NOT NULL,
    PRIMARY KEY (country, province, city, isp, node)
);
CREATE INDEX measurement_cells_updated ON measurement_cells (updated_at_ms);

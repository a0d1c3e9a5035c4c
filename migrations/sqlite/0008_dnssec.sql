-- DNSSEC per zone: zones.dnssec holds the zone's signing policy as JSON
-- ({"algorithm": "ecdsap256sha256", "validity_secs": ..., "refresh_secs": ...,
-- "denial": "nsec"}); NULL = the zone is unsigned. The keys themselves are
-- files in the control plane's key directory, never in the database.
--
-- Keep in step with migrations/postgres/0009_dnssec.sql.
ALTER TABLE zones ADD COLUMN dnssec TEXT;

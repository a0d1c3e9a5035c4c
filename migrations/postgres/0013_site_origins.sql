-- Several origins per site, kept centrally like the rest of the site: the
-- ordered list (JSON; NULL when the site has the single origin in
-- sites.origin, which always holds the first), the Host sent to them, their
-- weights (JSON list; NULL: in order), the health checks' path and the PEM
-- CA their https:// origins are verified with.
--
-- Keep in step with migrations/sqlite/0013_site_origins.sql.
ALTER TABLE sites ADD COLUMN origins TEXT;
ALTER TABLE sites ADD COLUMN origin_host TEXT;
ALTER TABLE sites ADD COLUMN origin_weights TEXT;
ALTER TABLE sites ADD COLUMN origin_health_path TEXT NOT NULL DEFAULT '/';
ALTER TABLE sites ADD COLUMN origin_ca_pem TEXT;

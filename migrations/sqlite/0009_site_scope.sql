-- Which nodes serve a site, and how its path rules compare case.
--
-- Keep in step with migrations/postgres/0009_site_scope.sql.

-- The pools whose nodes serve the site, a JSON list; NULL: every node. A
-- node's own token reads only the sites (and certificates) of its pool.
ALTER TABLE sites ADD COLUMN pools TEXT;

-- 1: `deny_paths` match regardless of ASCII case; 0: as written (an origin
-- that tells /Admin from /admin).
ALTER TABLE sites ADD COLUMN waf_case_insensitive BIGINT NOT NULL DEFAULT 1
    CHECK (waf_case_insensitive IN (0, 1));

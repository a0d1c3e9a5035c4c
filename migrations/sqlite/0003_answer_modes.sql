-- Issue 13: CNAME scheduling and per-domain ECS (seed 004 §3, §4.5).
-- - nodes.hostname: the name a domain in CNAME mode answers for the chosen node
--   (e.g. gz-01.edge.lagran.net); NULL = the node cannot serve CNAME-mode names.
-- - domains.answer_mode: 'a' (addresses) or 'cname' (CNAME to the node's hostname).
-- - domains.ecs: 1 = the ECS address decides (default), 0 = the resolver's address
--   decides and ECS is echoed with SCOPE 0 (seed 004 §4.5: ECS only for the names
--   the operator chose).
--
-- Keep in step with migrations/postgres/0003_answer_modes.sql.
ALTER TABLE nodes ADD COLUMN hostname TEXT;
ALTER TABLE domains ADD COLUMN answer_mode TEXT NOT NULL DEFAULT 'a' CHECK (answer_mode IN ('a', 'cname'));
ALTER TABLE domains ADD COLUMN ecs BIGINT NOT NULL DEFAULT 1 CHECK (ecs IN (0, 1));

-- Renewals asked through the API (POST /api/v1/sites/{domain}/certificate/renew):
-- the leader's ACME task orders a new certificate for each domain here at its
-- next look, whatever the expiry of the one it has, and removes the row once
-- the new certificate is stored. A row rather than a message, so that a request
-- made to any control process reaches the leader, and outlives a change of leader.
--
-- Keep in step with migrations/postgres/0015_acme_renewals.sql.
CREATE TABLE acme_renewals (
    domain           TEXT   NOT NULL PRIMARY KEY,
    requested_at_ms  BIGINT NOT NULL
);

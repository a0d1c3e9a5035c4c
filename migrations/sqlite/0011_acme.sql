-- Certificates by ACME: a site may ask for its certificate to be issued and
-- renewed by the control plane (sites.acme, 0 or 1). The issued certificate and
-- its private key go to the certificates table like any other. The ACME account
-- of each directory (its key and URL, as the client serializes them) and the
-- HTTP-01 challenges the edges are answering while an order is pending live here.
--
-- Keep in step with migrations/postgres/0011_acme.sql.
ALTER TABLE sites ADD COLUMN acme BIGINT NOT NULL DEFAULT 0 CHECK (acme IN (0, 1));

CREATE TABLE acme_accounts (
    directory_url  TEXT   NOT NULL PRIMARY KEY,
    credentials    TEXT   NOT NULL,
    created_at_ms  BIGINT NOT NULL
);

CREATE TABLE acme_challenges (
    token              TEXT   NOT NULL PRIMARY KEY,
    key_authorization  TEXT   NOT NULL,
    domain             TEXT   NOT NULL,
    created_at_ms      BIGINT NOT NULL
);

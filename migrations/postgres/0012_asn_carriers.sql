-- The operator's ASN → carrier entries written through the API
-- (/api/v1/geo/asn-carriers): laid over [geo.asn_carriers] and the built-in
-- table when the geo data is next loaded. An empty carrier removes an entry
-- of the layers below (the ASN's organisation name is then the carrier).
--
-- Keep in step with migrations/sqlite/0012_asn_carriers.sql.
CREATE TABLE asn_carriers (
    asn            BIGINT NOT NULL PRIMARY KEY,
    carrier        TEXT   NOT NULL,
    note           TEXT   NOT NULL DEFAULT '',
    updated_by     TEXT   NOT NULL DEFAULT '',
    updated_at_ms  BIGINT NOT NULL
);

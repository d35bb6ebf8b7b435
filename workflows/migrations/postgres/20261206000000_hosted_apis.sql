-- APIs this API deployed on a cloud VM (`api serve --credentials`): what was asked, where the
-- deploy or removal stands (`phase`), and how to reach it. `identity` holds the sealed token and
-- TLS CA; `ca_pem` is the CA's certificate (public), which clients pin.
CREATE TABLE hosted_apis (
    id                  TEXT    PRIMARY KEY,
    name                TEXT    NOT NULL,
    credential          TEXT    NOT NULL,
    provider            TEXT    NOT NULL,
    storage_credential  TEXT    NOT NULL,
    region              TEXT    NOT NULL,
    vm_type             TEXT    NOT NULL,
    bucket              TEXT    NOT NULL,
    port                BIGINT NOT NULL,
    binary_url          TEXT    NOT NULL,
    binary_sha256       TEXT,
    phase               TEXT    NOT NULL, -- deploying, ready, failed, removing, removed
    reason              TEXT,
    url                 TEXT,
    ca_pem              TEXT,
    identity            TEXT,
    bucket_made         TEXT,    -- created (removal may delete it) or adopted (kept)
    workflow_id         TEXT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
-- A name is taken until its API is removed.
CREATE UNIQUE INDEX hosted_apis_live_name ON hosted_apis (name) WHERE phase <> 'removed';

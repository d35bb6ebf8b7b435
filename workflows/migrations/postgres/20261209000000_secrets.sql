-- Secrets: values a workload takes as environment variables (an env secret) or a registry login
-- its image is pulled with (a registry secret, whose `registry` is the host). Each `set` adds a
-- version; a deployment pins the version it was given. Only key names are stored in clear.
CREATE TABLE secrets (
    name       TEXT    PRIMARY KEY,
    registry   TEXT,             -- a registry secret: the host it logs in to; NULL for an env secret
    version    BIGINT NOT NULL, -- the current version: 1, then one more per `secret set`
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- Every version of every secret. `sealed` holds its values, sealed for this row (`id` is
-- NAME/VERSION), so that a value opens only as the version it was stored as.
CREATE TABLE secret_versions (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL REFERENCES secrets (name) ON DELETE CASCADE,
    version    BIGINT NOT NULL,
    keys       TEXT    NOT NULL, -- JSON array of the key names, safe to show
    sealed     TEXT    NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX secret_versions_name ON secret_versions (name, version);

-- The secrets a deployment (and each revision of a service) takes, with their pinned versions:
-- JSON [{name, version, registry}], never a value.
ALTER TABLE deployments ADD COLUMN secrets TEXT NOT NULL DEFAULT '[]';
ALTER TABLE deployment_revisions ADD COLUMN secrets TEXT NOT NULL DEFAULT '[]';

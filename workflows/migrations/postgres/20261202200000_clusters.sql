-- Clusters: the desired spec a user asked for, where the create or delete stands (`phase`),
-- and what the cloud gave it. `secrets` holds the sealed join token, API token and CA.
CREATE TABLE clusters (
    id                  TEXT    PRIMARY KEY,
    name                TEXT    NOT NULL,
    credential          TEXT    NOT NULL,
    provider            TEXT    NOT NULL,
    region              TEXT    NOT NULL,
    zone                TEXT,
    vm_type             TEXT    NOT NULL,
    min_vms             BIGINT NOT NULL,
    max_vms             BIGINT NOT NULL,
    phase               TEXT    NOT NULL, -- creating, ready, failed, deleting, deleted
    reason              TEXT,
    endpoint            TEXT,
    network_id          TEXT,
    secrets             TEXT,
    workflow_id         TEXT,
    delete_requested_at BIGINT,
    created_at          BIGINT NOT NULL,
    updated_at          BIGINT NOT NULL
);
-- A name is taken until its cluster is deleted.
CREATE UNIQUE INDEX clusters_live_name ON clusters (name) WHERE phase <> 'deleted';

-- Real provider VMs only (never synthetic records for workloads).
CREATE TABLE vms (
    cluster_id  TEXT    NOT NULL REFERENCES clusters (id),
    provider_id TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    role        TEXT    NOT NULL,
    state       TEXT    NOT NULL,
    private_ip  TEXT,
    public_ip   TEXT,
    updated_at  BIGINT NOT NULL,
    PRIMARY KEY (cluster_id, provider_id)
);

-- Jobs and services. A deployment on a cluster holds the cluster until it ends.
CREATE TABLE deployments (
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    kind       TEXT    NOT NULL, -- job, service
    cluster_id TEXT    REFERENCES clusters (id),
    status     TEXT    NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX deployments_cluster ON deployments (cluster_id);

-- The simulated cloud's VMs and network rules, kept like a real cloud keeps them.
CREATE TABLE sim_vms (
    id           TEXT    PRIMARY KEY,
    account      TEXT    NOT NULL,
    region       TEXT    NOT NULL,
    vm_type      TEXT    NOT NULL,
    tags         TEXT    NOT NULL, -- JSON object
    user_data    TEXT    NOT NULL,
    client_token TEXT    NOT NULL,
    private_ip   TEXT    NOT NULL,
    public_ip    TEXT    NOT NULL,
    boot_ms      BIGINT NOT NULL,
    never_ready  BOOLEAN NOT NULL,
    launched_at  BIGINT NOT NULL,
    terminated_at BIGINT,
    UNIQUE (account, client_token)
);
CREATE TABLE sim_networks (
    id         TEXT    PRIMARY KEY,
    account    TEXT    NOT NULL,
    cluster    TEXT    NOT NULL,
    created_at BIGINT NOT NULL,
    deleted_at BIGINT
);

-- Services: a deployment of kind `service` also has the port its app listens on, how many
-- replicas it runs, the revision that serves (the deployment's spec columns hold that revision's
-- spec) and the ClusterIP its Kubernetes Service was given.
ALTER TABLE deployments ADD COLUMN port INTEGER;
ALTER TABLE deployments ADD COLUMN replicas INTEGER;
ALTER TABLE deployments ADD COLUMN revision INTEGER;
ALTER TABLE deployments ADD COLUMN cluster_ip TEXT;

-- Every revision of a service: 1 when it was deployed, one more per `deployment upgrade`. Its
-- spec is whole (an upgrade's flags applied to the revision it started from), so that a rollback
-- re-applies exactly what served before.
CREATE TABLE deployment_revisions (
    deployment_id       TEXT    NOT NULL REFERENCES deployments (id),
    number              INTEGER NOT NULL,
    image               TEXT    NOT NULL,
    command             TEXT    NOT NULL, -- JSON array
    env                 TEXT    NOT NULL, -- JSON [{name, value}]
    cpus                TEXT,
    memory              TEXT,
    replicas            INTEGER NOT NULL,
    progress_deadline_s INTEGER NOT NULL,
    result              TEXT    NOT NULL, -- queued, deploying, upgrading, rolling-back, running, superseded, rolled-back, failed, terminated
    reason              TEXT,
    workflow_id         TEXT,
    created_at          INTEGER NOT NULL,
    ended_at            INTEGER,
    PRIMARY KEY (deployment_id, number)
);

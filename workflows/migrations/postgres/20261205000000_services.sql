-- Services: a deployment of kind `service` also has the port its app listens on, how many
-- replicas it runs, the revision that serves (the deployment's spec columns hold that revision's
-- spec) and the ClusterIP its Kubernetes Service was given.
ALTER TABLE deployments ADD COLUMN port BIGINT;
ALTER TABLE deployments ADD COLUMN replicas BIGINT;
ALTER TABLE deployments ADD COLUMN revision BIGINT;
ALTER TABLE deployments ADD COLUMN cluster_ip TEXT;

-- Every revision of a service: 1 when it was deployed, one more per `deployment upgrade`. Its
-- spec is whole (an upgrade's flags applied to the revision it started from), so that a rollback
-- re-applies exactly what served before.
CREATE TABLE deployment_revisions (
    deployment_id       TEXT    NOT NULL REFERENCES deployments (id),
    number              BIGINT  NOT NULL,
    image               TEXT    NOT NULL,
    command             TEXT    NOT NULL, -- JSON array
    env                 TEXT    NOT NULL, -- JSON [{name, value}]
    cpus                TEXT,
    memory              TEXT,
    replicas            BIGINT  NOT NULL,
    progress_deadline_s BIGINT  NOT NULL,
    result              TEXT    NOT NULL, -- queued, deploying, upgrading, rolling-back, running, superseded, rolled-back, failed, terminated
    reason              TEXT,
    workflow_id         TEXT,
    created_at          BIGINT  NOT NULL,
    ended_at            BIGINT ,
    PRIMARY KEY (deployment_id, number)
);

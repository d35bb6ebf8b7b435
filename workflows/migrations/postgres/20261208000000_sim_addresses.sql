-- The simulated cloud's reserved addresses (an Elastic IP, a static external address): a
-- cluster's control plane or a hosted API's VM is launched with one, and keeps it until the
-- workflows release it. `owner` is the cluster's (or hosted API's) id, `name` the VM's.
CREATE TABLE sim_addresses (
    id          TEXT    PRIMARY KEY,
    account     TEXT    NOT NULL,
    region      TEXT    NOT NULL,
    owner       TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    ip          TEXT    NOT NULL,
    created_at  BIGINT NOT NULL,
    released_at BIGINT
);

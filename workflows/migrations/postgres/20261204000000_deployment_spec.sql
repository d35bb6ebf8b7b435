-- A deployment's spec (what to run), its attempt, where its Kubernetes objects are, and how it
-- ended. The spec is kept so that `resubmit` runs the same configuration again.
ALTER TABLE deployments ADD COLUMN image TEXT NOT NULL DEFAULT '';
ALTER TABLE deployments ADD COLUMN command TEXT NOT NULL DEFAULT '[]'; -- JSON array
ALTER TABLE deployments ADD COLUMN env TEXT NOT NULL DEFAULT '[]';     -- JSON [{name, value}]
ALTER TABLE deployments ADD COLUMN cpus TEXT;
ALTER TABLE deployments ADD COLUMN memory TEXT;
ALTER TABLE deployments ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1;
ALTER TABLE deployments ADD COLUMN namespace TEXT NOT NULL DEFAULT 'anycloud';
ALTER TABLE deployments ADD COLUMN exit_code INTEGER;
ALTER TABLE deployments ADD COLUMN reason TEXT;
ALTER TABLE deployments ADD COLUMN workflow_id TEXT;
ALTER TABLE deployments ADD COLUMN started_at BIGINT;
ALTER TABLE deployments ADD COLUMN ended_at BIGINT;
ALTER TABLE deployments ADD COLUMN updated_at BIGINT NOT NULL DEFAULT 0;
-- A deployment's name is its id for people: unique for good, like a cluster's while it lives.
CREATE UNIQUE INDEX deployments_name ON deployments (name);
-- `list` pages newest first, and `list --status` filters.
CREATE INDEX deployments_created ON deployments (created_at DESC, id);
CREATE INDEX deployments_status ON deployments (status, created_at DESC);

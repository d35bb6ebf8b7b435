-- `list --kind` (`job list`, `service list`) and `list --kind --status` walk these in order and
-- stop at the page's size, whatever the mix of kinds (a few services among 100,000 jobs).
CREATE INDEX deployments_kind ON deployments (kind, created_at DESC);
CREATE INDEX deployments_kind_status ON deployments (kind, status, created_at DESC);

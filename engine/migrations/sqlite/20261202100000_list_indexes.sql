-- `workflow list --kind K --status S` reads the newest runs of one kind in one status, in order,
-- from this index. Without it, SQLite walks engine_runs_status and reads every run of status S to
-- check its kind, and PostgreSQL, taking kind and status to be independent, walks the primary key
-- backwards and reads every run when no run has the pair: a server p99 of 40-220 ms with 100,000
-- finished runs. See "API: inspect and list with 100,000 finished runs" in docs/benchmarks.md.
CREATE INDEX engine_runs_kind_status ON engine_runs (kind, status, seq);

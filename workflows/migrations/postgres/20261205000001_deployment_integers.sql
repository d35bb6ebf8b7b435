-- `attempt` and `exit_code` were created INTEGER (int4) while the code reads every integer as
-- i64, as SQLite stores them: a deployment row did not decode on PostgreSQL.
ALTER TABLE deployments ALTER COLUMN attempt TYPE BIGINT, ALTER COLUMN exit_code TYPE BIGINT;

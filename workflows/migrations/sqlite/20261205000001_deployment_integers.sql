-- PostgreSQL widens `attempt` and `exit_code` to BIGINT here; SQLite's integers are already
-- 64-bit, so there is nothing to change (the files stay in pairs).
SELECT 1;

-- A poll that waits for 15 minutes stays a few timeline entries, not 500.
--
-- Before, every check of a waiting poll added a `claimed` entry and a `waiting` entry. Now a
-- `waiting` entry that repeats the run's latest entry (a waiting of the same step) updates that
-- entry instead: `count` says how many checks it stands for, `at` is the latest check's time,
-- `message` the latest condition, and `first_at` when the run first waited there (NULL while
-- the entry stands for one check: it is `at`). A changed condition moves the entry to the next
-- position, so a follower reading `after=N` sees it; positions may then skip numbers.
ALTER TABLE engine_events ADD COLUMN count BIGINT NOT NULL DEFAULT 1;
ALTER TABLE engine_events ADD COLUMN first_at BIGINT;
-- When the attempt in hand began (NULL when none runs): `inspect` shows how long it has run
-- and when its deadline stops it.
ALTER TABLE engine_runs ADD COLUMN attempt_started_at BIGINT;

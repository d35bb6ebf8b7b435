-- Each run numbers its own timeline, and a succeeded step is its own timeline entry.
--
-- Before, every checkpoint also appended a `step-succeeded` event, numbered across all runs: a
-- heap tuple, two index entries and a sequence number per step. Now `engine_runs.events` counts
-- the run's timeline entries (it is written with the run's row, which every checkpoint writes
-- anyway, and is not indexed, so the update stays HOT), events are keyed by (run_id, n), and
-- the row of a forward step that succeeded carries its own position `n`: the timeline reads it
-- as that step's `step-succeeded` entry. A checkpoint that only advances writes the run's row
-- in place and inserts the step's row.
ALTER TABLE engine_runs ADD COLUMN events BIGINT NOT NULL DEFAULT 0; -- timeline entries so far
ALTER TABLE engine_steps ADD COLUMN n BIGINT; -- its timeline position, if a forward step that succeeded
ALTER TABLE engine_events ADD COLUMN n BIGINT; -- position in the run's timeline, from 1

UPDATE engine_events e SET n = numbered.n
FROM (SELECT seq, row_number() OVER (PARTITION BY run_id ORDER BY seq) AS n FROM engine_events) numbered
WHERE e.seq = numbered.seq;

-- A step that succeeded takes the place of its `step-succeeded` event.
UPDATE engine_steps s SET n = (
    SELECT max(e.n) FROM engine_events e
    WHERE e.run_id = s.run_id AND e.kind = 'step-succeeded' AND e.step = s.name)
WHERE s.phase = 'forward' AND s.status = 'succeeded';
DELETE FROM engine_events e
USING engine_steps s
WHERE e.kind = 'step-succeeded' AND s.run_id = e.run_id AND s.n = e.n;
UPDATE engine_runs r SET events = entries.n
FROM (SELECT run_id, max(n) AS n FROM (
        SELECT run_id, n FROM engine_events UNION ALL SELECT run_id, n FROM engine_steps) all_entries
      GROUP BY run_id) entries
WHERE r.id = entries.run_id AND entries.n IS NOT NULL;

ALTER TABLE engine_events DROP COLUMN seq; -- with its primary key, the (run_id, seq) index and the sequence
ALTER TABLE engine_events ALTER COLUMN n SET NOT NULL;
ALTER TABLE engine_events ADD PRIMARY KEY (run_id, n);

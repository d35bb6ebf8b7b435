-- Each run numbers its own timeline, and a succeeded step is its own timeline entry.
--
-- Before, every checkpoint also appended a `step-succeeded` event, numbered across all runs: two
-- more b-tree pages (the event and its (run_id, seq) index entry) written and fsynced per step.
-- Now `engine_runs.events` counts the run's timeline entries (it is written with the run's row,
-- which every checkpoint writes anyway), events are clustered by (run_id, n), and the row of a
-- forward step that succeeded carries its own position `n`: the timeline reads it as that step's
-- `step-succeeded` entry. A checkpoint that only advances writes two pages: the run's and the
-- step's.
ALTER TABLE engine_runs ADD COLUMN events INTEGER NOT NULL DEFAULT 0; -- timeline entries so far
ALTER TABLE engine_steps ADD COLUMN n INTEGER; -- its timeline position, if a forward step that succeeded

CREATE TABLE engine_events_numbered (
    run_id  TEXT    NOT NULL,
    n       INTEGER NOT NULL, -- position in the run's timeline, from 1
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    step    TEXT,
    message TEXT    NOT NULL,
    PRIMARY KEY (run_id, n)
) WITHOUT ROWID;

INSERT INTO engine_events_numbered (run_id, n, at, kind, step, message)
SELECT run_id, row_number() OVER (PARTITION BY run_id ORDER BY seq), at, kind, step, message FROM engine_events;
DROP TABLE engine_events;
ALTER TABLE engine_events_numbered RENAME TO engine_events;

-- A step that succeeded takes the place of its `step-succeeded` event.
UPDATE engine_steps SET n = (
    SELECT max(e.n) FROM engine_events e
    WHERE e.run_id = engine_steps.run_id AND e.kind = 'step-succeeded' AND e.step = engine_steps.name)
WHERE phase = 'forward' AND status = 'succeeded';
DELETE FROM engine_events
WHERE kind = 'step-succeeded'
  AND EXISTS (SELECT 1 FROM engine_steps s WHERE s.run_id = engine_events.run_id AND s.n = engine_events.n);
UPDATE engine_runs SET events = coalesce((
    SELECT max(n) FROM (
        SELECT n FROM engine_events WHERE run_id = engine_runs.id
        UNION ALL SELECT n FROM engine_steps WHERE run_id = engine_runs.id)), 0);

-- The engine's tables. Times are milliseconds since the Unix epoch; JSON is stored as text.
CREATE TABLE engine_runs (
    seq              INTEGER PRIMARY KEY, -- submission order (rows are never deleted, so rowids only grow)
    id               TEXT    NOT NULL UNIQUE,
    kind             TEXT    NOT NULL,
    version          INTEGER NOT NULL,
    resource_key     TEXT,
    input            TEXT    NOT NULL,
    output           TEXT,
    status           TEXT    NOT NULL,
    phase            TEXT    NOT NULL,
    step_index       INTEGER NOT NULL, -- forward: steps completed; undo: steps still to undo
    current_step     TEXT,
    attempt          INTEGER NOT NULL, -- attempts of the current step that ended without success
    step_started_at  INTEGER,
    next_at          INTEGER NOT NULL, -- runnable from; parked runs hold the largest value
    status_reason    TEXT,
    error            TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_expires_at INTEGER,
    lease_generation INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    finished_at      INTEGER
);
CREATE INDEX engine_runs_due ON engine_runs (next_at) WHERE finished_at IS NULL;
CREATE INDEX engine_runs_key ON engine_runs (resource_key, seq) WHERE finished_at IS NULL;
CREATE INDEX engine_runs_kind ON engine_runs (kind, seq);
CREATE INDEX engine_runs_status ON engine_runs (status, seq);
CREATE INDEX engine_runs_resource ON engine_runs (resource_key, status, seq);

CREATE TABLE engine_steps (
    run_id      TEXT    NOT NULL,
    phase       TEXT    NOT NULL,
    idx         INTEGER NOT NULL,
    name        TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempts    INTEGER NOT NULL,
    output      TEXT,
    error       TEXT,
    started_at  INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    PRIMARY KEY (run_id, phase, idx)
) WITHOUT ROWID;

CREATE TABLE engine_events (
    seq     INTEGER PRIMARY KEY,
    run_id  TEXT    NOT NULL,
    at      INTEGER NOT NULL,
    kind    TEXT    NOT NULL,
    step    TEXT,
    message TEXT    NOT NULL
);
CREATE INDEX engine_events_run ON engine_events (run_id, seq);

CREATE TABLE engine_signals (
    seq        INTEGER PRIMARY KEY,
    run_id     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX engine_signals_run ON engine_signals (run_id, name, seq);

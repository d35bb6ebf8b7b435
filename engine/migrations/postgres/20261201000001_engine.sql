-- The engine's tables. Times are milliseconds since the Unix epoch; JSON is stored as text.
CREATE TABLE engine_runs (
    seq              BIGSERIAL PRIMARY KEY, -- submission order
    id               TEXT    NOT NULL UNIQUE,
    kind             TEXT    NOT NULL,
    version          BIGINT  NOT NULL,
    resource_key     TEXT,
    input            TEXT    NOT NULL,
    output           TEXT,
    status           TEXT    NOT NULL,
    phase            TEXT    NOT NULL,
    step_index       BIGINT  NOT NULL, -- forward: steps completed; undo: steps still to undo
    current_step     TEXT,
    attempt          BIGINT  NOT NULL, -- attempts of the current step that ended without success
    step_started_at  BIGINT ,
    next_at          BIGINT  NOT NULL, -- runnable from; parked runs hold the largest value
    status_reason    TEXT,
    error            TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    lease_owner      TEXT,
    lease_expires_at BIGINT ,
    lease_generation BIGINT  NOT NULL DEFAULT 0,
    created_at       BIGINT  NOT NULL,
    updated_at       BIGINT  NOT NULL,
    finished_at      BIGINT 
);
-- Room on each page for HOT updates: a step's checkpoint changes no indexed column.
ALTER TABLE engine_runs SET (fillfactor = 70);
CREATE INDEX engine_runs_due ON engine_runs (next_at) WHERE finished_at IS NULL;
CREATE INDEX engine_runs_key ON engine_runs (resource_key, seq) WHERE finished_at IS NULL;
CREATE INDEX engine_runs_kind ON engine_runs (kind, seq);
CREATE INDEX engine_runs_status ON engine_runs (status, seq);
CREATE INDEX engine_runs_resource ON engine_runs (resource_key, status, seq);

CREATE TABLE engine_steps (
    run_id      TEXT    NOT NULL,
    phase       TEXT    NOT NULL,
    idx         BIGINT  NOT NULL,
    name        TEXT    NOT NULL,
    status      TEXT    NOT NULL,
    attempts    BIGINT  NOT NULL,
    output      TEXT,
    error       TEXT,
    started_at  BIGINT  NOT NULL,
    finished_at BIGINT  NOT NULL,
    PRIMARY KEY (run_id, phase, idx)
);

CREATE TABLE engine_events (
    seq     BIGSERIAL PRIMARY KEY,
    run_id  TEXT    NOT NULL,
    at      BIGINT  NOT NULL,
    kind    TEXT    NOT NULL,
    step    TEXT,
    message TEXT    NOT NULL
);
CREATE INDEX engine_events_run ON engine_events (run_id, seq);

CREATE TABLE engine_signals (
    seq        BIGSERIAL PRIMARY KEY,
    run_id     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    created_at BIGINT  NOT NULL
);
CREATE INDEX engine_signals_run ON engine_signals (run_id, name, seq);

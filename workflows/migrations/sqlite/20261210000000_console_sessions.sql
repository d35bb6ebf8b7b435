-- The web console's sign-in codes and sessions (cli/src/server/console/). Only SHA-256 hashes
-- are kept, so that a copy of the database (a bucket's snapshot, a backup) signs no one in.
-- A code is traded once, within its minute, for a session; a session lasts 12 hours.
CREATE TABLE console_codes (
    code_hash TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);

CREATE TABLE console_sessions (
    session_hash TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);

-- Credentials: what a provider needs to act on a user's account. `secret` holds the sealed
-- (encrypted) secret material; `public` the parts that are safe to show.
CREATE TABLE credentials (
    name           TEXT    PRIMARY KEY,
    provider       TEXT    NOT NULL,
    public         TEXT    NOT NULL,
    secret         TEXT    NOT NULL,
    status         TEXT    NOT NULL, -- verifying, valid, invalid
    status_message TEXT,
    verify_run     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- The simulated cloud's own record of the calls made to it, so that its injected faults
-- ("fail the first N calls") survive a restart of the API like a real cloud's state would.
CREATE TABLE sim_api_calls (
    account TEXT    PRIMARY KEY,
    calls   INTEGER NOT NULL
);

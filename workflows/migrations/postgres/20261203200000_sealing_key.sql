-- Which key seals this database's secrets: one row holding a known text sealed with it. An API
-- whose key cannot open it refuses to start (it could open none of the credentials, and would
-- fail every run that needs one), instead of unwinding clusters it cannot reach.
CREATE TABLE sealing_key (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    sealed TEXT    NOT NULL
);

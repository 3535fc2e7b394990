-- Operations settings a DBA sets once (one row): the rollback window, how long the version a cutover replaced stays
-- the rollback target that retire keeps unless forced.
SET LOCAL ROLE toolkit_owner;

CREATE TABLE toolkit.settings (
    singleton boolean PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    rollback_window interval NOT NULL DEFAULT '7 days' CHECK (rollback_window >= interval '0'),
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    changed_by text NOT NULL DEFAULT session_user
);
COMMENT ON TABLE toolkit.settings IS 'Operations settings (one row): the rollback window retire enforces.';
INSERT INTO toolkit.settings DEFAULT VALUES;

-- Roles, the pgvector extension and the toolkit schema. Runs once, as the migrating user.
-- Roles are cluster-wide: they are created only if missing, so several databases can share them.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'toolkit_owner') THEN
        CREATE ROLE toolkit_owner NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'toolkit_writer') THEN
        CREATE ROLE toolkit_writer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'toolkit_reader') THEN
        CREATE ROLE toolkit_reader NOLOGIN;
    END IF;
END
$$;

-- The migrating user acts as the owner role for everything that follows.
GRANT toolkit_owner TO current_user;

CREATE EXTENSION IF NOT EXISTS vector;

CREATE SCHEMA toolkit AUTHORIZATION toolkit_owner;

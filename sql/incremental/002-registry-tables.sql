-- Registry tables: models, documents, versions, evaluations, cutovers and the version state machine.
SET LOCAL ROLE toolkit_owner;

CREATE TABLE toolkit.models (
    alias text PRIMARY KEY CHECK (alias ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$'),
    provider text NOT NULL CHECK (provider ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
    model_name text NOT NULL CHECK (model_name <> ''),
    revision text NOT NULL DEFAULT '',
    dimensions integer NOT NULL CHECK (dimensions BETWEEN 1 AND 16000),
    distance text NOT NULL DEFAULT 'cosine' CHECK (distance IN ('cosine', 'l2', 'inner_product')),
    max_input_tokens integer NOT NULL CHECK (max_input_tokens > 0),
    query_prefix text NOT NULL DEFAULT '',
    document_prefix text NOT NULL DEFAULT '',
    supports_shortening boolean NOT NULL DEFAULT FALSE,
    price_per_million_tokens numeric(12, 6) NOT NULL DEFAULT 0 CHECK (price_per_million_tokens >= 0),
    base_url text,
    options jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE toolkit.models IS 'Embedding models by alias. API keys are never stored here.';

CREATE TABLE toolkit.documents (
    tenant text NOT NULL CHECK (tenant <> ''),
    doc_id text NOT NULL CHECK (doc_id <> ''),
    source text NOT NULL,
    title text NOT NULL DEFAULT '',
    format text NOT NULL DEFAULT 'text',
    raw_text text NOT NULL,
    content_hash text NOT NULL,
    access_labels text[] NOT NULL DEFAULT '{}',
    metadata jsonb NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, doc_id)
);
COMMENT ON TABLE toolkit.documents IS
'Source documents with their raw (cleaned) text, so re-chunking never re-parses sources.';
ALTER TABLE toolkit.documents ENABLE ROW LEVEL SECURITY;
ALTER TABLE toolkit.documents FORCE ROW LEVEL SECURITY;

CREATE TABLE toolkit.version_transitions (
    from_state text NOT NULL,
    to_state text NOT NULL,
    PRIMARY KEY (from_state, to_state)
);
COMMENT ON TABLE toolkit.version_transitions IS 'The legal moves of the version state machine.';

INSERT INTO toolkit.version_transitions (from_state, to_state) VALUES
('building', 'ready'),
('building', 'retired'),
('ready', 'building'),
('ready', 'verified'),
('ready', 'active'),
('ready', 'retired'),
('verified', 'ready'),
('verified', 'active'),
('verified', 'retired'),
('active', 'standby'),
('active', 'ready'),
('standby', 'active'),
('standby', 'retired');

CREATE TABLE toolkit.versions (
    version integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    model_alias text NOT NULL REFERENCES toolkit.models (alias),
    chunker_spec text NOT NULL CHECK (chunker_spec <> ''),
    chunker_version text NOT NULL CHECK (chunker_version <> ''),
    storage text NOT NULL DEFAULT 'vector' CHECK (storage IN ('vector', 'halfvec')),
    dimensions integer NOT NULL CHECK (dimensions BETWEEN 1 AND 16000),
    distance text NOT NULL CHECK (distance IN ('cosine', 'l2', 'inner_product')),
    hnsw_m integer NOT NULL DEFAULT 16 CHECK (hnsw_m BETWEEN 2 AND 100),
    hnsw_ef_construction integer NOT NULL DEFAULT 64 CHECK (hnsw_ef_construction BETWEEN 4 AND 1000),
    text_search_config regconfig NOT NULL DEFAULT 'english',
    state text NOT NULL DEFAULT 'building'
    CHECK (state IN ('building', 'ready', 'verified', 'active', 'standby', 'retired')),
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    state_changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    content_changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (hnsw_ef_construction >= 2 * hnsw_m)
);
COMMENT ON TABLE toolkit.versions IS
'One row per chunks_vN table: the embedding model and chunker that produced it, and its state.';

-- At most one live version per model, chunker and storage: backfill finds it again by these.
CREATE UNIQUE INDEX versions_live_key ON toolkit.versions (model_alias, chunker_version, storage, dimensions)
WHERE state <> 'retired';
-- At most one active version.
CREATE UNIQUE INDEX versions_one_active ON toolkit.versions ((TRUE)) WHERE state = 'active';

CREATE TABLE toolkit.evaluations (
    evaluation_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    version integer NOT NULL REFERENCES toolkit.versions (version),
    baseline_version integer REFERENCES toolkit.versions (version),
    query_set_hash text NOT NULL,
    query_count integer NOT NULL CHECK (query_count >= 0),
    k integer NOT NULL CHECK (k > 0),
    metrics jsonb NOT NULL,
    gate jsonb NOT NULL DEFAULT '{}',
    passed boolean NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE toolkit.evaluations IS 'Results of verifying a version against a labelled query set.';

CREATE TABLE toolkit.cutovers (
    cutover_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action text NOT NULL CHECK (action IN ('activate', 'rollback', 'retire')),
    from_version integer,
    to_version integer,
    forced boolean NOT NULL DEFAULT FALSE,
    evaluation_id bigint REFERENCES toolkit.evaluations (evaluation_id),
    actor text NOT NULL DEFAULT session_user,
    reason text,
    happened_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
COMMENT ON TABLE toolkit.cutovers IS 'Audit log of every activation, rollback and retirement.';

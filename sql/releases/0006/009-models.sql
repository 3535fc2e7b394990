-- The model registry's rules: it never holds a secret (API keys come from the environment, named by an option
-- such as api_key_env), an alias is never re-pointed at another model, and models are registered through
-- toolkit.register_model (no role below the owner writes the table).
SET LOCAL ROLE toolkit_owner;

-- The secrets a model's options and base URL would store: option names, at any depth, that say key, secret, token,
-- password, credential or auth (except *_env, the name of an environment variable, and the documented limits
-- max_*_tokens), and user:password@ in the URL or a key in its query string. Empty when there are none. Options
-- that are not a JSON object are refused by the trigger (they are not options).
CREATE OR REPLACE FUNCTION toolkit.model_secrets(options jsonb, base_url text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    WITH RECURSIVE walk (path, value) AS (
        SELECT NULL::text, options
        UNION ALL
        SELECT CASE WHEN c.key IS NULL THEN w.path ELSE coalesce(w.path || '.', '') || c.key END, c.value
        FROM walk AS w
        CROSS JOIN LATERAL (
            SELECT e.key, e.value
            FROM jsonb_each(CASE jsonb_typeof(w.value) WHEN 'object' THEN w.value ELSE '{}'::jsonb END) AS e
            UNION ALL
            SELECT NULL::text, a.value
            FROM jsonb_array_elements(CASE jsonb_typeof(w.value) WHEN 'array' THEN w.value ELSE '[]'::jsonb END) AS a
        ) AS c (key, value)
    )
    SELECT ARRAY(
        SELECT DISTINCT format('option %s', w.path)
        FROM walk AS w
        WHERE w.path IS NOT NULL
            AND regexp_replace(w.path, '^.*\.', '') ~* '(api[_-]?key|secret|token|passw(or)?d|credential|auth)'
            AND regexp_replace(w.path, '^.*\.', '') !~* '(_env$|^max_[a-z_]*tokens$)'
        ORDER BY 1
    )
    || CASE WHEN base_url ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@' THEN ARRAY['credentials in the base URL']
        ELSE '{}'::text[] END
    || CASE WHEN base_url ~* '[?&][^=&]*(key|secret|token|passw(or)?d|auth|sig)[^=&]*='
        THEN ARRAY['a key in the base URL''s query string'] ELSE '{}'::text[] END
$$;

-- The options and URL by which a model decides where requests go and which key they carry: a base URL (as a column
-- or an option), and any option naming an environment variable (*_env, such as api_key_env). Only the owner may
-- register them (register_model): the writer and the deployer cannot point a model at a server and a key.
CREATE OR REPLACE FUNCTION toolkit.model_destination(options jsonb, base_url text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(
        SELECT format('option %s', o.key)
        FROM jsonb_object_keys(CASE jsonb_typeof(options) WHEN 'object' THEN options ELSE '{}'::jsonb END) AS o (key)
        WHERE o.key ~* '(_env$|url|host|endpoint|header|organization|project)'
        ORDER BY 1
    ) || CASE WHEN base_url IS NOT NULL THEN ARRAY['base_url'] ELSE '{}'::text[] END
$$;

-- What of model_destination the session's login may not register: all of it below the owner, none for the owner.
CREATE OR REPLACE FUNCTION toolkit.model_destination_refused(options jsonb, base_url text)
RETURNS text[]
LANGUAGE sql
STABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT CASE WHEN pg_has_role(session_user, 'toolkit_owner', 'MEMBER') THEN '{}'::text[]
        ELSE toolkit.model_destination(options, base_url) END
$$;

-- Trigger: refuses a model row that would store a secret, and a change of what identifies a model's vectors
-- (provider, name, revision, dimensions, distance, prefixes, input limit, shortening): an alias is never re-pointed.
CREATE OR REPLACE FUNCTION toolkit._check_model_row()
RETURNS trigger
LANGUAGE plpgsql
VOLATILE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    secrets text[] := toolkit.model_secrets(new.options, new.base_url);
BEGIN
    IF jsonb_typeof(new.options) IS DISTINCT FROM 'object' THEN
        RAISE EXCEPTION 'model %''s options must be a JSON object of name: value, not a JSON %', new.alias,
            coalesce(jsonb_typeof(new.options), 'NULL')
            USING ERRCODE = 'check_violation', HINT = 'For example {"batch_size": 64}: --option batch_size=64.';
    END IF;
    IF cardinality(secrets) > 0 THEN
        RAISE EXCEPTION 'model % would store a secret (%)', new.alias, array_to_string(secrets, ', ')
            USING ERRCODE = 'check_violation',
                  HINT = 'Keys never go into the database: put the key in an environment variable and name it with '
                      '--option api_key_env=VARIABLE (default OPENAI_API_KEY).';
    END IF;
    IF tg_op = 'UPDATE' AND (new.provider, new.model_name, new.revision, new.dimensions, new.distance,
        new.query_prefix, new.document_prefix, new.max_input_tokens, new.supports_shortening, new.alias)
        IS DISTINCT FROM (old.provider, old.model_name, old.revision, old.dimensions, old.distance,
            old.query_prefix, old.document_prefix, old.max_input_tokens, old.supports_shortening, old.alias) THEN
        RAISE EXCEPTION 'model % cannot be re-pointed: its versions'' vectors were made with it', old.alias
            USING ERRCODE = 'check_violation',
                  HINT = 'Register the other model under a new alias (toolkit model add) and backfill a version for it.';
    END IF;
    RETURN new;
END
$$;

DROP TRIGGER IF EXISTS check_model_row ON toolkit.models;
CREATE TRIGGER check_model_row BEFORE INSERT OR UPDATE ON toolkit.models
FOR EACH ROW EXECUTE FUNCTION toolkit._check_model_row();

-- Registers a model under a new alias (an existing alias is refused: it is never re-pointed); returns the alias.
-- A model that chooses its server or key (model_destination) only by the owner.
-- Definer: the writer and the deployer may not write toolkit.models directly.
CREATE OR REPLACE FUNCTION toolkit.register_model(
    alias text,
    provider text,
    model_name text,
    dimensions integer,
    max_input_tokens integer,
    revision text DEFAULT '',
    distance text DEFAULT 'cosine',
    query_prefix text DEFAULT '',
    document_prefix text DEFAULT '',
    supports_shortening boolean DEFAULT FALSE,
    price_per_million_tokens numeric DEFAULT 0,
    base_url text DEFAULT NULL,
    options jsonb DEFAULT '{}'
)
RETURNS text
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    destination text[] := toolkit.model_destination_refused(options, base_url);
BEGIN
    -- Where requests go and which key they carry is the owner's decision: a writer's model pointed at its own
    -- server with the deployer's key variable would have the deployer's verify send it the key.
    IF cardinality(destination) > 0 THEN
        RAISE EXCEPTION 'only the owner may register a model that chooses its server or key (%)',
            array_to_string(destination, ', ')
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Ask the DBA (toolkit_owner) to register it; without a base URL or key option a model uses '
                      'the provider''s default server and each process''s own key (OPENAI_API_KEY).';
    END IF;
    IF EXISTS (SELECT FROM toolkit.models AS m WHERE m.alias = register_model.alias) THEN
        RAISE EXCEPTION 'a model is already registered as %', quote_literal(alias)
            USING ERRCODE = 'unique_violation',
                  HINT = 'Choose another alias: a version''s vectors belong to its model, so an alias is never re-pointed.';
    END IF;
    INSERT INTO toolkit.models AS m (
        alias, provider, model_name, dimensions, max_input_tokens, revision, distance, query_prefix,
        document_prefix, supports_shortening, price_per_million_tokens, base_url, options
    )
    VALUES (
        alias, provider, model_name, dimensions, max_input_tokens, coalesce(revision, ''), coalesce(distance, 'cosine'),
        coalesce(query_prefix, ''), coalesce(document_prefix, ''), coalesce(supports_shortening, false),
        coalesce(price_per_million_tokens, 0), base_url, coalesce(options, '{}')
    );
    RETURN alias;
END
$$;

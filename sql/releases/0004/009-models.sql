-- The model registry's rules: it never holds a secret (API keys come from the environment, named by an option
-- such as api_key_env), an alias is never re-pointed at another model, and models are registered through
-- toolkit.register_model (no role below the owner writes the table).
SET LOCAL ROLE toolkit_owner;

-- The secrets a model's options and base URL would store: option names that say key, secret, token, password,
-- credential or auth (except *_env, the name of an environment variable), and user:password@ in the URL or a key
-- in its query string. Empty when there are none.
CREATE OR REPLACE FUNCTION toolkit.model_secrets(options jsonb, base_url text)
RETURNS text[]
LANGUAGE sql
IMMUTABLE PARALLEL SAFE
SECURITY INVOKER
SET search_path = pg_catalog, pg_temp
AS $$
    SELECT ARRAY(
        SELECT format('option %s', o.key)
        FROM jsonb_object_keys(CASE jsonb_typeof(options) WHEN 'object' THEN options ELSE '{}'::jsonb END) AS o (key)
        WHERE o.key ~* '(api[_-]?key|secret|token|passw(or)?d|credential|auth)' AND o.key !~* '_env$'
        ORDER BY o.key
    )
    || CASE WHEN base_url ~ '^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*@' THEN ARRAY['credentials in the base URL']
        ELSE '{}'::text[] END
    || CASE WHEN base_url ~* '[?&][^=&]*(key|secret|token|passw(or)?d|auth|sig)[^=&]*='
        THEN ARRAY['a key in the base URL''s query string'] ELSE '{}'::text[] END
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
BEGIN
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

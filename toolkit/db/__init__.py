"""The database: the embedded server, connections and their errors, the SQL files, migrations and
the schema check."""

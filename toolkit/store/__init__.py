"""Python's view of what SQL owns: the model registry, versions, the chunk tables and documents,
tenant bindings and the query log's settings."""

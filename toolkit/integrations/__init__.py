"""Where applications already live: retrievers for LangChain (``toolkit.integrations.langchain``, extra
``toolkit[langchain]``) and LlamaIndex (``toolkit.integrations.llamaindex``, extra ``toolkit[llamaindex]``), and the
HTTP server (``toolkit.serve``, extra ``toolkit[serve]``). Each calls ``toolkit.search.search`` with its defaults (the
serving version, pinned, as the reader role with the tenant and principals set): read-only, writing stays with
ingest."""

"""Evaluating retrieval: the offline evaluation of chunker configurations, a stored version's, their
metrics, labelled queries, ranking as SQL serves it, the frontier, the embedding cache and the CI gate."""

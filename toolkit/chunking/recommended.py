"""The chunker configuration the toolkit recommends for an embedding model's input limit, and the retrieval it is
measured with: the frontier of the sweep in docs/evaluation.md (bench/quality.py), not a convention.

`toolkit backfill` and `toolkit eval` use it when no chunker spec is given; a CI check can ask for it too.
"""

from __future__ import annotations

# Measured: 128 cl100k tokens with half of them overlapping, passages assembled, was the best span recall on both
# labelled sets with MiniLM (256 word pieces) and within noise of the best with e5 (512), where 200/100 was not
# better and cost half the IoU; larger limits buy nothing here (the report finds the same past 200-400 tokens).
# A chunk and its heading path or title stay within 256 word pieces, counted with the model's own tokenizer.
MEASURED_SPEC = "recursive:128:64"
MEASURED_LIMIT = 256
# Hybrid full text (BM25) and vector ranks fused by RRF, hits assembled into at most k passages within
# k x size tokens: the mode every recommended figure was measured with.
RECOMMENDED_RETRIEVAL = "hybrid"


def recommended_spec(max_input_tokens: int | None = None) -> str:
    """The chunker spec recommended for a model that takes at most ``max_input_tokens`` tokens (None: no limit
    known, e.g. the hashing model). Below 256 the same shape is scaled to the limit (half of it, half
    overlapping): derived from the measured point, not measured itself."""
    if max_input_tokens is None or max_input_tokens >= MEASURED_LIMIT:
        return MEASURED_SPEC
    size = max(8, int(max_input_tokens) // 2)
    return f"recursive:{size}:{size // 2}"

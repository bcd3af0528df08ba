"""The key namespace of a vLLM tier: the model and a digest of everything that shapes a row, so that
engines of one model and layout share chunks through the daemon and different layouts never mix."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def default_namespace(spec: Any, row_bytes: int) -> str:
    """The model and a digest of everything that shapes a row, from vLLM's OffloadingConfig."""
    config = getattr(spec, "config", None)
    model = getattr(getattr(config, "model", None), "name", None) or "model"
    parallel = getattr(config, "parallel", None)
    agnostic = bool(getattr(parallel, "is_parallelism_agnostic", False))
    shape = {
        "row_bytes": row_bytes,
        "dtype": str(getattr(getattr(config, "model", None), "dtype", "")),
        "tokens_per_hash": getattr(getattr(config, "cache", None), "tokens_per_hash", None),
        "blocks_per_chunk": getattr(getattr(config, "cache", None), "blocks_per_chunk", None),
        "groups": [repr(g) for g in getattr(config, "groups", ())],
        "layout": [str(getattr(config, n, "")) for n in ("kv_cache_layout", "replicated_layout", "canonical_layout")],
        "parallel": None if agnostic else [getattr(parallel, n, None) for n in (
            "world_size", "tp_size", "pp_size", "pcp_size", "dcp_size")],
    }
    digest = hashlib.sha256(json.dumps(shape, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"vllm/{model.replace('/', '_')}/{digest}"

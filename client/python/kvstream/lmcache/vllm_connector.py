"""KVStreamConnectorV1: LMCache's vLLM v1 connector with step batching of storage reads (M1).

Load it with vLLM's dynamic connector loading:

    --kv-transfer-config '{"kv_connector": "KVStreamConnectorV1",
                           "kv_connector_module_path": "kvstream.lmcache.vllm_connector",
                           "kv_role": "kv_both"}'

and LMCache configured with the kvstream storage plugin (README). It is LMCache's own
LMCacheConnectorV1Dynamic with exactly one change, in the worker's `start_load_kv`: before LMCache
loads the step's requests one after another, the chunks of ALL of them that KVStreamBackend will
serve are submitted to kvstreamd as one retrieve (step_batch.prefetch_step), so the per-request
retrieves find them in flight or landed. After the step's loads, chunks no request took are
released. Layerwise and async loading keep LMCache's own path (no prefetch). And before LMCache
builds its engine, each worker process names its CPU pool in shared memory for itself
(`<shm_name or kvstream_lmcache>_<host>_<pid>`, pool_name.py), so chunks land in place at any TP size.
It also hands vLLM's model config (hf_config) to kvstream.recompute, where the plugin's
load-or-recompute verdict finds the model's shape.
"""

from __future__ import annotations

from typing import Any

from ..engine_versions import check as _check_engine

_check_engine("vllm")

from lmcache.integration.vllm.lmcache_connector_v1 import LMCacheConnectorV1Dynamic  # noqa: E402
from lmcache.logging import init_logger  # noqa: E402

from lmcache.integration.vllm.utils import lmcache_get_or_create_config  # noqa: E402

from .. import recompute  # noqa: E402
from .pool_name import own_pool_name  # noqa: E402
from .step_batch import StepLoad, prefetch_step, release_step  # noqa: E402

logger = init_logger(__name__)


def step_loads(connector_metadata: Any) -> list[StepLoad]:
    """The loads of a step, from LMCache's connector metadata (requests with a load_spec that can load)."""
    loads = []
    for request in getattr(connector_metadata, "requests", []):
        spec = request.load_spec
        if spec is None or not spec.can_load:
            continue
        loads.append(StepLoad(request.token_ids[: spec.lmcache_cached_tokens], spec.vllm_cached_tokens,
                              request.request_configs))
    return loads


class KVStreamConnectorV1(LMCacheConnectorV1Dynamic):
    """LMCacheConnectorV1Dynamic whose step loads go to kvstreamd as one batch, and whose worker
    gets an LMCache CPU pool in shared memory of its own (pool_name), for zero copy at any TP."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        own_pool_name(lmcache_get_or_create_config())  # before LMCache builds its engine and pool
        model_config = getattr(kwargs.get("vllm_config", args[0] if args else None), "model_config", None)
        if model_config is not None:  # the model's shape, for the plugin's verdict
            recompute.register(getattr(model_config, "model", ""), getattr(model_config, "hf_config", None))
        super().__init__(*args, **kwargs)

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        impl = self._lmcache_engine
        engine = getattr(impl, "lmcache_engine", None)
        batched = (
            engine is not None
            and getattr(forward_context, "attn_metadata", None) is not None
            and not getattr(impl, "use_layerwise", False)
            and not getattr(impl, "async_loading", False)
        )
        if batched:
            try:
                submitted = prefetch_step(engine, step_loads(self._get_connector_metadata()))
                logger.debug("kvstream: step prefetch of %d chunks", submitted)
            except Exception as e:  # noqa: BLE001 - batching is an optimisation: LMCache's path still works
                logger.warning("kvstream: step prefetch failed (%s); loading request by request", e)
                batched = False
        try:
            super().start_load_kv(forward_context, **kwargs)
        finally:
            if batched:
                release_step(engine)

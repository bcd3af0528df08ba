"""kvstream.lmcache: LMCache integration (needs lmcache and torch, which the base package does not).

- KVStreamBackend: the LMCache storage plugin (module_path kvstream.lmcache, class_name KVStreamBackend).
- kvstream.lmcache.vllm_connector.KVStreamConnectorV1: LMCache's vLLM v1 connector with step batching.
"""

from ..engine_versions import check as _check_engine

_check_engine("lmcache")

from .backend import KVStreamBackend  # noqa: E402
from .settings import Settings, extra_config  # noqa: E402

__all__ = ["KVStreamBackend", "Settings", "extra_config"]

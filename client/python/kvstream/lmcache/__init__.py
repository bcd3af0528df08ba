"""kvstream.lmcache: LMCache integration (needs lmcache and torch, which the base package does not).

- KVStreamBackend: the LMCache storage plugin (module_path kvstream.lmcache, class_name KVStreamBackend).
- kvstream.lmcache.vllm_connector.KVStreamConnectorV1: LMCache's vLLM v1 connector with step batching.
"""

from .backend import KVStreamBackend
from .settings import Settings, extra_config

__all__ = ["KVStreamBackend", "Settings", "extra_config"]

"""kvstream.vllm_tier: the module path vLLM's TieringOffloadingSpec configs name for KVStreamTier
({"type": "KVStreamTier", "module_path": "kvstream.vllm_tier", ...}); it lives in kvstream.vllm.tier."""

from .vllm.tier import KVStreamTier

__all__ = ["KVStreamTier"]

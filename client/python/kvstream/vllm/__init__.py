"""kvstream.vllm: kvstreamd as a secondary tier of vLLM's own multi-tier KV offloading (needs vLLM,
which the base package does not). vLLM loads it by module path: user configs name
kvstream.vllm_tier (kept as a re-export of kvstream.vllm.tier)."""

from .tier import KVStreamTier

__all__ = ["KVStreamTier"]

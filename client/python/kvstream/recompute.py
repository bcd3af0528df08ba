"""recompute: what it costs the engine to prefill tokens instead of loading their KV from kvstreamd.

Prefilling `n` new tokens after `h` cached ones costs, in floating-point operations,

    linear:    n * 2 * layers * (hidden * heads * head_dim          (Q)
                                 + 2 * hidden * kv_heads * head_dim (K, V)
                                 + heads * head_dim * hidden        (O)
                                 + 3 * hidden * intermediate * experts_per_token)  (gated MLP)
    attention: 4 * layers * heads * head_dim * (n * h + n * (n + 1) / 2)   (QK^T and PV, causal)

and takes (linear + attention) / throughput seconds. The LM head is not counted: an engine computes
logits for a request's last position only, however long its prefix. MoE and MLA models are
approximated (the experts a token runs, the query/key head dimension).

Throughput, from the integration's settings:
- `recompute_tflops` (default 400): the effective TFLOPS of one GPU in prefill, e.g. an H100 in bf16
  (989 dense) at about 40% MFU; multiplied by the engine's tensor-parallel size where the
  integration knows it (vLLM tier, SGLang, LMCache plugin; the LMCache MP adapter does not: give it
  the engine's total).
- `recompute_tokens_per_s` (calibration, overrides the TFLOPS): the prefill rate the engine
  measured with no cache. Time a prefill of N tokens with nothing cached (N around 1-4 K, where
  attention is still a small share; e.g. a request of N prompt tokens and max_tokens 1, timed to
  its first token on an idle engine) and divide: N / seconds. It sets the linear term (seconds per
  token = 1 / rate) and, with the model's shape known, the attention term at the same FLOP rate;
  without a shape, the model is that linear term alone.

With neither a shape nor a measured rate there is no model (RecomputeModel.usable is False).

The shape comes from the engine's own config (vLLM's `hf_config`, registered here by the
integration that sees it, or the model's config.json on disk: a local model directory or the
Hugging Face cache, never the network), then what the integration sees of the running model
(layers, heads, head_dim), then the `model_shape` setting (any of SHAPE_FIELDS), in that order.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional

logger = logging.getLogger(__name__)

DEFAULT_TFLOPS = 400.0  # one H100 in bf16 at ~40% MFU
# The fields of a ModelShape, as the model_shape setting names them.
SHAPE_FIELDS = ("layers", "hidden_size", "heads", "kv_heads", "head_dim", "intermediate_size", "experts_per_token")
_REQUIRED = SHAPE_FIELDS[:-1]


@dataclass(frozen=True)
class ModelShape:
    """What the prefill cost depends on (see the module docstring)."""

    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate_size: int  # per expert for MoE models
    experts_per_token: int = 1  # MoE: routed (plus shared) experts each token runs

    @classmethod
    def from_fields(cls, fields: Mapping[str, int]) -> Optional["ModelShape"]:
        """The shape, or None when a required field is missing."""
        if any(not fields.get(f) for f in _REQUIRED):
            return None
        return cls(**{f: int(fields[f]) for f in SHAPE_FIELDS if fields.get(f)})

    def linear_flops_per_token(self) -> float:
        attention = self.hidden_size * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden_size * self.intermediate_size * self.experts_per_token
        return 2.0 * self.layers * (attention + mlp)

    def attention_flops(self, new_tokens: int, cached_tokens: int) -> float:
        n, h = float(new_tokens), float(cached_tokens)
        return 4.0 * self.layers * self.heads * self.head_dim * (n * h + n * (n + 1) / 2)


class RecomputeModel:
    """The prefill seconds of `n` new tokens after `h` cached ones (see the module docstring)."""

    def __init__(self, shape: Optional[ModelShape] = None, tflops: float = DEFAULT_TFLOPS,
                 tokens_per_s: float = 0.0, gpus: int = 1) -> None:
        self.shape = shape
        self.tokens_per_s = float(tokens_per_s or 0.0)
        self.gpus = max(1, int(gpus or 1))
        if shape is not None and self.tokens_per_s > 0:
            self.flops_per_s = self.tokens_per_s * shape.linear_flops_per_token()  # calibrated
        else:
            self.flops_per_s = float(tflops) * 1e12 * self.gpus

    @property
    def usable(self) -> bool:
        return self.shape is not None or self.tokens_per_s > 0

    def seconds(self, new_tokens: int, cached_tokens: int = 0) -> float:
        """Seconds to prefill `new_tokens` after `cached_tokens`; +inf without a usable model."""
        if new_tokens <= 0:
            return 0.0
        if self.shape is None:
            return new_tokens / self.tokens_per_s if self.tokens_per_s > 0 else math.inf
        flops = new_tokens * self.shape.linear_flops_per_token() + self.shape.attention_flops(new_tokens, cached_tokens)
        return flops / self.flops_per_s

    def __str__(self) -> str:
        if not self.usable:
            return "no compute model"
        rate = (f"calibrated at {self.tokens_per_s:g} tokens/s" if self.tokens_per_s > 0
                else f"{self.flops_per_s / 1e12:g} TFLOPS ({self.gpus} GPU{'s' if self.gpus > 1 else ''})")
        if self.shape is None:
            return f"linear only, {rate}"
        s = self.shape
        return (f"{s.layers} layers, hidden {s.hidden_size}, {s.heads}/{s.kv_heads} heads of {s.head_dim}, "
                f"MLP {s.intermediate_size}x{s.experts_per_token}, {rate}")


@dataclass(frozen=True)
class RecomputeSettings:
    """The load-or-recompute settings every integration takes (under its own key names)."""

    verdict: bool = True  # cut a hit where loading stops paying; off: load every hit
    tflops: float = DEFAULT_TFLOPS  # effective TFLOPS per GPU
    tokens_per_s: float = 0.0  # measured prefill rate with no cache (0: not calibrated)
    shape: Dict[str, int] = field(default_factory=dict)  # model_shape: fields over the detected ones


def parse_verdict(raw: Any) -> bool:
    """`verdict`: on | off (or a boolean)."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("on", "true", "yes", "1", "off", "false", "no", "0"):
        return raw.strip().lower() in ("on", "true", "yes", "1")
    raise ValueError(f"not on or off: {raw!r}")


def parse_shape(raw: Any) -> Dict[str, int]:
    """`model_shape`: a mapping (or its JSON text) of SHAPE_FIELDS to positive integers."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise ValueError(f"not a JSON object: {raw!r}") from None
    if not isinstance(raw, Mapping):
        raise ValueError(f"not a mapping: {raw!r}")
    unknown = sorted(set(raw) - set(SHAPE_FIELDS))
    if unknown:
        raise ValueError(f"unknown fields {unknown}; known: {list(SHAPE_FIELDS)}")
    shape: Dict[str, int] = {}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
        shape[name] = value
    return shape


def parse_rate(raw: Any, allow_zero: bool) -> float:
    value = float(raw)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"must be a {'non-negative' if allow_zero else 'positive'} number, got {raw!r}")
    return value


def settings(values: Mapping[str, Any], prefix: str = "", where: str = "settings") -> RecomputeSettings:
    """RecomputeSettings from an engine's configuration: the keys `<prefix>verdict`,
    `<prefix>recompute_tflops`, `<prefix>recompute_tokens_per_s` and `<prefix>model_shape`, each
    optional. A bad value is a ValueError naming the key."""
    parsers = (("verdict", "verdict", parse_verdict),
               ("recompute_tflops", "tflops", lambda r: parse_rate(r, allow_zero=False)),
               ("recompute_tokens_per_s", "tokens_per_s", lambda r: parse_rate(r, allow_zero=True)),
               ("model_shape", "shape", parse_shape))
    parsed: Dict[str, Any] = {}
    for key, attr, parse in parsers:
        name = prefix + key
        if name in values and values[name] is not None:
            try:
                parsed[attr] = parse(values[name])
            except (TypeError, ValueError) as e:
                raise ValueError(f"{where} {name}: {e}") from None
    return RecomputeSettings(**parsed)


# -- the model's shape, from the engine's own config ----------------------------------------------

_registered: Dict[str, Any] = {}  # model name -> the engine's config object, as an integration saw it
_registered_lock = threading.Lock()


def register(model: str, config: Any) -> None:
    """An integration that sees the engine's model config (vLLM's hf_config) hands it over for the
    integrations of the same process that do not (the LMCache plugin under vLLM)."""
    if model and config is not None:
        with _registered_lock:
            _registered[model] = config


def _get(config: Any, *names: str) -> Any:
    for name in names:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return None


def shape_fields(config: Any) -> Dict[str, int]:
    """SHAPE_FIELDS found in a Hugging Face style config (an object such as vLLM's hf_config, or a
    config.json as a dict); text_config for multimodal models. Only the fields it has."""
    if config is None:
        return {}
    text = None
    getter = getattr(config, "get_text_config", None)
    if callable(getter):
        try:
            text = getter()
        except Exception:  # noqa: BLE001 - a config that cannot say: use it as it is
            text = None
    if text is None:
        text = _get(config, "text_config")
    if text is not None and _get(text, "num_hidden_layers", "n_layer", "num_layers") is not None:
        config = text
    fields: Dict[str, Any] = {
        "layers": _get(config, "num_hidden_layers", "n_layer", "num_layers"),
        "hidden_size": _get(config, "hidden_size", "n_embd", "d_model"),
        "heads": _get(config, "num_attention_heads", "n_head"),
    }
    fields["kv_heads"] = _get(config, "num_key_value_heads", "num_kv_heads")
    if fields["kv_heads"] is None and fields["heads"] is not None:
        fields["kv_heads"] = 1 if _get(config, "multi_query") else fields["heads"]
    nope, rope = _get(config, "qk_nope_head_dim"), _get(config, "qk_rope_head_dim")
    if nope and rope:  # MLA: the query/key head dimension
        fields["head_dim"] = nope + rope
    else:
        fields["head_dim"] = _get(config, "head_dim")
        if not fields["head_dim"] and fields["hidden_size"] and fields["heads"]:
            fields["head_dim"] = fields["hidden_size"] // fields["heads"]
    routed = _get(config, "num_experts_per_tok", "moe_topk")
    experts = _get(config, "num_local_experts", "n_routed_experts", "num_experts")
    if routed and experts:
        fields["intermediate_size"] = _get(config, "moe_intermediate_size", "intermediate_size")
        fields["experts_per_token"] = int(routed) + int(_get(config, "n_shared_experts") or 0)
    else:
        fields["intermediate_size"] = _get(config, "intermediate_size", "n_inner", "ffn_dim")
        if not fields["intermediate_size"] and fields["hidden_size"]:
            fields["intermediate_size"] = 4 * fields["hidden_size"]
    return {k: int(v) for k, v in fields.items() if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0}


def _config_json(model: str) -> Optional[Dict[str, Any]]:
    """The model's config.json: in a local model directory, else in the Hugging Face cache (never
    downloaded). None when there is none."""
    path: Optional[str] = None
    if os.path.isdir(model):
        path = os.path.join(model, "config.json")
    else:
        try:
            from huggingface_hub import try_to_load_from_cache

            found = try_to_load_from_cache(repo_id=model, filename="config.json")
            path = found if isinstance(found, str) else None
        except Exception:  # noqa: BLE001 - no huggingface_hub, or a name that is no repository id
            path = None
    if not path or not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            loaded = json.load(f)
    except (OSError, ValueError) as e:
        logger.warning("kvstream: cannot read %s: %s", path, e)
        return None
    return loaded if isinstance(loaded, dict) else None


def engine_config(model: str) -> Any:
    """The engine's config of `model`: registered by an integration, vLLM's current config of
    that model, or its config.json on disk; None when none is found."""
    with _registered_lock:
        config = _registered.get(model)
    if config is not None:
        return config
    vllm_config_module = sys.modules.get("vllm.config")
    if vllm_config_module is not None:
        try:
            current = vllm_config_module.get_current_vllm_config_or_none()
            model_config = getattr(current, "model_config", None)
            if model_config is not None and getattr(model_config, "model", None) == model:
                return model_config.hf_config
        except Exception:  # noqa: BLE001 - an older vLLM, or no config set
            pass
    return _config_json(model) if model else None


def model_for(settings: RecomputeSettings, model: str = "", seen: Optional[Mapping[str, int]] = None,
              gpus: int = 1) -> RecomputeModel:
    """The recompute model of `model`: its shape from the engine's config, what the integration
    `seen` of the running model, then the model_shape setting (each over the previous)."""
    fields = shape_fields(engine_config(model)) if model else {}
    fields.update({k: v for k, v in (seen or {}).items() if v})
    fields.update(settings.shape)
    return RecomputeModel(ModelShape.from_fields(fields), settings.tflops, settings.tokens_per_s, gpus)

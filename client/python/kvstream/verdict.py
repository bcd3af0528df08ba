"""verdict: load or recompute, decided once for every engine integration (kvstream.transfer.lookup
applies it to each lookup).

A storage hit helps only while loading it is faster than recomputing it. For one request's hit
prefix of m chunks, the daemon tells (LookupRequest.estimate_load) the cumulative seconds to load
chunks 0..c, load[c]; the engine's RecomputeModel tells the prefill seconds of tokens after those
cached. The verdict loads h chunks, the h in 0..m that minimises

    load[h - 1] + recompute((m - h) * chunk_tokens new tokens | start + h * chunk_tokens cached)

(ties: the longer load); chunks h.. are then answered as misses and recomputed. The tokens past the
hit prefix are prefilled whatever h is, so they do not enter the choice. A NaN estimate (the daemon
has not measured a holder yet) loads; an infinite one (only a stalled or unreachable tier holds
that chunk) is never loaded, nor anything past it, with or without a compute model. Without a
usable compute model (no shape known and no measured rate) every other hit loads, and the
integration says so once in its log.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Callable, Dict, Mapping, Optional, Sequence

from .recompute import RecomputeModel, RecomputeSettings, model_for

logger = logging.getLogger(__name__)


def best_cut(loads: Sequence[float], chunk_tokens: int, model: Optional[RecomputeModel],
             start_tokens: int = 0, at_least: int = 0) -> int:
    """How many leading chunks of a hit prefix to load (see the module docstring). `loads[c]`: the
    cumulative load seconds of chunks 0..c; `start_tokens`: tokens cached before chunk 0;
    `at_least`: chunks already promised to the engine (loaded unless a tier holding one stalled)."""
    m = len(loads)
    cap = next((c for c, s in enumerate(loads) if s == math.inf), m)  # never load a stalled chunk
    if model is None or not model.usable or chunk_tokens <= 0 or any(math.isnan(s) for s in loads[:cap]):
        return cap
    floor = min(max(0, at_least), cap)
    best, best_cost = cap, math.inf
    for h in range(cap, floor - 1, -1):  # from the longest load down: a tie keeps the longer load
        loaded = max(0.0, loads[h - 1]) if h else 0.0
        cost = loaded + model.seconds((m - h) * chunk_tokens, start_tokens + h * chunk_tokens)
        if cost < best_cost:
            best, best_cost = h, cost
    return best


class Verdict:
    """One integration's judge: its settings and the compute models of the models it serves (by
    name, found once each). Thread-safe."""

    def __init__(self, settings: RecomputeSettings, describe: str, gpus: int = 1,
                 log: logging.Logger = logger) -> None:
        self.settings = settings
        self._describe = describe
        self._gpus = gpus
        self._log = log
        self._lock = threading.Lock()
        self._models: Dict[str, RecomputeModel] = {}  # GUARDED_BY(_lock)
        self._seen: Dict[str, Mapping[str, int]] = {}  # GUARDED_BY(_lock)

    @property
    def enabled(self) -> bool:
        return self.settings.verdict

    def see(self, seen: Mapping[str, int], model: str = "", gpus: Optional[int] = None) -> None:
        """What the integration sees of the running model (layers, heads, head_dim, ...) and how
        many GPUs prefill it: used (over the engine's config) when `model`'s compute model is made."""
        with self._lock:
            self._seen[model] = dict(seen)
            self._models.pop(model, None)
            if gpus is not None:
                self._gpus = gpus

    def model(self, name: str = "", find: Callable[..., RecomputeModel] = model_for) -> RecomputeModel:
        """The compute model of `name` (found once; said once in the log)."""
        with self._lock:
            found = self._models.get(name)
            seen = self._seen.get(name)
        if found is not None:
            return found
        found = find(self.settings, name, seen, self._gpus)
        with self._lock:
            if name in self._models:
                return self._models[name]
            self._models[name] = found
        if self.enabled and found.usable:
            self._log.info("kvstream: %s: load or recompute for %s: %s", self._describe, name or "the model", found)
        elif self.enabled:
            self._log.warning("kvstream: %s: no compute model for %s (no model shape known and no "
                              "recompute_tokens_per_s): every hit is loaded, except from stalled tiers",
                              self._describe, name or "the model")
        return found

    def cut(self, loads: Sequence[float], chunk_tokens: int, start_tokens: int = 0, name: str = "",
            at_least: int = 0) -> int:
        """How many leading chunks of the hit prefix to load (best_cut with `name`'s model)."""
        if not self.enabled:
            return len(loads)
        return best_cut(loads, chunk_tokens, self.model(name), start_tokens, at_least)

"""The engine versions kvstream's integrations are tested with, and a warning outside them.

The LMCache plugin, the vLLM connector and the SGLang backend use engine internals that change
between releases; each is tested at one version (tests/python/requirements.txt,
tests/sglang/requirements-nodeps.txt). Importing an integration checks the installed engine and
warns once, naming the version and the tested range, when it is outside (it still loads: a newer
patch release usually works).
"""

from __future__ import annotations

import re
import warnings
from importlib import metadata

# Distribution -> (lowest tested, first untested): the range [low, high).
TESTED = {
    "lmcache": ("0.5.6", "0.6"),
    "vllm": ("0.33.0", "0.34"),
    "sglang": ("0.5.23", "0.6"),
}

_warned: set[str] = set()


def _release(version: str) -> tuple[int, ...]:
    """The leading numeric release of a version string ("0.5.6.post1+cu128" -> (0, 5, 6))."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def in_range(engine: str, version: str) -> bool:
    low, high = TESTED[engine]
    return _release(low) <= _release(version) < _release(high)


def check(engine: str, version: str | None = None) -> bool:
    """Whether `engine` (installed, or at `version`) is in its tested range; warns once if not."""
    if version is None:
        try:
            version = metadata.version(engine)
        except metadata.PackageNotFoundError:
            return True  # the import of the engine itself fails, more clearly
    if in_range(engine, version):
        return True
    if engine not in _warned:
        _warned.add(engine)
        low, high = TESTED[engine]
        warnings.warn(
            f"kvstream's {engine} integration is tested with {engine} >= {low}, < {high}; "
            f"{engine} {version} is installed: it may not work (pip install 'kvstream[{engine}]' "
            "installs a tested version)",
            RuntimeWarning,
            stacklevel=3,
        )
    return False

"""kvstream.engine_versions: the tested engine ranges, the warning outside them (once), none inside,
and none for the engines installed here (the tested versions)."""

import importlib
import warnings

import pytest

from kvstream import engine_versions


@pytest.fixture(autouse=True)
def fresh_warnings():
    engine_versions._warned.clear()
    yield
    engine_versions._warned.clear()


def test_versions_inside_the_range_pass_quietly():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert engine_versions.check("lmcache", "0.5.6")
        assert engine_versions.check("lmcache", "0.5.9.post1+cu128")
        assert engine_versions.check("vllm", "0.33.0")
        assert engine_versions.check("sglang", "0.5.23")


@pytest.mark.parametrize("engine,version", [("lmcache", "0.5.5"), ("lmcache", "0.6.0"), ("vllm", "0.34.1"),
                                            ("vllm", "0.32.9"), ("sglang", "0.5.22"), ("sglang", "1.0")])
def test_a_version_outside_warns_once_naming_it_and_the_range(engine, version):
    with pytest.warns(RuntimeWarning) as caught:
        assert not engine_versions.check(engine, version)
    message = str(caught[0].message)
    low, high = engine_versions.TESTED[engine]
    assert f"{engine} {version} is installed" in message and low in message and high in message
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not engine_versions.check(engine, version)  # once per engine


def test_the_installed_engines_are_the_tested_ones():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert engine_versions.check("lmcache")
        assert engine_versions.check("vllm")
        importlib.reload(importlib.import_module("kvstream.lmcache"))
    assert not [w for w in caught if "kvstream's" in str(w.message)], [str(w.message) for w in caught]


def test_pyproject_extras_pin_the_tested_ranges():
    import pathlib
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    extras = tomllib.loads((root / "client/python/pyproject.toml").read_text())["project"]["optional-dependencies"]
    for engine, (low, high) in engine_versions.TESTED.items():
        pins = [p for extra in extras.values() for p in extra if p.startswith(engine + ">=")]
        assert pins and all(p == f"{engine}>={low},<{high}" for p in pins), (engine, pins)

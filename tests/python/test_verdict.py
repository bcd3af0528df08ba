"""Load or recompute, without a daemon: the engine's prefill cost (kvstream.recompute: its linear and
quadratic terms, its calibration, the model's shape from the engine's config) and the verdict's cut
of a hit prefix (kvstream.verdict) for tiers fast and slow, estimates missing (NaN) and stalled
tiers (+inf)."""

from __future__ import annotations

import json
import logging
import math

import pytest

from kvstream import recompute
from kvstream.recompute import ModelShape, RecomputeModel, RecomputeSettings
from kvstream.verdict import Verdict, best_cut

# Llama-3-8B: 6.98 B parameters outside the embeddings, 128 KiB of KV per token in bf16.
LLAMA_8B = ModelShape(layers=32, hidden_size=4096, heads=32, kv_heads=8, head_dim=128, intermediate_size=14336)
LLAMA_8B_CONFIG = {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 32, "hidden_size": 4096,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
                   "vocab_size": 128256}
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
CHUNK = 256  # tokens per chunk (LMCache's default)
H100 = RecomputeModel(LLAMA_8B, tflops=400)


def cumulative(per_chunk):
    out, total = [], 0.0
    for s in per_chunk:
        total += s
        out.append(total)
    return out


def at_bandwidth(chunks: int, bytes_per_s: float, latency: float = 0.0):
    """A tier's cumulative load seconds of `chunks` chunks of CHUNK tokens."""
    return cumulative([latency + CHUNK * KV_BYTES_PER_TOKEN / bytes_per_s] * chunks)


# -- the cost model ---------------------------------------------------------------------------------

def test_the_linear_term_is_two_flops_per_weight_per_token():
    weights = 32 * (4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336)  # Q, O; K, V; gate, up, down
    assert LLAMA_8B.linear_flops_per_token() == 2 * weights
    assert 6.9e9 < weights < 7.0e9
    model = RecomputeModel(LLAMA_8B, tflops=100)
    attention = LLAMA_8B.attention_flops(1000, 0) / 100e12
    assert model.seconds(1000) - attention == pytest.approx(1000 * 2 * weights / 100e12)
    assert model.seconds(0, 5000) == 0.0


def test_the_attention_term_is_quadratic_in_the_new_tokens_and_linear_in_the_cached_ones():
    per_pair = 4 * 32 * 32 * 128  # QK^T and PV, per layer and head dimension, per (query, key) pair
    assert LLAMA_8B.attention_flops(1, 0) == per_pair  # a token attends to itself
    assert LLAMA_8B.attention_flops(100, 0) == per_pair * 100 * 101 / 2  # causal
    assert LLAMA_8B.attention_flops(100, 1000) - LLAMA_8B.attention_flops(100, 0) == per_pair * 100 * 1000
    model = RecomputeModel(LLAMA_8B, tflops=400)
    # The same new tokens cost more after a longer cached prefix, by exactly the cross term.
    assert model.seconds(256, 32000) - model.seconds(256, 0) == pytest.approx(per_pair * 256 * 32000 / 400e12)
    # Long prompts: attention dominates, four times the cost for twice the tokens.
    long = LLAMA_8B.attention_flops(200_000, 0) / LLAMA_8B.attention_flops(100_000, 0)
    assert long == pytest.approx(4, rel=1e-4)


def test_throughput_scales_with_the_gpus_of_the_engine():
    one, eight = RecomputeModel(LLAMA_8B, tflops=400), RecomputeModel(LLAMA_8B, tflops=400, gpus=8)
    assert one.seconds(4096, 1024) == pytest.approx(8 * eight.seconds(4096, 1024))
    # An 8 K prefill of Llama-3-8B on an H100 at 400 effective TFLOPS: about a third of a second.
    assert 0.25 < one.seconds(8192) < 0.4


def test_a_measured_rate_calibrates_the_linear_term_and_the_attention_rides_on_it():
    calibrated = RecomputeModel(LLAMA_8B, tflops=1, tokens_per_s=20_000, gpus=8)  # the rate wins
    linear = 4096 / 20_000
    assert calibrated.flops_per_s == pytest.approx(20_000 * LLAMA_8B.linear_flops_per_token())
    assert calibrated.seconds(4096) == pytest.approx(linear + LLAMA_8B.attention_flops(4096, 0) / calibrated.flops_per_s)
    assert calibrated.seconds(4096, 10_000) > calibrated.seconds(4096)
    # No shape, a rate: the linear term alone.
    rate_only = RecomputeModel(None, tokens_per_s=20_000)
    assert rate_only.usable and rate_only.seconds(4096, 100_000) == pytest.approx(linear)
    # Neither: no model.
    nothing = RecomputeModel(None)
    assert not nothing.usable and nothing.seconds(1) == math.inf


def test_the_shape_comes_from_the_engines_config():
    assert recompute.shape_fields(LLAMA_8B_CONFIG) == {
        "layers": 32, "hidden_size": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128, "intermediate_size": 14336}

    class HfConfig:  # vLLM's hf_config: attributes, the text model behind get_text_config
        def __init__(self, **fields):
            self.__dict__.update(fields)

    vision = HfConfig(vision_config=HfConfig(hidden_size=1), text_config=HfConfig(**LLAMA_8B_CONFIG))
    vision.get_text_config = lambda: vision.text_config
    assert ModelShape.from_fields(recompute.shape_fields(vision)) == LLAMA_8B
    mixtral = dict(LLAMA_8B_CONFIG, num_local_experts=8, num_experts_per_tok=2)
    assert recompute.shape_fields(mixtral)["experts_per_token"] == 2
    deepseek = {"num_hidden_layers": 61, "hidden_size": 7168, "num_attention_heads": 128, "num_key_value_heads": 128,
                "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "intermediate_size": 18432,
                "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
                "n_shared_experts": 1}
    shape = ModelShape.from_fields(recompute.shape_fields(deepseek))
    assert shape is not None and (shape.head_dim, shape.intermediate_size, shape.experts_per_token) == (192, 2048, 9)
    assert ModelShape.from_fields({"layers": 32}) is None


def test_the_model_is_found_from_config_json_then_what_the_engine_sees_then_the_setting(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    found = recompute.model_for(RecomputeSettings(), str(tmp_path))
    assert found.shape == LLAMA_8B and found.flops_per_s == 400e12
    seen = recompute.model_for(RecomputeSettings(), str(tmp_path), seen={"layers": 16}, gpus=2)
    assert seen.shape.layers == 16 and seen.flops_per_s == 800e12
    shaped = recompute.model_for(RecomputeSettings(shape={"layers": 8}), str(tmp_path), seen={"layers": 16})
    assert shaped.shape.layers == 8
    assert not recompute.model_for(RecomputeSettings(), "no/such-model-anywhere").usable
    given = dict(recompute.shape_fields(LLAMA_8B_CONFIG))
    assert recompute.model_for(RecomputeSettings(shape=given), "no/such-model-anywhere").shape == LLAMA_8B
    recompute.register("registered/model", LLAMA_8B_CONFIG)
    assert recompute.model_for(RecomputeSettings(tflops=100), "registered/model").shape == LLAMA_8B


def test_settings_are_read_and_checked_by_name():
    s = recompute.settings({"kvstream.verdict": "off", "kvstream.recompute_tflops": "250",
                            "kvstream.model_shape": '{"layers": 2, "heads": 4}'}, prefix="kvstream.")
    assert (s.verdict, s.tflops, s.tokens_per_s, s.shape) == (False, 250.0, 0.0, {"layers": 2, "heads": 4})
    assert recompute.settings({}) == RecomputeSettings()
    for bad in ({"verdict": "maybe"}, {"recompute_tflops": 0}, {"recompute_tokens_per_s": -1},
                {"model_shape": {"layers": 0}}, {"model_shape": {"vocab": 5}}, {"model_shape": "[1]"}):
        with pytest.raises(ValueError) as e:
            recompute.settings(bad, where="adapter_params")
        assert next(iter(bad)) in str(e.value)


# -- the cut ----------------------------------------------------------------------------------------

def test_a_fast_tier_loads_the_whole_hit():
    nvme = at_bandwidth(40, 7e9, latency=100e-6)  # 40 chunks of 32 MiB from one NVMe drive
    assert best_cut(nvme, CHUNK, H100) == 40
    assert best_cut(nvme, CHUNK, H100, start_tokens=100_000) == 40
    assert best_cut([0.0] * 40, CHUNK, H100) == 40  # a daemon without the estimate: load


def test_a_tier_at_10_mb_per_s_loses_to_recomputing():
    slow = at_bandwidth(40, 10e6)
    assert best_cut(slow, CHUNK, H100) == 0
    assert best_cut(slow[:1], CHUNK, H100) == 0


def test_the_cut_falls_where_loading_stops_paying():
    # 8 chunks on a fast tier, the rest behind a slow one: load the fast ones, recompute the rest.
    loads = cumulative([0.003] * 8 + [3.0] * 8)
    assert best_cut(loads, CHUNK, H100) == 8
    # Later chunks cost more to recompute (their attention reaches back further): a load rate that
    # loses at the start of a prompt can win deep into it.
    per_chunk = 0.05
    assert best_cut(cumulative([per_chunk] * 4), CHUNK, H100) == 0
    assert best_cut(cumulative([per_chunk] * 4), CHUNK, H100, start_tokens=300_000) == 4


def test_no_estimate_yet_loads():
    slow = at_bandwidth(10, 10e6)
    assert best_cut([math.nan] * 10, CHUNK, H100) == 10
    assert best_cut(slow[:5] + [math.nan] * 5, CHUNK, H100) == 10


def test_a_stalled_tier_is_never_loaded_from_nor_anything_past_it():
    stalled = cumulative([0.001] * 3) + [math.inf] * 5
    assert best_cut(stalled, CHUNK, H100) == 3
    assert best_cut(stalled, CHUNK, None) == 3  # without a compute model too
    assert best_cut([math.inf, math.nan], CHUNK, H100) == 0
    assert best_cut(cumulative([0.001] * 3) + [math.nan, math.inf], CHUNK, H100) == 4  # NaN loads, up to the inf


def test_the_verdict_off_loads_everything_and_no_model_says_so_once(caplog):
    slow = at_bandwidth(10, 10e6) + [math.inf]
    assert Verdict(RecomputeSettings(verdict=False), "test").cut(slow, CHUNK) == 11
    blind = Verdict(RecomputeSettings(), "test")  # no shape anywhere, no rate
    with caplog.at_level(logging.INFO, logger="kvstream"):
        assert blind.cut(slow, CHUNK, name="no/such-model") == 10  # all but the stalled chunk
        assert blind.cut(slow, CHUNK, name="no/such-model") == 10
    said = [r for r in caplog.records if "no compute model" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    shaped = Verdict(RecomputeSettings(shape=recompute.shape_fields(LLAMA_8B_CONFIG)), "test")
    assert shaped.cut(slow, CHUNK, name="no/such-model") == 0


def test_chunks_already_promised_stay_loaded_unless_their_tier_stalled():
    slow = at_bandwidth(10, 10e6)
    assert best_cut(slow, CHUNK, H100, at_least=4) == 4
    assert best_cut(slow, CHUNK, H100, at_least=20) == 10
    assert best_cut(slow[:2] + [math.inf] * 8, CHUNK, H100, at_least=4) == 2

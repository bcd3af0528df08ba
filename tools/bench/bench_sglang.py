"""Reads of SGLang's HiCache storage: HiCacheFile (SGLang's file backend) on the fast tier against
kvstream.sglang.KVStreamHiCache on kvstreamd's tiers, same pages, same batches, into SGLang's real
host KV pool (shared memory), pages sized as for a 32B-class model. Run by tools/bench-sglang.sh
inside the tiers' capped cgroup; prints MB/s per backend and their ratio.

HiCacheFile goes through the calls SGLang's controller makes for it (batch_get of flat pages, then
set_from_flat_data_page); its page cache is dropped before every timed pass. kvstream goes through
the v1 zero-copy calls (batch_get_v1 into the pool).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from sglang.srt.mem_cache.hicache_storage import HiCacheStorageConfig, HiCacheStorageExtraInfo  # noqa: E402
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool  # noqa: E402
from sglang.srt.mem_cache.pool_host.mha import MHATokenToKVPoolHost  # noqa: E402
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory  # noqa: E402

from kvbench_runs import kvbench_runs  # noqa: E402
from kvstream.sglang import KVStreamHiCache, extra_config  # noqa: E402


def config(extra: dict) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                is_mla_model=False, enable_storage_metrics=False, is_page_first_layout=True,
                                model_name="bench/32B", extra_config=extra)


def host_pool(tokens: int, page_size: int, heads: int, head_dim: int, layers: int) -> MHATokenToKVPoolHost:
    """SGLang's real host KV pool (page_first, shared memory as `allocator: shm` makes it) of twice
    `tokens`, behind a CPU device pool of `tokens`."""
    device = MHATokenToKVPool(tokens, page_size, torch.bfloat16, heads, head_dim, layers, "cpu", False,
                              start_layer=0, end_layer=layers)
    return MHATokenToKVPoolHost(device.get_device_pool_infos()[0].buffer_info, 2.0, 0, page_size, "page_first",
                                pin_memory=False, device="cpu", allocator_type="shm",
                                device_capacity_tokens=device.size, start_layer=0, end_layer=layers,
                                write_back_staging=device.hicache_write_back_staging)


def drop_page_cache() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--file-dir", required=True, help="HiCacheFile's directory (on the fast tier)")
    ap.add_argument("--pages", type=int, default=48)
    ap.add_argument("--batch", type=int, default=16, help="pages per storage call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=64)
    ap.add_argument("--heads", type=int, default=8, help="KV heads per rank (8: TP 1 of a 32B-class model)")
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=64, help="tokens per page")
    ap.add_argument("--kvbench", help="kvbench JSON of the same batches on the same daemon")
    ap.add_argument("--json")
    a = ap.parse_args()

    tokens = a.pages * a.page_size
    host = host_pool(tokens, a.page_size, a.heads, a.head_dim, a.layers)
    page_bytes = host.get_size_per_token() * a.page_size
    keys = [f"{i:064x}" for i in range(a.pages)]
    src = host.alloc(tokens)
    dst = host.alloc(tokens)
    g = torch.Generator().manual_seed(7)
    for p in range(a.pages):
        page = host.get_data_page(int(src[p * a.page_size]))
        host.set_from_flat_data_page(int(src[p * a.page_size]),
                                     torch.randint(-2**15, 2**15, (page.numel(),), generator=g, dtype=torch.int16)
                                     .view(page.dtype))
    info = HiCacheStorageExtraInfo(prefix_keys=[])
    batches = [(keys[b:b + a.batch], b * a.page_size, (b + len(keys[b:b + a.batch])) * a.page_size)
               for b in range(0, a.pages, a.batch)]

    kvs = StorageBackendFactory.create_backend("dynamic", config(extra_config(a.socket, shm=True)), host)
    assert isinstance(kvs, KVStreamHiCache)
    kvs.register_mem_pool_host(host)
    hfile = StorageBackendFactory.create_backend("file", config({"file_storage_path": a.file_dir}), host)
    hfile.register_mem_pool_host(host)
    for ks, lo, hi in batches:
        assert all(kvs.batch_set_v1(ks, src[lo:hi], info)), "kvstream: set failed"
        assert hfile.batch_set(ks, [host.get_data_page(int(src[lo + i * a.page_size])) for i in range(len(ks))])
    deadline = time.monotonic() + 120
    while kvs.batch_exists(keys, info) < a.pages and time.monotonic() < deadline:
        time.sleep(0.1)
    assert kvs.batch_exists(keys, info) == a.pages, "kvstream: pages not written"

    def read_file() -> None:
        for ks, lo, _ in batches:
            got = hfile.batch_get(ks, [host.get_dummy_flat_data_page() for _ in ks])
            for i, t in enumerate(got):
                assert t is not None
                host.set_from_flat_data_page(int(dst[lo + i * a.page_size]), t)

    def read_kvstream() -> None:
        for ks, lo, hi in batches:
            assert all(kvs.batch_get_v1(ks, dst[lo:hi], info)), "kvstream: miss"

    total = a.pages * page_bytes
    seconds = {"hicache_file": [], "kvstream": []}
    for _ in range(a.rounds):
        for name, fn in (("hicache_file", read_file), ("kvstream", read_kvstream)):
            if name == "hicache_file":  # its reads are buffered; kvstreamd's are O_DIRECT
                drop_page_cache()
            start = time.monotonic()
            fn()
            seconds[name].append(time.monotonic() - start)
            same = all(torch.equal(host.get_data_page(int(src[p * a.page_size])).view(torch.int16),
                                   host.get_data_page(int(dst[p * a.page_size])).view(torch.int16))
                       for p in range(a.pages))
            assert same, f"{name}: the pages read differ from those written"
            for p in range(a.pages):  # the next pass must write every byte again
                host.get_data_page(int(dst[p * a.page_size]), flat=False).view(torch.int16).fill_(0)
    median = {k: statistics.median(v) for k, v in seconds.items()}
    mbps = {k: total / v / 1e6 for k, v in median.items()}
    print(f"{a.pages} pages of {page_bytes >> 20} MiB ({page_bytes // 2 >> 20} MiB K + V), batches of {a.batch}, "
          f"median of {a.rounds}; zero copy: {kvs.zero_copy}")
    print(f"{'backend':<14} {'seconds':>9} {'MB/s':>9} {'vs_file':>8}")
    for k in ("hicache_file", "kvstream"):
        print(f"{k:<14} {median[k]:9.3f} {mbps[k]:9.1f} {mbps[k] / mbps['hicache_file']:7.3f}x")
    if a.kvbench:
        completion = kvbench_runs(a.kvbench)["completion"]["throughput_bps"] / 1e6
        print(f"kvbench completion {completion:.1f} MB/s, same pieces and batches; kvstream at "
              f"{mbps['kvstream'] / completion:.3f} x kvbench")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"page_bytes": page_bytes, "pages": a.pages, "batch": a.batch, "seconds": seconds,
                       "mbps": mbps}, f, indent=1)
    kvs.close()


if __name__ == "__main__":
    main()

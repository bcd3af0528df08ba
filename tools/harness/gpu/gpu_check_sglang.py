#!/usr/bin/env python3
"""gpu_check_sglang: an SGLang server with the kvstream HiCache backend end to end on a GPU machine
(not runnable without one).

Starts kvstreamd on two tier directories, writes a tiny Llama config (random weights: SGLang's
--load-format dummy, no download; --skip-tokenizer-init, prompts as token ids), and runs SGLang with
hierarchical cache and `--hicache-storage-backend dynamic` loading kvstream.sglang (interface_v1,
shared-memory host pool) over the same long prompts twice:
  pass 1 computes the prompts; SGLang writes their pages through the backend into kvstreamd;
  then SGLang's caches are flushed (/flush_cache), so
  pass 2 must prefetch the pages back from kvstreamd: the daemon must have read them (bytes read
  grow by at least the prompts' KV) and the outputs must equal pass 1's.
Usage (in the environment of deploy/python-env.sh --sglang-gpu, from the repository root, after a
build): python tools/harness/gpu/gpu_check_sglang.py [--build build] [--dir /var/tmp/kvs-gpu-check-sglang]
Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import kvstream
from kvstream.sglang import extra_config

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 32000,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


def post(url: str, body: dict, timeout: float = 600) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        return json.loads(reply.read() or b"{}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--dir", default="/var/tmp/kvs-gpu-check-sglang")
    p.add_argument("--requests", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=4096)
    p.add_argument("--port", type=int, default=30777)
    args = p.parse_args()
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text(json.dumps(TINY_LLAMA))
    sock = work / "kvstreamd.sock"
    (work / "kvstreamd.yaml").write_text(
        f'socket: {{path: {sock}, mode: "0600"}}\nlogging: {{level: warn}}\ntiers:\n'
        f"  - {{name: t0, path: {work}/t0, capacity: 8GiB}}\n  - {{name: t1, path: {work}/t1, capacity: 8GiB}}\n")
    daemon = subprocess.Popen([str(Path(args.build) / "daemon" / "kvstreamd"), "--config", str(work / "kvstreamd.yaml")])
    server = None
    try:
        for _ in range(500):
            if sock.exists():
                break
            time.sleep(0.01)
        extra = extra_config(str(sock), shm=True)
        server = subprocess.Popen([
            sys.executable, "-m", "sglang.launch_server", "--model-path", str(work / "model"), "--load-format", "dummy",
            "--skip-tokenizer-init", "--port", str(args.port), "--mem-fraction-static", "0.5", "--page-size", "64",
            "--enable-hierarchical-cache", "--hicache-ratio", "2", "--hicache-mem-layout", "page_first",
            "--hicache-write-policy", "write_through",
            "--hicache-storage-backend", "dynamic", "--hicache-storage-prefetch-policy", "wait_complete",
            "--hicache-storage-backend-extra-config", json.dumps(extra)])
        base = f"http://127.0.0.1:{args.port}"
        for _ in range(600):
            try:
                urllib.request.urlopen(base + "/health", timeout=2)
                break
            except OSError:
                if server.poll() is not None:
                    print("gpu-check-sglang: the SGLang server exited", file=sys.stderr)
                    return 1
                time.sleep(1)
        prompts = [[(r * 7919 + i * 31) % 31000 + 100 for i in range(args.prompt_tokens)] for r in range(args.requests)]
        sampling = {"max_new_tokens": 8, "temperature": 0}

        def run_pass() -> list:
            return [post(base + "/generate", {"input_ids": ids, "sampling_params": sampling})["output_ids"]
                    for ids in prompts]

        with kvstream.Client.connect(str(sock)) as c:
            first = run_pass()
            time.sleep(5)  # SGLang writes pages to storage in the background
            written = sum(t.bytes_written for t in c.stats().tiers)
            post(base + "/flush_cache", {})
            before = sum(t.bytes_read for t in c.stats().tiers)
            second = run_pass()
            read = sum(t.bytes_read for t in c.stats().tiers) - before
        kv_bytes = args.requests * args.prompt_tokens * 2 * TINY_LLAMA["num_hidden_layers"] * \
            TINY_LLAMA["num_key_value_heads"] * (TINY_LLAMA["hidden_size"] // TINY_LLAMA["num_attention_heads"]) * 2
        checks = {
            "pages written to kvstreamd": written >= kv_bytes // 2,
            "pass 2 read the prompts' KV back from kvstreamd": read >= kv_bytes // 2,
            "pass 2 outputs equal pass 1's": first == second,
        }
        print(f"gpu-check-sglang: KV of the prompts {kv_bytes >> 20} MiB, written {written >> 20} MiB "
              f"(both tiers), read in pass 2 {read >> 20} MiB")
        for name, ok in checks.items():
            print(f"gpu-check-sglang: {'ok  ' if ok else 'FAIL'} {name}")
        return 0 if all(checks.values()) else 1
    finally:
        if server is not None:
            server.terminate()
            server.wait(60)
        daemon.terminate()
        daemon.wait(30)


if __name__ == "__main__":
    sys.exit(main())

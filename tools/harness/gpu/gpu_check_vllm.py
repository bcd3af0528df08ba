#!/usr/bin/env python3
"""gpu_check_vllm: vLLM + LMCache + kvstreamd end to end on a GPU machine (not runnable without one).

Starts kvstreamd on two tier directories, writes a tiny Llama config (random weights: vLLM's
load_format=dummy, no download, no tokenizer), and runs vLLM with KVStreamConnectorV1 and the
kvstream LMCache plugin twice over the same long prompts, with vLLM's own prefix cache off:
  pass 1 computes the prompts and stores their KV through LMCache into kvstreamd;
  pass 2 must load it back: the daemon's step records must show retrieves that carry the chunks
  of several requests at once (step batching) and the outputs must equal pass 1's;
  pass 3 does the same with LMCache's CPU pool in shared memory (extra_config shm_name, pinned by
  LMCache with cudaHostRegister): the pool is handed to the daemon as a device-pinned client
  region, chunks land in LMCache's MemoryObjs in place (through the daemon's bounce buffers) and
  go from there to the GPU; outputs must equal pass 1's.
Usage (in the environment of deploy/python-env.sh, from the repository root, after a build):
  python tools/harness/gpu/gpu_check_vllm.py [--build build] [--dir /var/tmp/kvs-gpu-check]
Exit status 0 when every check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": 32000,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build")
    p.add_argument("--dir", default="/var/tmp/kvs-gpu-check")
    p.add_argument("--requests", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=2048)
    args = p.parse_args()
    work = Path(args.dir)
    shutil.rmtree(work, ignore_errors=True)
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text(json.dumps(TINY_LLAMA))
    sock = work / "kvstreamd.sock"
    (work / "kvstreamd.yaml").write_text(
        f'socket: {{path: {sock}, mode: "0600"}}\nlogging: {{level: info}}\ntiers:\n'
        f"  - {{name: t0, path: {work}/t0, capacity: 8GiB}}\n  - {{name: t1, path: {work}/t1, capacity: 8GiB}}\n")
    lmcache_yaml = ("chunk_size: 256\nlocal_cpu: false\nmax_local_cpu_size: 2\nstorage_plugins: [kvstream]\n"
                    "extra_config:\n"
                    "  storage_plugin.kvstream.module_path: kvstream.lmcache\n"
                    "  storage_plugin.kvstream.class_name: KVStreamBackend\n"
                    f"  kvstream.socket_path: {sock}\n")
    daemon_log = work / "kvstreamd.log"
    with open(daemon_log, "wb") as log:
        daemon = subprocess.Popen([str(Path(args.build) / "daemon" / "kvstreamd"), "--config", str(work / "kvstreamd.yaml")],
                                  stderr=log)
    try:
        for _ in range(500):
            if sock.exists():
                break
            time.sleep(0.01)
        os.environ["LMCACHE_CONFIG_FILE"] = str(work / "lmcache.yaml")
        import kvstream
        from vllm import LLM, SamplingParams
        from vllm.config import KVTransferConfig
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=[(r * 7919 + i * 31) % 31999 + 1 for i in range(args.prompt_tokens)])
                   for r in range(args.requests)]
        params = SamplingParams(max_tokens=8, temperature=0.0)
        outputs = []
        steps_of_pass = []  # the daemon's step records of each pass
        last_step_id = -1
        regions_before_pass_3 = 0
        for n in range(3):
            shm = f"  shm_name: kvs_gpu_check_{os.getpid()}\n" if n == 2 else ""  # pass 3: the pool in /dev/shm
            (work / "lmcache.yaml").write_text(lmcache_yaml + shm)
            if n == 2:
                regions_before_pass_3 = daemon_log.read_text().count("client region")
            llm = LLM(model=str(work / "model"), load_format="dummy", skip_tokenizer_init=True, seed=0,
                      enable_prefix_caching=False, disable_hybrid_kv_cache_manager=True, gpu_memory_utilization=0.3,
                      max_model_len=4096, kv_transfer_config=KVTransferConfig(
                          kv_connector="KVStreamConnectorV1", kv_connector_module_path="kvstream.lmcache.vllm_connector",
                          kv_role="kv_both"))
            outputs.append([o.outputs[0].token_ids for o in llm.generate(prompts, params)])
            del llm
            with kvstream.Client.connect(str(sock)) as c:
                steps = [s for s in c.steps(1024) if s.id > last_step_id]
            steps_of_pass.append(steps)
            last_step_id = max([last_step_id] + [s.id for s in steps])
        chunks_per_request = args.prompt_tokens // 256
        stored = args.requests * (chunks_per_request - 1)  # every full chunk of every prompt
        batched = [s for s in steps_of_pass[1] if s.hits > chunks_per_request]
        checks = {
            "outputs of pass 2 equal pass 1": outputs[0] == outputs[1],
            "pass 2 read stored chunks": sum(s.hits for s in steps_of_pass[1]) >= stored,
            "a retrieve carried several requests' chunks (step batching)": bool(batched),
            "outputs of pass 3 (LMCache's pool in shared memory, zero copy) equal pass 1": outputs[0] == outputs[2],
            "pass 3 read stored chunks": sum(s.hits for s in steps_of_pass[2]) >= stored,
            "pass 3 handed LMCache's pool to the daemon":
                daemon_log.read_text().count("client region") > regions_before_pass_3,
            "as device-pinned memory (CUDA present: reads land through the daemon's bounce buffers)":
                "pinned by a device" in daemon_log.read_text(),
        }
        for name, ok in checks.items():
            print(f"{'ok  ' if ok else 'FAIL'} {name}")
        for n, steps in enumerate(steps_of_pass):
            print(f"pass {n + 1} daemon steps (chunks, hits): {[(s.chunks, s.hits) for s in steps]}")
        return 0 if all(checks.values()) else 1
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPU check of a device-pinned client region against a real kvstreamd: a /dev/shm pool the GPU
pinned (cudaHostRegister, as LMCache's and SGLang's pinned host pools are) is added with
device_pinned=True; chunks persisted from it are retrieved into another part of it (through the
daemon's bounce buffers), copied to the GPU and compared there with the originals, three times.
Needs only PyTorch with CUDA and the kvstream package (no vLLM, LMCache or SGLang), so it also
runs on a GPU machine that cannot install those. `--no-gpu` runs the same without the GPU parts.
Usage: tools/harness/gpu/gpu_check_pinned.py DIR_WITH_KVSTREAMD [--no-gpu]   (e.g. build/daemon)"""
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time

import kvstream


def start_daemon(bindir, work, buffered):
    sock = os.path.join(work, "kvstreamd.sock")
    cfg = os.path.join(work, "kvstreamd.yaml")
    extra = ", allow_buffered: true" if buffered else ""
    with open(cfg, "w") as f:
        f.write(f'socket: {{path: {sock}, mode: "0600"}}\nsessions: {{max_arena: 1GiB}}\nlogging: {{level: warn}}\n'
                f"tiers:\n  - {{name: t0, path: {work}/t0, capacity: 4GiB{extra}}}\n"
                f"  - {{name: t1, path: {work}/t1, capacity: 4GiB{extra}}}\n")
    d = subprocess.Popen([os.path.join(bindir, "kvstreamd"), "--config", cfg])
    for _ in range(500):
        if os.path.exists(sock):
            return d, sock
        if d.poll() is not None:
            return None, sock
        time.sleep(0.01)
    d.kill()
    return None, sock


def main():
    bindir, gpu = sys.argv[1], "--no-gpu" not in sys.argv
    import torch
    if gpu:
        print("torch", torch.__version__, "device", torch.cuda.get_device_name(0))
    work = tempfile.mkdtemp(prefix="kvs-gpu-", dir=os.getcwd())
    d, sock = start_daemon(bindir, work, buffered=False)
    if d is None:
        print("kvstreamd refused O_DIRECT tiers here; again with allow_buffered")
        d, sock = start_daemon(bindir, work, buffered=True)
    assert d is not None, "kvstreamd did not start"
    size, chunk, n = 512 << 20, 8 << 20, 32
    dst = 256 << 20
    path = f"/dev/shm/kvs-gpu-pool-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.ftruncate(fd, size)
        pool = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        host = torch.frombuffer(pool, dtype=torch.uint8)
        if gpu:
            rc = torch.cuda.cudart().cudaHostRegister(host.data_ptr(), size, 0)
            assert int(rc) == 0, f"cudaHostRegister: {rc}"
        host[: n * chunk] = torch.randint(0, 256, (n * chunk,), dtype=torch.uint8)
        with kvstream.Client.attach(sock, arena_bytes=1 << 20) as c:
            region = c.add_region(fd, size, device_pinned=True)
            put = c.persist([kvstream.Chunk(f"g{i}", i * chunk, chunk, region) for i in range(n)])
            assert all(r.ok for r in put), [r for r in put if not r.ok][:2]
            for rnd in range(3):
                host[dst: dst + n * chunk] = 0
                before = sum(t.bounce_reads for t in c.stats().tiers)
                t0 = time.perf_counter()
                results, rec = c.retrieve([(f"g{i}", dst + i * chunk, chunk, region) for i in range(n)])
                took = time.perf_counter() - t0
                assert all(r.ok for r in results), [r for r in results if not r.ok][:2]
                bounced = sum(t.bounce_reads for t in c.stats().tiers) - before
                line = (f"round {rnd}: retrieved {n} x {chunk >> 20} MiB into the pinned pool in {took:.3f} s "
                        f"({n * chunk / took / 1e9:.2f} GB/s), {bounced} blocks through bounce buffers")
                if gpu:
                    t1 = time.perf_counter()
                    got = host[dst: dst + n * chunk].to("cuda", non_blocking=True)
                    torch.cuda.synchronize()
                    h2d = time.perf_counter() - t1
                    want = host[: n * chunk].to("cuda")
                    same = bool(torch.equal(got, want))
                    line += f"; H2D {n * chunk / h2d / 1e9:.1f} GB/s; on the GPU byte-identical: {same}"
                    assert same
                else:
                    assert bytes(pool[dst: dst + n * chunk]) == bytes(pool[: n * chunk])
                assert bounced > 0
                print(line, flush=True)
            c.remove_region(region)
        if gpu:
            torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
        del host
        pool.close()
        print("gpu_check_pinned: OK")
    finally:
        os.close(fd)
        os.unlink(path)
        d.terminate()
        d.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Batches of vLLM transfer jobs: one step's loads (or stores) as one list of chunks, each chunk
knowing its job, so that one daemon call serves the step and results go back per job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Set

from vllm.v1.kv_offload.base import OffloadKey
from vllm.v1.kv_offload.tiering.base import TransferJob


@dataclass
class Batch:
    """One step's loads (or stores): the jobs, in order, and for each chunk its job and key."""

    jobs: List[TransferJob]
    keys: List[OffloadKey]
    rows: List[int]
    owners: List[int]  # index into jobs, per chunk
    depths: List[int] = field(default_factory=list)  # per chunk: its index in its request's prefix
    dropped: Set[int] = field(default_factory=set)  # chunks a store's daemon dropped (staging full)


def depth(job: TransferJob, key: OffloadKey, index: int, tokens_per_chunk: int) -> int:
    """The chunk index of `key` in its request's prefix: from the end token the scheduler recorded
    for it (ReqContext), else its index in the job."""
    context = getattr(job, "req_context", None)
    position = context.get_offload_key_position(key) if context is not None and tokens_per_chunk > 0 else None
    if position is None:
        return index
    return max(0, -(-position // tokens_per_chunk) - 1)


def batch_of(jobs: List[TransferJob], tokens_per_chunk: int = 0) -> Batch:
    keys: List[OffloadKey] = []
    rows: List[int] = []
    owners: List[int] = []
    depths: List[int] = []
    for j, job in enumerate(jobs):
        job_keys = list(job.keys)
        if len(job_keys) != len(job.chunk_ids):
            raise ValueError(f"vLLM job {job.job_id} has {len(job_keys)} keys and {len(job.chunk_ids)} chunk ids")
        keys += job_keys
        rows += [int(c) for c in job.chunk_ids]
        owners += [j] * len(job_keys)
        depths += [depth(job, k, i, tokens_per_chunk) for i, k in enumerate(job_keys)]
    return Batch(jobs, keys, rows, owners, depths)


def batch_of_failed(jobs: List[TransferJob]) -> Batch:
    """A batch for jobs that could not even be batched: one owner entry per key."""
    owners = [j for j, job in enumerate(jobs) for _ in job.keys]
    return Batch(jobs, [k for job in jobs for k in job.keys], [0] * len(owners), owners)

"""Batches of vLLM transfer jobs: one step's loads (or stores) as one list of chunks, each chunk
knowing its job, so that one daemon call serves the step and results go back per job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import List

from vllm.v1.kv_offload.base import OffloadKey
from vllm.v1.kv_offload.tiering.base import TransferJob


@dataclass
class Batch:
    """One step's loads (or stores): the jobs, in order, and for each chunk its job and key."""

    jobs: List[TransferJob]
    keys: List[OffloadKey]
    rows: List[int]
    owners: List[int]  # index into jobs, per chunk


def batch_of(jobs: List[TransferJob]) -> Batch:
    keys: List[OffloadKey] = []
    rows: List[int] = []
    owners: List[int] = []
    for j, job in enumerate(jobs):
        job_keys = list(job.keys)
        if len(job_keys) != len(job.chunk_ids):
            raise ValueError(f"vLLM job {job.job_id} has {len(job_keys)} keys and {len(job.chunk_ids)} chunk ids")
        keys += job_keys
        rows += [int(c) for c in job.chunk_ids]
        owners += [j] * len(job_keys)
    return Batch(jobs, keys, rows, owners)


def batch_of_failed(jobs: List[TransferJob]) -> Batch:
    """A batch for jobs that could not even be batched: one owner entry per key."""
    owners = [j for j, job in enumerate(jobs) for _ in job.keys]
    return Batch(jobs, [k for job in jobs for k in job.keys], [0] * len(owners), owners)

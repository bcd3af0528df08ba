"""The Retrieve and Persist streams of a session, read into results (Client.retrieve / persist_async).

A retrieve's events are ChunkDone completions (one at a time, or a batch of those that landed while
the daemon wrote an earlier event) and a step record; a persist's are STAGED and WRITTEN per chunk.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any, Callable, List, NamedTuple, Optional, TypeVar

import grpc

from . import _convert
from ._proto import pb
from .errors import Code, KVStreamError, from_rpc_error
from .types import ChunkResult, PersistResult, StepRecord

T = TypeVar("T")


class RetrieveResult(NamedTuple):
    """A finished retrieve: one ChunkResult per requested chunk (request order) and the step record."""

    results: List[ChunkResult]
    step: StepRecord


class PersistError(KVStreamError):
    """Some chunks of a persist were not written: the first failure, with every `results`."""

    def __init__(self, first: PersistResult, results: List[PersistResult]) -> None:
        failed = sum(not r.ok for r in results)
        super().__init__(first.code, f"{failed} of {len(results)} chunks not written; chunk {first.index}: {first.message}")
        self.results = results


def spawn(name: str, fn: Callable[[], T]) -> "concurrent.futures.Future[T]":
    """Runs `fn` on a new daemon thread; its outcome lands in the returned future."""
    future: "concurrent.futures.Future[T]" = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(fn())
        except BaseException as e:  # noqa: BLE001 - handed to the future's owner
            future.set_exception(e)

    threading.Thread(target=run, name=name, daemon=True).start()
    return future


def retrieve_results(call: Any, n: int, on_chunk: Optional[Callable[[ChunkResult], None]],
                     socket_path: str) -> RetrieveResult:
    """Reads a Retrieve stream of `n` chunks to its end (see Client.retrieve)."""
    results: List[Optional[ChunkResult]] = [None] * n
    step: Optional[StepRecord] = None
    try:
        for event in call:
            kind = event.WhichOneof("kind")
            if kind == "chunk" or kind == "batch":
                # A batch: chunks that landed while the daemon wrote an earlier event.
                for done in (event.chunk,) if kind == "chunk" else event.batch.chunks:
                    r = _convert.chunk_result(done)
                    if r.index < n:
                        results[r.index] = r
                    if on_chunk is not None:
                        on_chunk(r)
            elif kind == "step":
                step = _convert.step_record(event.step)
    except grpc.RpcError as e:
        raise from_rpc_error(e, socket_path, "retrieve") from None
    except BaseException:
        call.cancel()
        raise
    if step is None:
        raise KVStreamError(Code.DATA_LOSS, "kvstreamd ended the retrieve without a step record")
    filled = [
        r if r is not None else ChunkResult(i, Code.DATA_LOSS, "kvstreamd sent no completion for this chunk")
        for i, r in enumerate(results)
    ]
    return RetrieveResult(filled, step)


def persist_results(call: Any, n: int, on_written: Optional[Callable[[PersistResult], None]], check: bool,
                    socket_path: str, on_staged: Optional[Callable[[PersistResult], None]] = None,
                    ) -> "concurrent.futures.Future[List[PersistResult]]":
    """Reads a Persist stream of `n` chunks on a background thread; returns once every chunk is
    STAGED, with the future of the results (see Client.persist_async)."""
    staged = threading.Event()
    all_staged = [False]

    def run() -> List[PersistResult]:
        results: List[Optional[PersistResult]] = [None] * n
        staged_count = 0
        try:
            for event in call:
                if event.stage == pb.PersistEvent.STAGED:
                    if on_staged is not None and event.index < n:
                        on_staged(PersistResult(event.index, Code.of(event.code), event.message, 0, 0))
                    staged_count += 1
                    if staged_count == n:
                        all_staged[0] = True
                        staged.set()
                elif event.stage == pb.PersistEvent.WRITTEN and event.index < n:
                    r = PersistResult(event.index, Code.of(event.code), event.message, event.tier_mask,
                                      event.lost_mask, event.synced_mask)
                    results[event.index] = r
                    if on_written is not None:
                        on_written(r)
        except grpc.RpcError as e:
            raise from_rpc_error(e, socket_path, "persist") from None
        finally:
            staged.set()
        filled = [
            r if r is not None else PersistResult(i, Code.DATA_LOSS, "kvstreamd did not say whether this chunk was written")
            for i, r in enumerate(results)
        ]
        failed = next((r for r in filled if not r.ok), None)
        if check and failed is not None:
            raise PersistError(failed, filled)
        return filled

    future = spawn("kvstream-persist", run)
    staged.wait()
    if not all_staged[0]:  # refused as a whole, or the daemon went away: the stream is over
        error = future.exception()
        if error is not None:
            raise error
    return future

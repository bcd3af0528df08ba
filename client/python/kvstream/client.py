"""kvstream.Client: one tensor-parallel rank's connection to kvstreamd (mirrors include/kvstream/client.h).

Attaching opens a session (a gRPC stream that lives as long as the Client) with a shared-memory
arena that both sides map; retrieves land in the arena and persists are copied from it, addressed
by (key, offset, length). Data never travels through gRPC.
"""

from __future__ import annotations

import concurrent.futures
import os
import socket
import threading
import weakref
from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import grpc

from . import _convert, _session, _streams
from ._convert import ChunkLike
from ._proto import pb, pb_grpc
from ._session import OP_ADD_PINNED_REGION, OP_ADD_REGION, OP_REMOVE_REGION, Arena, receive_arena_fd, region_request
from .errors import Code, KVStreamError, Unavailable, from_rpc_error
from ._streams import PersistError, RetrieveResult, spawn  # noqa: F401 - PersistError: kvstream.client.PersistError
from .types import ChunkResult, EvictResult, Health, LookupEntry, PersistResult, Policies, Stats, StepRecord

CONNECT_TIMEOUT_S = 2.0  # how long connect/attach wait for the daemon to answer
RPC_TIMEOUT_S = 30.0  # deadline of the unary calls (lookup, stats, ...)
CLOSE_TIMEOUT_S = 2.0  # how long close() waits for the daemon to end the session stream
# The keys one lookup or unlock, and the chunks one retrieve or persist, may name by default
# (sessions.max_lookup_keys, max_chunks_per_call); a daemon refuses more with INVALID_ARGUMENT. A
# session learns its daemon's own chunk limit at attach (Client.max_chunks_per_call).
MAX_KEYS_PER_CALL = 16384


class _SessionRequests:
    """The Session stream's requests: the attach, then nothing until close() ends the stream (WritesDone)."""

    def __init__(self, attach: Any) -> None:
        self._attach = attach
        self._done = threading.Event()

    def end(self) -> None:
        self._done.set()

    def __iter__(self) -> Iterator[Any]:
        yield self._attach
        self._done.wait()


class Client:
    """A connection to kvstreamd, with a session (Client.attach) or without (Client.connect).

    Thread-safe: calls may be issued from several threads at once (retrieves of one session share
    the daemon's step pool). Use as a context manager, or call close(), to end the session.
    """

    def __init__(self, socket_path: str, channel: grpc.Channel, rpc_timeout: Optional[float]) -> None:
        """Internal: use Client.attach or Client.connect."""
        self._socket_path = socket_path
        self._channel = channel
        self._stub = pb_grpc.KVStreamStub(channel)
        self._rpc_timeout = rpc_timeout
        self._session_call: Optional[Any] = None
        self._session_requests: Optional[_SessionRequests] = None
        self._arena: Optional[Arena] = None
        self._session_id = 0
        self._max_chunks_per_call = MAX_KEYS_PER_CALL
        self._token = b""
        self._data_socket = ""
        self._closed = False
        self._session_ended = threading.Event()
        self._lock = threading.Lock()
        # Who this process is, proven on the data socket; kept open while the token is used. A
        # daemon that cannot say leaves the calls anonymous (refused only under isolation: uid).
        self._identity: Optional[socket.socket] = None
        self._metadata: tuple[tuple[str, str], ...] = ()
        try:
            self._identity, token = _session.identify(socket_path + ".data")
            self._metadata = ((_session.CALLER_METADATA, token),)
        except KVStreamError:
            pass

    # -- construction -------------------------------------------------------------------------

    @classmethod
    def connect(
        cls, socket_path: str, timeout: float = CONNECT_TIMEOUT_S, rpc_timeout: Optional[float] = RPC_TIMEOUT_S
    ) -> "Client":
        """A connection without a session (no arena): lookup, stats, steps, evict, set_policies, health.

        Raises Unavailable (naming the socket) within `timeout` seconds when no daemon answers.
        """
        path = os.path.abspath(socket_path)
        if not os.path.exists(path):
            raise Unavailable(f"no kvstreamd socket at {path} (is kvstreamd running?)")
        # gRPC would keep retrying a socket nobody listens on (a daemon that died) for the whole
        # timeout; a plain connect says so at once.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError as e:
            raise Unavailable(f"no kvstreamd listens on {path} ({e.strerror or e})") from None
        finally:
            probe.close()
        # No receive limit: a refusal code raised on this side mid-stream (a message over the limit)
        # would read as kvstreamd's refusal, which comes before any I/O (DaemonLink.call's rule).
        channel = grpc.insecure_channel("unix:" + path, options=[("grpc.enable_http_proxy", 0),
                                                                 ("grpc.max_receive_message_length", -1)])
        try:
            grpc.channel_ready_future(channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            channel.close()
            raise Unavailable(f"no kvstreamd answers on {path} (waited {timeout:g} s)") from None
        return cls(path, channel, rpc_timeout)

    @classmethod
    def attach(
        cls,
        socket_path: str,
        model: str = "",
        rank: int = 0,
        world_size: int = 1,
        arena_bytes: int = 256 << 20,
        timeout: float = CONNECT_TIMEOUT_S,
        rpc_timeout: Optional[float] = RPC_TIMEOUT_S,
    ) -> "Client":
        """Attaches a session for tensor-parallel `rank` of `world_size` with an arena of at least
        `arena_bytes` (rounded up to a page by the daemon; see `arena_size`).

        Raises Unavailable when no daemon answers within `timeout`, KVStreamError when the daemon
        refuses the session (e.g. INVALID_ARGUMENT: arena above sessions.max_arena, bad rank).
        """
        client = cls.connect(socket_path, timeout=timeout, rpc_timeout=rpc_timeout)
        try:
            client._attach(model, rank, world_size, arena_bytes, timeout)
        except BaseException:
            client.close()
            raise
        return client

    def _attach(self, model: str, rank: int, world_size: int, arena_bytes: int, timeout: float) -> None:
        attach = pb.SessionRequest(
            attach=pb.SessionRequest.Attach(model=model, rank=rank, world_size=world_size, arena_bytes=arena_bytes)
        )
        self._session_requests = _SessionRequests(attach)
        call = self._stub.Session(iter(self._session_requests), metadata=self._metadata)
        self._session_call = call
        # The daemon answers an attach at once; a silent one must not hang us.
        timer = threading.Timer(timeout, call.cancel)
        timer.daemon = True
        timer.start()
        try:
            event = next(call)
        except StopIteration:
            raise Unavailable(f"kvstreamd on {self._socket_path} closed the session stream before attaching") from None
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED and not timer.is_alive():
                raise Unavailable(f"kvstreamd on {self._socket_path} did not answer the attach within {timeout:g} s") from None
            raise from_rpc_error(e, self._socket_path, "attach") from None
        finally:
            timer.cancel()
        if event.WhichOneof("kind") != "attached":
            raise KVStreamError(Code.INTERNAL, "kvstreamd answered the attach with an unexpected event")
        attached = event.attached
        self._session_id = attached.session_id
        self._token = bytes(attached.token)
        self._max_chunks_per_call = attached.max_chunks_per_call or MAX_KEYS_PER_CALL
        # Next to the control socket as this process reaches it: the daemon's own path for it
        # (attached.data_socket) may lie in another mount namespace (a daemon in a container).
        # Where there is none (the socket reached through a link to it alone), the daemon's path.
        self._data_socket = os.path.abspath(self._socket_path + ".data")
        if not os.path.exists(self._data_socket):
            self._data_socket = attached.data_socket
        self._arena = Arena(receive_arena_fd(self._data_socket, self._token))
        # The stream ends when the daemon ends the session (it stopped, restarted or dropped us).
        call.add_done_callback(lambda _call: self._session_ended.set())
        # A Client dropped without close() still ends its session.
        weakref.finalize(self, self._session_requests.end)

    # -- session ------------------------------------------------------------------------------

    @property
    def socket_path(self) -> str:
        return self._socket_path

    @property
    def session_id(self) -> int:
        """The session's id (0 without a session)."""
        return self._session_id

    @property
    def max_chunks_per_call(self) -> int:
        """The most chunks one retrieve or persist may name on this daemon (its
        sessions.max_chunks_per_call, told at attach)."""
        return self._max_chunks_per_call

    @property
    def session_alive(self) -> bool:
        """False once the session stream has ended (daemon stopped or restarted, or close())."""
        return self._session_call is not None and not self._session_ended.is_set() and not self._closed

    @property
    def arena(self) -> memoryview:
        """The session arena, a writable zero-copy memoryview (bytes-like; numpy/torch.frombuffer work)."""
        return self._need_session("arena").view

    @property
    def arena_size(self) -> int:
        """Bytes in the arena (0 without a session)."""
        return self._arena.size if self._arena is not None else 0

    def add_region(self, fd: int, size: int, device_pinned: bool = False) -> int:
        """Hands the daemon `size` bytes of shared memory of the caller's own as a client region of
        this session and returns its id, for Chunk.region: chunks are then retrieved into and
        persisted from memory the caller already uses (a shared-memory KV pool, say). `fd`: a memfd
        or a /dev/shm (or hugetlbfs) file open read-write, at least `size` bytes long; the caller
        keeps its descriptor. A file that is not a memfd sealed against shrinking may be truncated
        at any time: chunks in flight into the part that went away fail (FAILED_PRECONDITION), and
        nothing else does. Counts against the node's arena budget; at most 64 per session.
        `device_pinned`: a device reads this memory too (cudaHostRegister, e.g. an engine's pinned
        host pool): the daemon never replaces its pages under a stalled read, and reads into it land
        through the daemon's bounce buffers (one copy there) instead of straight by O_DIRECT."""
        self._need_session("add_region")
        op = OP_ADD_PINNED_REGION if device_pinned else OP_ADD_REGION
        return region_request(self._data_socket, self._token, op, int(size), fd=fd)

    def remove_region(self, region: int) -> None:
        """The daemon forgets the region; retrievals and persists in flight into it finish first."""
        self._need_session("remove_region")
        region_request(self._data_socket, self._token, OP_REMOVE_REGION, int(region))

    def close(self) -> None:
        """Ends the session stream (reads in flight finish into the arena on the daemon's side, then it
        is freed), unmaps the arena and closes the channel. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        call, requests = self._session_call, self._session_requests
        if requests is not None:
            requests.end()  # WritesDone: detach
        if call is not None:
            timer = threading.Timer(CLOSE_TIMEOUT_S, call.cancel)
            timer.daemon = True
            timer.start()
            try:
                for _ in call:  # until the daemon ends the stream
                    pass
            except grpc.RpcError:
                pass  # cancelled, or the daemon is gone: the session is over either way
            finally:
                timer.cancel()
        if self._arena is not None:
            self._arena.close()
        if self._identity is not None:
            self._identity.close()
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- data path ----------------------------------------------------------------------------

    def lookup(self, keys: Sequence[str], lock_seconds: float = 0,
               estimate_load: bool = False) -> Tuple[List[LookupEntry], int]:
        """Presence of each key (request order) and the prefix hit count (leading keys present).

        With `lock_seconds` > 0 (at most 3600), each key present is also locked against capacity
        eviction until `unlock` or for that long, whichever ends first; locks count. A lock that
        would take the caller's uid past sessions.locked_bytes_per_uid is not taken:
        `LookupEntry.locked` says which keys were locked.

        With `estimate_load`, each entry's `load_seconds` is the daemon's load estimate: the
        seconds, from now, to read that key's chunk and every present key before it in this
        request (cumulative, so a caller may cut its hit anywhere); +inf when only stalled or
        unreachable tiers hold one of them; NaN when it has no estimate yet. A daemon without the
        estimate answers 0.0."""
        request = pb.LookupRequest(keys=[_convert.key_bytes(k) for k in keys], lock_seconds=lock_seconds,
                                   estimate_load=estimate_load)
        reply = self._unary(self._stub.Lookup, request, "lookup")
        entries = [LookupEntry(e.present, e.size, e.tier_mask, e.locked, e.load_seconds) for e in reply.entries]
        return entries, reply.prefix_hits

    def unlock(self, keys: Sequence[str]) -> int:
        """Releases one lock of each key (see lookup); returns how many held one."""
        reply = self._unary(self._stub.Unlock, pb.UnlockRequest(keys=[_convert.key_bytes(k) for k in keys]), "unlock")
        return reply.unlocked

    def retrieve(
        self,
        chunks: Sequence[ChunkLike],
        on_chunk: Optional[Callable[[ChunkResult], None]] = None,
        timeout: Optional[float] = None,
    ) -> RetrieveResult:
        """Reads one step's chunks, each (key, offset, length), into the arena.

        `on_chunk` fires once per chunk, on the calling thread, as soon as it has landed (copy it out
        while the others are still in flight). Per-chunk outcomes (OK, NOT_FOUND for a miss,
        DATA_LOSS, ...) are in the results; a bad request as a whole (range outside the arena:
        OUT_OF_RANGE, malformed key: INVALID_ARGUMENT) raises KVStreamError. If `on_chunk` raises,
        the call is cancelled and the exception propagates.
        """
        request = self._data_request(pb.RetrieveRequest, chunks, "retrieve")
        call = self._stub.Retrieve(request, timeout=timeout, metadata=self._metadata)
        return _streams.retrieve_results(call, len(request.chunks), on_chunk, self._socket_path)

    def retrieve_async(
        self,
        chunks: Sequence[ChunkLike],
        on_chunk: Optional[Callable[[ChunkResult], None]] = None,
        timeout: Optional[float] = None,
    ) -> "concurrent.futures.Future[RetrieveResult]":
        """retrieve() on a background thread: returns at once with a future of the RetrieveResult.

        `on_chunk` runs on that thread. The request is validated by the daemon, so a bad one
        surfaces as the future's exception.
        """
        self._need_session("retrieve")
        chunks = list(chunks)
        return spawn("kvstream-retrieve", lambda: self.retrieve(chunks, on_chunk, timeout))

    def persist(
        self, chunks: Sequence[ChunkLike], check: bool = True, timeout: Optional[float] = None
    ) -> List[PersistResult]:
        """Stores each (key, offset, length) range of the arena and waits until every chunk is written
        to its tiers (or failed). Results are in request order; each one's `durable` says whether the
        daemon synced it (fsync: chunk) so that a power cut does not lose it. With `check`, raises
        PersistError if any chunk failed; gRPC-level failures always raise KVStreamError."""
        return self.persist_async(chunks, check=check, timeout=timeout).result()

    def persist_async(
        self,
        chunks: Sequence[ChunkLike],
        on_written: Optional[Callable[[PersistResult], None]] = None,
        check: bool = True,
        timeout: Optional[float] = None,
        on_staged: Optional[Callable[[PersistResult], None]] = None,
    ) -> "concurrent.futures.Future[List[PersistResult]]":
        """Stages the chunks and returns once every one is STAGED (copied out of the arena: the
        ranges may be reused now), with a future of the results once each is WRITTEN (to its
        tiers; PersistResult.durable: synced too).

        Blocks while the daemon's staging is full. `on_written` fires per chunk on a background
        thread; `on_staged` too, once per chunk, each call before this returns (a chunk staged with
        an error was never staged: its WRITTEN result carries the same error). A request refused as
        a whole (e.g. OUT_OF_RANGE) raises here.
        """
        request = self._data_request(pb.PersistRequest, chunks, "persist")
        call = self._stub.Persist(request, timeout=timeout, metadata=self._metadata)
        return _streams.persist_results(call, len(request.chunks), on_written, check, self._socket_path, on_staged)

    # -- control ------------------------------------------------------------------------------

    def stats(self) -> Stats:
        """Counters of the store, per tier, the staging state, sessions and policies in force."""
        return _convert.stats(self._unary(self._stub.Stats, pb.StatsRequest(), "stats"))

    def steps(self, max: int = 32) -> List[StepRecord]:  # noqa: A002 - mirrors the proto field
        """The `max` most recent step records, oldest first (0: the daemon's default, 32)."""
        reply = self._unary(self._stub.Steps, pb.StepsRequest(max=max), "steps")
        return [_convert.step_record(s) for s in reply.steps]

    def evict(
        self,
        key: str = "",
        tier: str = "",
        bytes: int = 0,  # noqa: A002 - mirrors the proto field
        all: bool = False,  # noqa: A002 - mirrors the proto field
    ) -> EvictResult:
        """Evicts `key` (from `tier`, or every tier); with no key, chunks until `bytes` per tier are
        freed (least recently used first; under isolation uid, from the tenant furthest over its
        share first), or everything with `all`."""
        request = pb.EvictRequest(key=_convert.key_bytes(key), tier=tier, bytes=bytes, all=all)
        reply = self._unary(self._stub.Evict, request, "evict")
        return EvictResult(reply.replicas, reply.bytes)

    def set_policies(self, routing: str = "", batching: str = "", writes: str = "", replication: str = "") -> Policies:
        """Asks for new policies (empty keeps the current value); returns those in force on return:
        the requested ones, or the old ones with `pending` set while steps are pending (the new
        ones apply once those finish). `replication` (all | primary | adaptive) applies to chunks
        staged from then on."""
        request = pb.Policies(routing=routing, batching=batching, writes=writes, replication=replication)
        return _convert.policies(self._unary(self._stub.SetPolicies, request, "set_policies"))

    def health(self) -> Health:
        return _convert.health(self._unary(self._stub.Health, pb.HealthRequest(), "health"))

    # -- helpers ------------------------------------------------------------------------------

    def _need_session(self, what: str) -> Arena:
        if self._arena is None:
            raise KVStreamError(Code.FAILED_PRECONDITION, f"{what} needs an attached session (Client.attach)")
        if self._closed:
            raise KVStreamError(Code.FAILED_PRECONDITION, f"{what}: the session is closed")
        return self._arena

    def _data_request(self, cls: Any, chunks: Iterable[ChunkLike], what: str) -> Any:
        self._need_session(what)
        return cls(session_id=self._session_id, token=self._token, chunks=_convert.chunks_to_proto(chunks))

    def _unary(self, method: Any, request: Any, what: str) -> Any:
        try:
            return method(request, timeout=self._rpc_timeout, metadata=self._metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e, self._socket_path, what) from None

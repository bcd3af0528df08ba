"""The failure classification of tests/python/test_failure_classification.py, through the SGLang
HiCache backend (SGLang's factory, its shared-memory host pool: zero copy): a call the daemon
refuses fails that call and keeps the session; the daemon dying inside a retrieve drops the
session, and a daemon started again serves SGLang again. The cases themselves are
tests/python/conftest.py's check_a_refused_call and check_a_kill_inside_a_retrieve."""

from __future__ import annotations

from typing import Any, List

import torch
from conftest import (EXTRA_INFO, MAX_LOOKUP_KEYS, PAGE, READS_WAIT_FOR_A_HUNG_TIER, SESSIONS_WITH_A_LOOKUP_LIMIT,
                      Daemon, check_a_kill_inside_a_retrieve, check_a_refused_call, daemon_on_faultfs, fill,
                      host_pool, make_backend, page_keys)


class SGLangHiCache:
    """KVStreamHiCache on SGLang's page_first host pool: a page is two pieces (its K and its V),
    one daemon key each, so a lookup of `chunks` pages names MAX_LOOKUP_KEYS keys."""

    chunks = MAX_LOOKUP_KEYS // 2

    def __init__(self, daemon: Daemon) -> None:
        _, self.host = host_pool("page_first", "shm")
        self.backend = make_backend(daemon, self.host)
        self.keys = page_keys(self.chunks, "fc")
        self.src = self.host.alloc(self.chunks * PAGE)

    def store(self) -> List[str]:
        fill(self.host, self.src, 70)
        assert self.backend.batch_set_v1(self.keys, self.src, EXTRA_INFO) == [True] * self.chunks
        return [f"{self.backend.prefix}/{key}/{piece}" for key in self.keys for piece in (0, 1)]

    def hits(self, more: bool = False) -> int:
        return self.backend.batch_exists(self.keys + (page_keys(1, "fu") if more else []), EXTRA_INFO)

    def read(self) -> List[bool]:
        dst = self.host.alloc(self.chunks * PAGE)
        try:
            landed = self.backend.batch_get_v1(self.keys, dst, EXTRA_INFO)
            return [hit and torch.equal(self.host.get_data_page(int(self.src[i * PAGE])),
                                        self.host.get_data_page(int(dst[i * PAGE])))
                    for i, hit in enumerate(landed)]
        finally:
            self.host.free(dst)

    def sessions(self) -> tuple:
        return (self.backend.link.session(),)

    def connected(self) -> bool:
        return self.backend.link.connected

    def close(self) -> None:
        self.backend.close()


def drive(daemon: Daemon, case: Any, *args: Any) -> None:
    driver = SGLangHiCache(daemon)
    try:
        case(driver, *args)
    finally:
        driver.close()


def test_a_refused_call_is_a_miss_and_keeps_the_session(state_dir):
    daemon = Daemon(state_dir, sessions=SESSIONS_WITH_A_LOOKUP_LIMIT)
    daemon.start()
    try:
        drive(daemon, check_a_refused_call)
    finally:
        daemon.stop()


def test_a_daemon_killed_inside_a_retrieve_misses_drops_the_session_then_serves_again(state_dir):
    with daemon_on_faultfs(state_dir, READS_WAIT_FOR_A_HUNG_TIER) as (daemon, rules):
        drive(daemon, check_a_kill_inside_a_retrieve, daemon, rules)

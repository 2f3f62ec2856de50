"""Fake peers for the conformance runner's tests: one that accepts everything, one that crashes the
worker process with SIGSEGV, one that hangs. Loaded in worker processes as ``module:Class``."""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

import torch

from grammask.conformance.peers import Peer, PeerMatcher


class _AcceptAll(PeerMatcher):
    def __init__(self, eos_ids: tuple[int, ...]) -> None:
        self._eos_ids = eos_ids
        self._done = False

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, row: int = 0) -> None:
        bitmask[row] = -1

    def accept_token(self, token_id: int) -> bool:
        if self._done:
            return False
        self._done = token_id in self._eos_ids
        return True

    def is_terminated(self) -> bool:
        return self._done


class AcceptAllPeer(Peer):
    name = "accept-all"

    def compile(self, spec) -> Callable[[], PeerMatcher]:
        return lambda: _AcceptAll(self.tokenizer_info.eos_ids)


class CrashingPeer(Peer):
    """Kills its own process with SIGSEGV, as a segfault in native code would."""

    name = "crashing"

    def compile(self, spec) -> Callable[[], PeerMatcher]:
        os.kill(os.getpid(), signal.SIGSEGV)
        raise AssertionError("unreachable")


class HangingPeer(Peer):
    name = "hanging"

    def compile(self, spec) -> Callable[[], PeerMatcher]:
        time.sleep(3600)
        raise AssertionError("unreachable")

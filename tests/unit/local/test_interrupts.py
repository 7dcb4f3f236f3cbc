"""The local stack's stop signals: at once outside a client call, after it inside one (a
KeyboardInterrupt inside a gRPC stream left the process hanging at exit)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from services.local.interrupts import STOP_SIGNALS, InterruptGate


@pytest.fixture
def gate() -> Iterator[InterruptGate]:
    previous = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    gate = InterruptGate()
    gate.install()
    try:
        yield gate
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=["sigint", "sigterm"])
def test_a_stop_signal_outside_a_call_interrupts_at_once(
    gate: InterruptGate, signum: signal.Signals
) -> None:
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signum)  # the handler runs as os.kill returns


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=["sigint", "sigterm"])
def test_a_stop_signal_inside_a_call_waits_for_its_end(
    gate: InterruptGate, signum: signal.Signals
) -> None:
    finished = []
    with pytest.raises(KeyboardInterrupt), gate.shielded():
        os.kill(os.getpid(), signum)
        with gate.shielded():  # nested: raised only when the outermost block ends
            finished.append("inner")
        finished.append("outer")
    assert finished == ["inner", "outer"]
    with gate.shielded():  # and only once
        finished.append("next")
    assert finished[-1] == "next"


def test_a_call_with_no_signal_raises_nothing(gate: InterruptGate) -> None:
    with gate.shielded():
        pass

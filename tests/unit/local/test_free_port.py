"""Free ports for the local stack come from below the kernel's ephemeral range, where no
outgoing connection (nor any port-0 listener) can take them between the probe and the bind."""

from __future__ import annotations

import socket

import pytest

from emulators import launcher


def test_a_free_port_is_below_the_ephemeral_range_and_can_be_bound() -> None:
    floor = launcher._ephemeral_floor()
    if floor <= launcher._LOWEST_PICK:
        pytest.skip(f"this kernel's ephemeral range starts at {floor}: nothing to pick below it")
    ports = {launcher.free_port("127.0.0.1") for _ in range(20)}
    assert all(launcher._LOWEST_PICK <= port < floor for port in ports)
    for port in ports:
        with socket.socket() as server:
            server.bind(("127.0.0.1", port))


def test_a_port_taken_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        taken = holder.getsockname()[1]
        # Only the taken port is offered first; the pick must move on.
        offers = iter([taken, taken, taken])

        class Offer:
            def randrange(self, low: int, high: int) -> int:
                return next(offers, low)

        monkeypatch.setattr(launcher.random, "SystemRandom", Offer)
        monkeypatch.setattr(launcher, "_ephemeral_floor", lambda: max(taken + 1, 20_000))
        assert launcher.free_port("127.0.0.1") != taken

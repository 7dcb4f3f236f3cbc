"""The admin surface: stats, reset and fault injection, in Python and over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from google.api_core import exceptions
from google.pubsub_v1 import types

from emulators.pubsub.exceptions import PortInUse
from emulators.pubsub.server import PubsubEmulator, start


@pytest.fixture
def own_emulator(oidc_server: Any) -> Iterator[PubsubEmulator]:
    """A private emulator, so counters and faults belong to this test alone."""
    with start(issuer=oidc_server.issuer) as emulator:
        yield emulator


@pytest.fixture
def own_publisher(own_emulator: PubsubEmulator) -> Iterator[Any]:
    import grpc
    from google.pubsub_v1.services.publisher import PublisherClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    channel = grpc.insecure_channel(own_emulator.address)
    yield PublisherClient(transport=PublisherGrpcTransport(channel=channel))
    channel.close()


def _publish(client: Any, topic: str) -> Any:
    message = types.PubsubMessage(data=b"x")
    return client.publish(topic=topic, messages=[message], retry=None, timeout=10)


def test_injected_publish_faults_fail_exactly_count_calls(
    own_emulator: PubsubEmulator, own_publisher: Any
) -> None:
    topic = "projects/admin-p/topics/faulty"
    own_publisher.create_topic(name=topic)
    own_emulator.inject_fault(method="Publish", status="UNAVAILABLE", count=2)

    outcomes = []
    for _ in range(3):
        try:
            _publish(own_publisher, topic)
            outcomes.append("ok")
        except exceptions.ServiceUnavailable:
            outcomes.append("unavailable")

    assert outcomes == ["unavailable", "unavailable", "ok"]
    assert own_emulator.stats()["published"] == 1


def test_admin_http_serves_stats_faults_reset_and_certs(
    own_emulator: PubsubEmulator, own_publisher: Any
) -> None:
    admin = own_emulator.admin_url
    topic = "projects/admin-p/topics/over-http"
    own_publisher.create_topic(name=topic)
    _publish(own_publisher, topic)

    stats = requests.get(f"{admin}/stats", timeout=5).json()
    added = requests.post(
        f"{admin}/faults", json={"method": "Publish", "status": "INTERNAL", "count": 1}, timeout=5
    )
    with pytest.raises(exceptions.InternalServerError):
        _publish(own_publisher, topic)
    bad_fault = requests.post(f"{admin}/faults", json={"method": "Publish"}, timeout=5)
    certs = requests.get(f"{admin}/oauth2/v1/certs", timeout=5).json()
    cleared = requests.delete(f"{admin}/stats", timeout=5)
    after_clear = requests.get(f"{admin}/stats", timeout=5).json()
    reset = requests.post(f"{admin}/reset", timeout=5)

    assert stats["published"] == 1
    assert set(stats) >= {
        "published",
        "delivered",
        "acknowledged",
        "nacked",
        "redelivered",
        "dead_lettered",
        "push_attempts_by_status",
    }
    assert added.status_code == 200
    assert bad_fault.status_code == 400
    assert certs == own_emulator.issuer.certs()
    assert cleared.status_code == 200
    assert after_clear["published"] == 0
    assert reset.status_code == 200
    with pytest.raises(exceptions.NotFound):
        own_publisher.get_topic(topic=topic, retry=None)


def test_injected_delay_slows_calls_without_failing_them(
    own_emulator: PubsubEmulator, own_publisher: Any
) -> None:
    topic = "projects/admin-p/topics/slow"
    own_publisher.create_topic(name=topic)
    requests.post(
        f"{own_emulator.admin_url}/faults",
        json={"method": "Publish", "delay_s": 0.05, "count": 2},
        timeout=5,
    )

    responses = [_publish(own_publisher, topic) for _ in range(3)]

    assert all(len(r.message_ids) == 1 for r in responses)
    assert requests.get(f"{own_emulator.admin_url}/faults", timeout=5).json() == {"faults": []}


def test_cli_exits_2_with_a_clear_error_when_the_port_is_taken() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "emulators.pubsub", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert result.returncode == 2
    assert "cannot listen" in result.stderr


def test_second_emulator_on_a_port_in_use_is_refused(own_emulator: PubsubEmulator) -> None:
    with pytest.raises(PortInUse):
        start(port=own_emulator.port, issuer=own_emulator.issuer)
    with pytest.raises(PortInUse):
        start(admin_port=own_emulator.admin_port, issuer=own_emulator.issuer)


def test_cli_serves_until_sigterm_then_exits_cleanly() -> None:
    with subprocess.Popen(
        [sys.executable, "-m", "emulators.pubsub", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stdout is not None
            banner = process.stdout.readline()
            process.terminate()
            out, _err = process.communicate(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()

    assert "listening on 127.0.0.1:" in banner
    assert "stopped" in out
    assert process.returncode == 0

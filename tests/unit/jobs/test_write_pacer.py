"""The WritePacer on a fake clock: counts per one-second window, never wall time."""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.clock import FakeClock
from services.jobs.write_pacer import RANGE_LIMIT_PER_S, WritePacer

START = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _pacer(ranges: int, **options: object) -> tuple[WritePacer, FakeClock]:
    """A pacer whose waits move its fake clock (no real time passes)."""
    clock = FakeClock(START)

    def sleep(seconds: float) -> None:
        clock.advance(timedelta(seconds=seconds))

    return WritePacer(clock, ranges, sleep=sleep, **options), clock  # type: ignore[arg-type]


def _drive(pacer: WritePacer, clock: FakeClock, batches: list[dict[int, int]]) -> list[datetime]:
    """Each batch taken as a producer loop would (no time passes between batches except the
    pacer's waits: the fastest producer); the clock time of each write."""
    times = []
    for batch in batches:
        pacer.take(batch)
        times.append(clock.now())
    return times


def _busiest_window(times: list[datetime], batches: list[dict[int, int]], key: int | None) -> int:
    """The most writes (on range `key`, or in all when None) in any one-second window
    [t, t + 1 s) starting at a write."""
    best = 0
    for i, start in enumerate(times):
        total = 0
        for at, batch in zip(times[i:], batches[i:], strict=True):
            if (at - start).total_seconds() >= 1.0:
                break
            total += sum(batch.values()) if key is None else batch.get(key, 0)
        best = max(best, total)
    return best


def _random_batches(ranges: int, jobs: int, size: int, seed: int = 7) -> list[dict[int, int]]:
    rng = random.Random(seed)
    batches = []
    for first in range(0, jobs, size):
        batches.append(dict(Counter(rng.randrange(ranges) for _ in range(min(size, jobs - first)))))
    return batches


def test_one_range_never_takes_more_than_its_rate_in_any_second() -> None:
    pacer, clock = _pacer(1)
    batches = [{0: pacer.max_batch()}] * 60
    times = _drive(pacer, clock, batches)
    assert _busiest_window(times, batches, 0) == 400
    # 60 batches of 100 at 400/s: four a second, the last 14 s after the first.
    assert (times[-1] - times[0]).total_seconds() == pytest.approx(14.0)


def test_a_new_import_starts_at_500_per_second_and_grows_50_percent_every_5_minutes() -> None:
    pacer, clock = _pacer(8)
    batches = _random_batches(8, 400_000, pacer.max_batch())
    times = _drive(pacer, clock, batches)
    per_second: Counter[int] = Counter()
    for at, batch in zip(times, batches, strict=True):
        per_second[int((at - START).total_seconds())] += sum(batch.values())
    for second, writes in per_second.items():
        allowed = min(500 * 1.5 ** (second // 300), 8 * 400)
        assert writes <= allowed, (second, writes, allowed)
    # The ramp is used, not just respected: the first 5 minutes run at its 500/s (within a
    # batch), the next at 750/s.
    first = sum(per_second[s] for s in range(300))
    second = sum(per_second[s] for s in range(300, 600))
    assert 300 * 500 - 100 <= first <= 300 * 500
    assert 300 * 700 <= second <= 300 * 750  # 7 batches of 100 fit under 750 a second
    for key in range(8):
        assert _busiest_window(times[-2000:], batches[-2000:], key) <= 400


def test_every_range_stays_under_firestores_limit_once_the_ramp_is_high() -> None:
    pacer, clock = _pacer(2)
    clock_start = clock.now()
    pacer.take({0: 1})  # the ramp starts at the first write
    clock.advance(timedelta(hours=1))  # long since at the ceiling (2 x 400)
    assert pacer.rate_at(clock.now()) == 800
    # A skewed producer: 9 of 10 jobs on range 0.
    batches = [{0: 90, 1: 10}] * 200
    times = _drive(pacer, clock, batches)
    assert _busiest_window(times, batches, 0) <= 400 < RANGE_LIMIT_PER_S
    assert clock.now() > clock_start


def test_a_batch_larger_than_one_second_allows_is_refused_with_the_limit() -> None:
    pacer, _ = _pacer(4)
    with pytest.raises(ValueError, match="max_batch 100"):
        pacer.take({0: 50, 1: 51})
    with pytest.raises(ValueError, match=r"range 4 is not one of 0\.\.3"):
        pacer.take({4: 1})


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"per_range_per_s": 501}, "per_range_per_s"),
        ({"per_range_per_s": 0}, "per_range_per_s"),
        ({"ramp_start_per_s": 600}, "ramp_start_per_s"),
    ],
)
def test_bad_settings_name_the_field(options: dict[str, int], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        WritePacer(FakeClock(START), 1, **options)  # type: ignore[arg-type]


def test_zero_ranges_is_refused() -> None:
    with pytest.raises(ValueError, match="ranges"):
        WritePacer(FakeClock(START), 0)


def test_a_clock_that_does_not_move_while_the_pacer_waits_is_an_error_not_a_hang() -> None:
    clock = FakeClock(START)
    pacer = WritePacer(clock, 1, sleep=lambda seconds: None)
    for _ in range(4):
        pacer.take({0: 100})
    with pytest.raises(RuntimeError, match="did not move"):
        pacer.take({0: 100})

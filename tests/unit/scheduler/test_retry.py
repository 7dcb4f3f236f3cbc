"""retryConfig: Google's ranges, defaults and doubling rule."""

from __future__ import annotations

import math

import pytest

from emulators.scheduler.retry import RetryConfig, RetryConfigError


def test_defaults_are_googles() -> None:
    config = RetryConfig()
    assert (config.retry_count, config.min_backoff_s, config.max_backoff_s) == (0, 5.0, 3600.0)
    assert (config.max_doublings, config.max_retry_duration_s) == (5, 0.0)


def test_the_documented_example_10s_300s_3_doublings() -> None:
    # "the requests will retry at 10s, 20s, 40s, 80s, 160s, 240s, 300s, 300s, ..."
    config = RetryConfig(retry_count=5, min_backoff_s=10, max_backoff_s=300, max_doublings=3)
    assert [config.backoff_s(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 240, 300, 300]


def test_no_doublings_grows_linearly_and_defaults_double_five_times() -> None:
    linear = RetryConfig(min_backoff_s=10, max_backoff_s=1000, max_doublings=0)
    assert [linear.backoff_s(n) for n in range(1, 5)] == [10, 20, 30, 40]
    default = RetryConfig()
    assert [default.backoff_s(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 320, 480]


def test_retry_numbers_start_at_one() -> None:
    with pytest.raises(ValueError, match="start at 1"):
        RetryConfig().backoff_s(0)


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"retry_count": 6}, "retryCount=6 must be a whole number 0-5"),
        ({"retry_count": -1}, "retryCount=-1"),
        ({"retry_count": 1.5}, "retryCount=1.5"),
        ({"max_doublings": -1}, "maxDoublings=-1"),
        ({"min_backoff_s": -1}, "minBackoffDuration=-1"),
        ({"max_backoff_s": math.inf}, "maxBackoffDuration=inf"),
        ({"max_retry_duration_s": math.nan}, "maxRetryDuration=nan"),
        ({"min_backoff_s": 20, "max_backoff_s": 10}, "must be at most maxBackoffDuration=10s"),
    ],
)
def test_values_outside_googles_ranges_are_refused_by_name(
    settings: dict[str, float], named: str
) -> None:
    with pytest.raises(RetryConfigError) as caught:
        RetryConfig(**settings)  # type: ignore[arg-type]
    assert named in str(caught.value)


def test_retry_count_alone_limits_retries_when_no_duration_is_set() -> None:
    config = RetryConfig(retry_count=2)
    assert [config.allows_retry(done, 10_000) for done in (0, 1, 2)] == [True, True, False]
    assert not RetryConfig().allows_retry(0, 0)  # both 0: no retry at all


def test_a_retry_duration_keeps_retrying_until_both_limits_are_reached() -> None:
    config = RetryConfig(retry_count=2, max_retry_duration_s=60)
    assert config.allows_retry(5, 59)  # count spent, duration not
    assert config.allows_retry(1, 600)  # duration spent, count not
    assert not config.allows_retry(2, 60)  # both
    only_duration = RetryConfig(max_retry_duration_s=30)
    assert only_duration.allows_retry(3, 29) and not only_duration.allows_retry(3, 30)

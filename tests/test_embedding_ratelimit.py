"""The rate limiter on a fake clock: sleeping advances the clock, so waits are exact and take no time."""

import threading

import pytest

from toolkit.embedding.ratelimit import RateLimiter
from toolkit.errors import InputError


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def limiter(clock: FakeClock, **limits) -> RateLimiter:
    return RateLimiter(**limits, clock=clock, sleep=clock.sleep)


def test_unlimited_never_waits():
    clock = FakeClock()
    rl = limiter(clock)
    for _ in range(1000):
        assert rl.acquire(tokens=10**6) == 0.0
    assert clock.sleeps == []


def test_requests_per_minute_allows_a_burst_then_spaces_requests():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=60)  # one per second, burst of 60
    for _ in range(60):
        assert rl.acquire() == 0.0
    assert clock.sleeps == []
    assert rl.acquire() == pytest.approx(1.0)
    assert rl.acquire() == pytest.approx(1.0)
    assert clock.now == pytest.approx(1002.0)


def test_tokens_per_minute_waits_for_enough_tokens():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=6000)  # 100 tokens per second
    assert rl.acquire(tokens=5000) == 0.0
    # 1000 left; 3000 needed -> 2000 more at 100/s = 20 s.
    assert rl.acquire(tokens=3000) == pytest.approx(20.0)
    assert rl.delay(tokens=1) == pytest.approx(0.01)


def test_refill_never_exceeds_one_minute_of_budget():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=600)
    clock.now += 3600  # an idle hour does not bank an hour of tokens
    assert rl.acquire(tokens=600) == 0.0
    assert rl.acquire(tokens=600) == pytest.approx(60.0)


def test_a_request_larger_than_the_bucket_waits_for_a_full_bucket_then_runs_into_debt():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=600)  # 10 tokens per second
    rl.acquire(tokens=300)
    # 1200 > capacity 600: waits until the bucket is full (30 s), then leaves it at -600.
    assert rl.acquire(tokens=1200) == pytest.approx(30.0)
    # The debt is paid back before the next 10 tokens: (600 + 10) / 10 = 61 s.
    assert rl.acquire(tokens=10) == pytest.approx(61.0)


def test_both_limits_apply_and_the_stricter_one_decides():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=600, tokens_per_minute=60)  # 10 req/s, 1 token/s
    assert rl.acquire(tokens=60) == 0.0
    assert rl.acquire(tokens=5) == pytest.approx(5.0)


def test_pause_holds_every_request_for_retry_after():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=6000)
    rl.pause(7.5)
    assert rl.delay() == pytest.approx(7.5)
    assert rl.try_acquire() is False
    assert rl.acquire() == pytest.approx(7.5)
    assert rl.acquire() == 0.0


def test_a_shorter_pause_does_not_shorten_a_longer_one():
    clock = FakeClock()
    rl = limiter(clock)
    rl.pause(10)
    rl.pause(2)
    assert rl.delay() == pytest.approx(10.0)


def test_try_acquire_takes_only_when_no_wait_is_needed():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=2)
    assert rl.try_acquire() is True
    assert rl.try_acquire() is True
    assert rl.try_acquire() is False  # nothing was taken by the refusal
    clock.now += 30
    assert rl.try_acquire() is True


def test_delay_takes_nothing():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=1)
    assert rl.delay() == 0.0
    assert rl.delay() == 0.0
    assert rl.acquire() == 0.0
    assert rl.delay() == pytest.approx(60.0)


@pytest.mark.parametrize("bad", [0, -5, True])
def test_invalid_limits_are_refused(bad):
    with pytest.raises(InputError, match="requests_per_minute"):
        RateLimiter(requests_per_minute=bad)


def test_negative_tokens_are_refused():
    with pytest.raises(InputError, match="negative"):
        RateLimiter().acquire(tokens=-1)


def test_threads_sharing_a_limiter_never_exceed_the_budget():
    # The clock stands still, so exactly the burst of 50 may go however the 200 threads interleave.
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=50)
    granted = []

    def worker():
        granted.append(rl.try_acquire())

    threads = [threading.Thread(target=worker) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert granted.count(True) == 50

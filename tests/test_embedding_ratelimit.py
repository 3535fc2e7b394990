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


def test_requests_per_minute_are_spaced_evenly_with_no_burst():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=60)  # one per second
    assert rl.acquire() == 0.0
    assert rl.acquire() == pytest.approx(1.0)
    assert rl.acquire() == pytest.approx(1.0)
    assert clock.now == pytest.approx(1002.0)


def test_tokens_per_minute_pace_the_next_request_and_the_window_stays_within_budget():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=6000)  # 100 tokens per second
    assert rl.acquire(tokens=5000) == 0.0
    # Paced: 5000 tokens hold the next request 50 s; the window: 5000 + 3000 > 6000 until the first leaves it.
    assert rl.acquire(tokens=3000) == pytest.approx(60.0)
    assert rl.delay(tokens=1) == pytest.approx(30.0)  # 3000 tokens at 100/s


def test_an_idle_hour_banks_nothing():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=600)
    clock.now += 3600
    assert rl.acquire(tokens=600) == 0.0
    assert rl.acquire(tokens=600) == pytest.approx(60.0)


def test_a_request_larger_than_a_minutes_budget_goes_alone_after_a_quiet_minute():
    clock = FakeClock()
    rl = limiter(clock, tokens_per_minute=600)  # 10 tokens per second
    rl.acquire(tokens=300)
    assert rl.acquire(tokens=1200) == pytest.approx(60.0)  # once the 300 have left the window
    # 1200 tokens pace the next request for 120 s (at 10/s).
    assert rl.acquire(tokens=10) == pytest.approx(120.0)


def test_both_limits_apply_and_the_stricter_one_decides():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=600, tokens_per_minute=60)  # 10 req/s, 1 token/s
    assert rl.acquire(tokens=2) == 0.0
    assert rl.acquire(tokens=5) == pytest.approx(2.0)  # the tokens' pace, not the 0.1 s between requests
    assert rl.acquire(tokens=0) == pytest.approx(0.1)  # no tokens: only the request spacing


def test_pause_holds_every_request_for_retry_after():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=6000)
    rl.pause(7.5)
    assert rl.delay() == pytest.approx(7.5)
    assert rl.try_acquire() is False
    assert rl.acquire() == pytest.approx(7.5)
    assert rl.acquire() == pytest.approx(0.01)  # then only the spacing of 6000 a minute


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
    assert rl.try_acquire() is False  # nothing was taken by the refusal
    clock.now += 29
    assert rl.try_acquire() is False
    clock.now += 1
    assert rl.try_acquire() is True


def test_delay_takes_nothing():
    clock = FakeClock()
    rl = limiter(clock, requests_per_minute=1)
    assert rl.delay() == 0.0
    assert rl.delay() == 0.0
    assert rl.acquire() == 0.0
    assert rl.delay() == pytest.approx(60.0)


@pytest.mark.parametrize("bad", [0, -5, True, float("nan"), float("inf")])
def test_invalid_limits_are_refused(bad):
    with pytest.raises(InputError, match="requests_per_minute"):
        RateLimiter(requests_per_minute=bad)


def test_negative_tokens_are_refused():
    with pytest.raises(InputError, match="negative"):
        RateLimiter().acquire(tokens=-1)


def test_threads_sharing_a_limiter_never_exceed_the_budget():
    # The clock stands still, so exactly one request may go however the 200 threads interleave (no burst).
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
    assert granted.count(True) == 1


@pytest.mark.parametrize("seed", range(20))
def test_no_minute_ever_holds_more_than_the_limits(seed):
    """Whatever requests come, in whatever sizes and at whatever moments, every 60 s window keeps the promise."""
    import random

    rng = random.Random(seed)
    clock = FakeClock()
    rpm, tpm = rng.choice([30, 120, 600]), rng.choice([1_000, 20_000, 100_000])
    rl = limiter(clock, requests_per_minute=rpm, tokens_per_minute=tpm)
    sent = []
    for _ in range(400):
        clock.now += rng.choice([0.0, 0.0, rng.uniform(0, 3), rng.uniform(0, 60)])
        tokens = rng.randint(0, tpm // 4)
        rl.acquire(tokens=tokens)
        sent.append((clock.now, tokens))
    for start, _ in sent:
        window = [t for when, t in sent if start <= when < start + 60]
        assert len(window) <= rpm and sum(window) <= tpm

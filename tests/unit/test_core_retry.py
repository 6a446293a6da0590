"""The one retry policy: delays that double to a cap, spread by jitter, and a deadline that ends
the tries with the peer's last reason."""

from __future__ import annotations

import pytest

from dracpu.core.errors import InvalidInputError, UnavailableError
from dracpu.core.retry import Backoff, RetryExhaustedError, retry


def test_without_jitter_the_delays_double_up_to_the_cap_and_reset_starts_again() -> None:
    backoff = Backoff(initial=0.1, maximum=0.5, jitter=0.0)
    assert [backoff.next_delay() for _ in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    backoff.reset()
    assert backoff.next_delay() == pytest.approx(0.1)


def test_jitter_spreads_each_delay_within_its_fraction() -> None:
    delays = set()
    for _ in range(200):
        backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.25)
        delay = backoff.next_delay()
        assert 0.75 <= delay <= 1.25
        delays.add(delay)
    assert len(delays) > 1  # spread, not one value


@pytest.mark.parametrize(
    "kwargs", [{"initial": 0.0}, {"initial": 2.0, "maximum": 1.0}, {"jitter": 1.0}, {"factor": 0.5}]
)
def test_a_backoff_that_could_not_back_off_is_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)


async def test_retry_returns_once_the_peer_answers() -> None:
    answers = iter([UnavailableError("restarting"), UnavailableError("restarting"), "ok"])

    async def call() -> str:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert await retry(call, what="Prepare", deadline=5.0, backoff=Backoff(0.001, 0.002)) == "ok"


async def test_retry_gives_up_at_its_deadline_with_the_peers_last_reason() -> None:
    tries = 0

    async def call() -> None:
        nonlocal tries
        tries += 1
        raise UnavailableError(f"connection refused (try {tries})")

    with pytest.raises(RetryExhaustedError) as caught:
        await retry(call, what="Prepare", deadline=0.05, backoff=Backoff(0.001, 0.01))
    assert "Prepare: gave up after" in str(caught.value)
    assert f"connection refused (try {tries})" in str(caught.value)
    assert isinstance(caught.value, UnavailableError)


async def test_retry_passes_a_refusal_at_once() -> None:
    tries = 0

    async def call() -> None:
        nonlocal tries
        tries += 1
        raise InvalidInputError("bad cpuset")

    with pytest.raises(InvalidInputError):
        await retry(call, what="Prepare", deadline=5.0)
    assert tries == 1

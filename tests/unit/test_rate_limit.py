"""The client-side token bucket on fake time: a full bucket at the start, refills at qps up to
burst, waiters in arrival order 1/qps apart, a cancelled waiter's token given back, and in any
interval no more requests than burst + qps x its length."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.fake_time import FakeTime, settle

from torchjob.kube.client import KubeClient, TokenBucket, new_kube_client, proxy_from_environment

# A kubeconfig the client loads without reaching the server.
KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://apiserver:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def bucket(qps: float, burst: int, time: FakeTime) -> TokenBucket:
    return TokenBucket(qps, burst, clock=time.clock, sleep=time.sleep)


def test_a_full_bucket_then_one_token_every_one_over_qps() -> None:
    time = FakeTime()
    limiter = bucket(10, 3, time)
    delays = [limiter.reserve() for _ in range(6)]
    assert delays == pytest.approx([0, 0, 0, 0.1, 0.2, 0.3])


def test_the_bucket_refills_at_qps_and_never_beyond_burst() -> None:
    time = FakeTime()
    limiter = bucket(10, 3, time)
    for _ in range(3):
        limiter.reserve()
    time.now = 0.25  # two and a half tokens back
    assert [limiter.reserve() for _ in range(3)] == pytest.approx([0, 0, 0.05])
    time.now = 1000.0  # a long idle fills the bucket to burst, no further
    assert [limiter.reserve() for _ in range(4)] == pytest.approx([0, 0, 0, 0.1])


async def test_waiters_go_in_arrival_order() -> None:
    time = FakeTime()
    limiter = bucket(2, 1, time)
    order: list[int] = []

    async def request(n: int) -> None:
        await limiter.acquire()
        order.append(n)

    tasks = [asyncio.create_task(request(n)) for n in range(4)]
    await settle()
    assert order == [0]
    await time.advance(0.5)
    assert order == [0, 1]
    await time.advance(0.49)
    assert order == [0, 1]
    await time.advance(0.01)
    assert order == [0, 1, 2]
    await time.advance(0.5)
    assert order == [0, 1, 2, 3]
    await asyncio.gather(*tasks)


async def test_a_cancelled_waiter_gives_its_token_back() -> None:
    time = FakeTime()
    limiter = bucket(1, 1, time)
    await limiter.acquire()
    waiting = asyncio.create_task(limiter.acquire())
    await settle()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    time.now = 1.0
    # One token refilled, and the cancelled request's reservation returned.
    assert limiter.reserve() == 0


@settings(max_examples=300, deadline=None)
@given(
    qps=st.floats(min_value=0.5, max_value=200),
    burst=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.floats(min_value=0, max_value=2), min_size=1, max_size=120),
)
def test_no_interval_sees_more_than_burst_plus_qps_times_its_length(
    qps: float, burst: int, gaps: list[float]
) -> None:
    time = FakeTime()
    limiter = bucket(qps, burst, time)
    granted: list[float] = []
    for gap in gaps:
        time.now += gap
        granted.append(time.now + limiter.reserve())
    # In arrival order: a later request is never let through before an earlier one.
    assert granted == sorted(granted)
    for first in range(len(granted)):
        for last in range(first, len(granted)):
            window = granted[last] - granted[first]
            assert last - first + 1 <= burst + qps * window + 1e-6


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="qps > 0"):
        TokenBucket(0, 10)
    with pytest.raises(ValueError, match="burst >= 1"):
        TokenBucket(5, 0)


async def test_events_take_tokens_from_a_bucket_of_their_own(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    api = await new_kube_client(str(kubeconfig), qps=5, burst=10)
    async with api:
        assert isinstance(api, KubeClient)
        pods = "/api/v1/namespaces/ns/pods"
        events = "/apis/events.k8s.io/v1/namespaces/ns/events"
        assert api.limiter is not None and api.events_limiter is not None
        assert api.limiter is not api.events_limiter
        assert api.limiter_for(pods) is api.limiter
        assert api.limiter_for(events) is api.events_limiter
        # No proxy variables and ~/.netrc read in a thread before every request.
        assert api.session.trust_env is False
    unlimited = await new_kube_client(str(kubeconfig), qps=0)
    async with unlimited:
        assert unlimited.limiter_for(events) is None


def test_the_proxy_is_the_one_the_environment_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    monkeypatch.setenv("NO_PROXY", "10.0.0.1,.cluster.local")
    assert proxy_from_environment("https://apiserver.example:6443") == "http://proxy:3128"
    assert proxy_from_environment("https://10.0.0.1:443") is None
    assert proxy_from_environment("https://kubernetes.default.svc.cluster.local") is None
    monkeypatch.delenv("HTTPS_PROXY")
    assert proxy_from_environment("https://apiserver.example:6443") is None

"""Expectations hold a job back until the cache has shown every create and delete made for it,
and give up after their TTL so a lost watch event cannot block a job forever."""

from __future__ import annotations

from torchjob.kube.expectations import Expectations, ObjectRef
from torchjob.kube.reconcile import JobKey

KEY = JobKey("ns", "job")
OTHER = JobKey("ns", "other")
A, B = ObjectRef("pod", "a"), ObjectRef("pod", "b")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_key_with_no_expectations_is_satisfied() -> None:
    assert Expectations().satisfied(KEY)


def test_satisfied_once_every_creation_is_observed() -> None:
    expectations = Expectations()
    expectations.expect_creations(KEY, [A, B])
    assert not expectations.satisfied(KEY)
    expectations.observed_creation(KEY, A)
    assert not expectations.satisfied(KEY)
    expectations.observed_creation(KEY, B)
    assert expectations.satisfied(KEY)


def test_satisfied_once_every_deletion_is_observed() -> None:
    expectations = Expectations()
    expectations.expect_deletions(KEY, [A])
    expectations.expect_creations(KEY, [B])
    expectations.observed_creation(KEY, B)
    assert not expectations.satisfied(KEY)
    expectations.observed_deletion(KEY, A)
    assert expectations.satisfied(KEY)


def test_observing_a_creation_does_not_count_as_a_deletion() -> None:
    expectations = Expectations()
    expectations.expect_deletions(KEY, [A])
    expectations.observed_creation(KEY, A)
    assert not expectations.satisfied(KEY)


def test_keys_are_independent() -> None:
    expectations = Expectations()
    expectations.expect_creations(KEY, [A])
    expectations.observed_creation(OTHER, A)
    assert not expectations.satisfied(KEY)
    assert expectations.satisfied(OTHER)


def test_observations_for_unexpected_names_or_keys_are_ignored() -> None:
    expectations = Expectations()
    expectations.observed_creation(KEY, A)
    expectations.observed_deletion(KEY, A)
    expectations.expect_creations(KEY, [B])
    expectations.observed_creation(KEY, A)
    assert not expectations.satisfied(KEY)


def test_forget_drops_everything_outstanding() -> None:
    expectations = Expectations()
    expectations.expect_creations(KEY, [A])
    expectations.expect_deletions(KEY, [B])
    expectations.forget(KEY)
    assert expectations.satisfied(KEY)


def test_expectations_expire_after_their_ttl() -> None:
    clock = FakeClock()
    expectations = Expectations(ttl=10, clock=clock)
    expectations.expect_creations(KEY, [A])
    clock.now = 9.9
    assert not expectations.satisfied(KEY)
    clock.now = 10
    assert expectations.satisfied(KEY)
    # Expired expectations are gone, not waiting to come back.
    assert expectations.satisfied(KEY)


def test_new_expectations_restart_the_ttl() -> None:
    clock = FakeClock()
    expectations = Expectations(ttl=10, clock=clock)
    expectations.expect_creations(KEY, [A])
    clock.now = 8
    expectations.expect_creations(KEY, [B])
    clock.now = 12
    assert not expectations.satisfied(KEY)


def test_a_status_write_is_awaited_until_the_cache_shows_it_or_a_later_version() -> None:
    """The status is the restart ledger: a round that read the job from before our own status
    write would count a restart it recorded a second time."""
    expectations = Expectations()
    key = KEY
    expectations.expect_status(key, "120")
    assert not expectations.satisfied(key)
    assert not expectations.observed_job(key, "119"), "the version the write started from"
    assert not expectations.satisfied(key)
    assert expectations.observed_job(key, "125"), "a later version holds our write"
    assert expectations.satisfied(key)
    assert not expectations.observed_job(key, "130"), "nothing was awaited any more"


def test_a_status_write_and_a_deletion_are_both_awaited() -> None:
    expectations = Expectations()
    key = KEY
    expectations.expect_status(key, "7")
    expectations.expect_deletions(key, [ObjectRef("pod", "j-worker-0")])
    assert not expectations.observed_job(key, "7"), "the deletion is still awaited"
    assert not expectations.satisfied(key)
    expectations.observed_deletion(key, ObjectRef("pod", "j-worker-0"))
    assert expectations.satisfied(key)


def test_a_version_that_is_not_a_number_is_ours_only_when_equal() -> None:
    expectations = Expectations()
    key = KEY
    expectations.expect_status(key, "abc")
    assert not expectations.observed_job(key, "abd")
    assert expectations.observed_job(key, "abc")


def test_a_patch_is_awaited_until_the_cache_shows_its_version_or_a_later_one() -> None:
    expectations = Expectations()
    expectations.expect_update(KEY, A)
    expectations.observed_update(KEY, A, "10")  # an update of before the patch's answer
    assert not expectations.satisfied(KEY)
    expectations.patched(KEY, A, "12")
    assert not expectations.satisfied(KEY), "10 is older than the patch"
    expectations.observed_update(KEY, A, "13")
    assert expectations.satisfied(KEY)


def test_a_patch_seen_before_its_answer_came_is_not_awaited() -> None:
    expectations = Expectations()
    expectations.expect_update(KEY, A)
    expectations.observed_update(KEY, A, "12")
    expectations.patched(KEY, A, "12")
    assert expectations.satisfied(KEY)


def test_a_failed_patch_or_a_deleted_pod_is_not_awaited() -> None:
    expectations = Expectations()
    expectations.expect_update(KEY, A)
    expectations.patched(KEY, A, None)
    expectations.expect_update(KEY, B)
    expectations.patched(KEY, B, "5")
    expectations.observed_deletion(KEY, B)
    assert expectations.satisfied(KEY)

"""Who may report a job's progress: a process in one of the job's own pods. Its token is checked
by the apiserver (a TokenReview, with the job's audience), must be bound to a pod in the job's
namespace, and that pod (read back, uid and all) must be controlled by the job.

Verdicts are remembered: a token accepted for a job for up to a minute (never past the token's
own expiry), a token refused for a job for ten seconds, so that a reporter costs the apiserver
about one review a minute and a flood of a bad token about one every ten seconds. Each cache is
bounded, and so are the reviews under way at once (429 beyond)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

import aiohttp
import orjson
import structlog
from cachetools import TLRUCache

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.progress import JobRef
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import KubeError, NotFound
from torchjob.kube.informer import controller_uid
from torchjob.kube.resources import PODS
from torchjob.kube.rest import Resources

log = structlog.get_logger("torchjob.webhook")

TOKEN_REVIEWS: Final = "/apis/authentication.k8s.io/v1/tokenreviews"
POD_NAME: Final = "authentication.kubernetes.io/pod-name"
POD_UID: Final = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
ACCEPTED_SECONDS: Final = 60.0
REFUSED_SECONDS: Final = 10.0
MAX_REVIEWS: Final = 16
CACHE_SIZE: Final = 4096
# A review (and the pod's read) that takes longer is answered 503: retry.
REVIEW_SECONDS: Final = 10.0

Clock = Callable[[], float]
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Refused(Exception):
    """A request that is answered with an error: its HTTP code, metav1.Status reason, message,
    and for a 429 or 503 when to retry."""

    def __init__(self, code: int, reason: str, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.retry_after = retry_after


def unauthorized(message: str) -> Refused:
    return Refused(401, "Unauthorized", message)


def forbidden(message: str) -> Refused:
    return Refused(403, "Forbidden", message)


@dataclass(frozen=True, slots=True)
class Caller:
    """The pod a reviewed token is bound to."""

    namespace: str
    pod_name: str
    pod_uid: str


def expiring(capacity: int, clock: Clock) -> TLRUCache[K, tuple[float, V]]:
    """At most `capacity` values, each kept with the time it expires at (the pair's first) and
    gone from then on; the least recently used is dropped first."""
    return TLRUCache(capacity, ttu=_expiry_kept, timer=clock)


def _expiry_kept(_key: object, kept: tuple[float, object], _now: float) -> float:
    return kept[0]


class Authenticator:
    """Checks that a bearer token was issued to a pod of the job it reports for."""

    def __init__(
        self,
        api: KubeClient,
        *,
        clock: Clock = time.time,
        max_reviews: int = MAX_REVIEWS,
        capacity: int = CACHE_SIZE,
    ) -> None:
        self._api = api
        self._clock = clock
        self._max_reviews = max_reviews
        self.reviewing = 0
        self.accepted: TLRUCache[tuple[bytes, str, str], tuple[float, bool]] = expiring(
            capacity, clock
        )
        self.refused: TLRUCache[tuple[bytes, str], tuple[float, Refused]] = expiring(
            capacity, clock
        )

    async def authenticate(
        self, token: str, job: JobRef, job_uid_of: Callable[[], str | None]
    ) -> None:
        """Returns when `token` may report for `job` (whose uid the job cache holds: `job_uid_of`
        says it, None when it holds none); else raises Refused. A token refused lately for this
        job is refused again before the job is even looked up."""
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        if (refused := self.refused.get((digest, job.path))) is not None:
            raise refused[1]
        if (refusal := claims_refusal(token, job, now)) is not None:
            raise refusal
        job_uid = job_uid_of()
        if job_uid is not None and (digest, job.path, job_uid) in self.accepted:
            return
        if self.reviewing >= self._max_reviews:
            raise Refused(429, "TooManyRequests", "too many tokens under review; retry", 1)
        self.reviewing += 1
        try:
            async with asyncio.timeout(REVIEW_SECONDS):
                await self._check(token, digest, job, job_uid)
        except (KubeError, aiohttp.ClientError, OSError, TimeoutError) as error:
            log.warning("progress token could not be checked", job=job.path, error=str(error))
            message = "the token could not be checked; retry"
            raise Refused(503, "ServiceUnavailable", message, 1) from None
        finally:
            self.reviewing -= 1

    async def _check(self, token: str, digest: bytes, job: JobRef, job_uid: str | None) -> None:
        try:
            caller = await self._review(token, job)
            if job_uid is None:
                # Not remembered: the job may be only a moment from the cache.
                message = f"{job.api.kind} {job.namespace}/{job.name} not found"
                raise Refused(404, "NotFound", message)
            await self._check_pod(caller, job, job_uid)
        except Refused as refusal:
            if refusal.code in (401, 403):
                self.refused[digest, job.path] = (self._clock() + REFUSED_SECONDS, refusal)
            raise
        until = min(self._clock() + ACCEPTED_SECONDS, expiry_of(token) or float("inf"))
        self.accepted[digest, job.path, job_uid] = (until, True)

    async def _review(self, token: str, job: JobRef) -> Caller:
        review = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": token, "audiences": [job.audience]},
        }
        answer = await self._api.request_json("POST", TOKEN_REVIEWS, body=review)
        status = answer.get("status") or {} if isinstance(answer, dict) else {}
        if not status.get("authenticated") or job.audience not in (status.get("audiences") or ()):
            raise unauthorized("the token is not valid for this job (expired, or another audience)")
        return caller_of(status.get("user") or {}, job)

    async def _check_pod(self, caller: Caller, job: JobRef, job_uid: str) -> None:
        refusal = forbidden(
            f"the token's pod {caller.pod_name} does not belong to "
            f"{job.api.kind} {job.namespace}/{job.name}"
        )
        try:
            pod = await Resources(self._api).get(PODS, caller.namespace, caller.pod_name)
        except NotFound:
            raise refusal from None
        metadata = pod.get("metadata") or {}
        if metadata.get("uid") != caller.pod_uid or controller_uid(pod) != [job_uid]:
            raise refusal
        # Admission lets only the reconciler create a pod with the job's label: an owner
        # reference alone can be written by anyone who may create pods in the namespace.
        if (metadata.get("labels") or {}).get(LABEL_JOB_NAME) != job.name:
            raise refusal


def caller_of(user: dict[str, Any], job: JobRef) -> Caller:
    """The pod a reviewed token's user is bound to, in the job's namespace; else Refused."""
    username = str(user.get("username") or "")
    namespace, _, account = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not username.startswith(SERVICE_ACCOUNT_PREFIX) or not account:
        raise forbidden("the token is not a service account's")
    if namespace != job.namespace:
        raise forbidden(f"the token's service account is not in namespace {job.namespace}")
    extra = user.get("extra") or {}
    names, uids = extra.get(POD_NAME) or [], extra.get(POD_UID) or []
    if not (names and uids and isinstance(names[0], str) and isinstance(uids[0], str)):
        raise forbidden("the token is not bound to a pod")
    return Caller(namespace, names[0], uids[0])


def claims_of(token: str) -> dict[str, Any] | None:
    """The claims of a JWT, read without checking its signature; None when it is not one."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return payload if isinstance(payload, dict) else None


def claims_refusal(token: str, job: JobRef, now: float) -> Refused | None:
    """A refusal read from the token's own claims, before the apiserver is asked: a token that
    is not a JWT, or names another audience or namespace, or has expired, is refused without a
    TokenReview, so that junk costs the apiserver nothing and takes no review's place. The
    claims are unchecked, so they may only refuse: only the TokenReview accepts."""
    claims = claims_of(token)
    if claims is None:
        return unauthorized("the token is not a service account token")
    audiences = claims.get("aud")
    audiences = [audiences] if isinstance(audiences, str) else audiences
    if not isinstance(audiences, list) or job.audience not in audiences:
        return unauthorized("the token is not valid for this job (another audience)")
    exp = claims.get("exp")
    if isinstance(exp, int | float) and not isinstance(exp, bool) and exp <= now:
        return unauthorized("the token has expired")
    kubernetes = claims.get("kubernetes.io")
    namespace = kubernetes.get("namespace") if isinstance(kubernetes, dict) else None
    if namespace != job.namespace:
        return unauthorized(f"the token is not of a pod in namespace {job.namespace}")
    return None


def expiry_of(token: str) -> float | None:
    """The `exp` claim of a JWT, read without checking the signature: only once the apiserver
    has said the token is valid, to remember that no longer than it is."""
    exp = (claims_of(token) or {}).get("exp")
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None

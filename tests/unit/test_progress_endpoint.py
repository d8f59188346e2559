"""The progress endpoint's request path against an in-memory stand-in for the two API calls it
makes (TokenReview, and a GET of the token's pod): only our own logic is under test here, the
order of the checks, the answers' shapes, what is remembered and what is written. What the real
apiserver says of real tokens is tests/e2e/test_progress.py's."""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from support.eventually import eventually
from support.fake_time import FakeTime
from support.webhook import JOB, FixedJobs

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.job_api import TRAINING_JOB
from torchjob.api.progress import MAX_BODY_BYTES, JobRef
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import NotFound
from torchjob.webhook.certificates.tls import ServingCertificate
from torchjob.webhook.progress.auth import POD_NAME, POD_UID, Authenticator, claims_of
from torchjob.webhook.progress.endpoint import JobVersion, ProgressService, progress_app
from torchjob.webhook.progress.limit import JobRateLimit, Tarpit
from torchjob.webhook.progress.target import ProgressTarget
from torchjob.webhook.progress.writer import CoalescingWriter

REF = JobRef(TRAINING_JOB, "ns", "j")
URL = REF.path
REPORT = {"trainerStatus": {"progressPercentage": 30, "metrics": [{"name": "loss", "value": 1}]}}


def _jwt(name: str, audience: str = REF.audience, namespace: str = "ns", **more: Any) -> str:
    """A token shaped as the kubelet's are (unsigned: only the fake review reads it); `name`
    says which of FakeApi's users it is."""
    claims = {"jti": name, "aud": [audience], "kubernetes.io": {"namespace": namespace}, **more}
    parts = (b'{"alg":"RS256"}', orjson.dumps(claims), b"signature")
    return ".".join(base64.urlsafe_b64encode(p).rstrip(b"=").decode() for p in parts)


def _user(namespace: str = "ns", pod: str | None = "j-worker-0") -> dict[str, Any]:
    extra = {POD_NAME: [pod], POD_UID: [f"{pod}-uid"]} if pod else {}
    return {"username": f"system:serviceaccount:{namespace}:default", "extra": extra}


class FakeApi(KubeClient):
    """TokenReview answers by token, and pods by name; counts the reviews."""

    def __init__(self) -> None:  # no session: nothing is sent anywhere
        self.users: dict[str, dict[str, Any]] = {"good": _user()}
        self.audiences: dict[str, str] = {}
        self.pods: dict[str, dict[str, Any]] = {
            "j-worker-0": _pod("j-worker-0", JOB["metadata"]["uid"]),
            "stray": _pod("stray", None),
        }
        self.reviews = 0
        self.hold: asyncio.Event | None = None

    async def request_json(self, method: str, path: str, **options: Any) -> Any:
        if method == "POST" and path.endswith("/tokenreviews"):
            self.reviews += 1
            if self.hold is not None:
                await self.hold.wait()
            spec = options["body"]["spec"]
            name = (claims_of(spec["token"]) or {}).get("jti", "")
            user = self.users.get(name)
            audience = self.audiences.get(name, REF.audience)
            valid = user is not None and audience in spec["audiences"]
            status = {"authenticated": True, "user": user, "audiences": [audience]}
            return {"status": status if valid else {"authenticated": False}}
        name = path.rsplit("/", 1)[-1]
        if method == "GET" and name in self.pods:
            return self.pods[name]
        raise NotFound(404, "NotFound", path)


def _pod(name: str, owner_uid: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"{name}-uid"}
    if owner_uid:
        metadata["ownerReferences"] = [{"controller": True, "uid": owner_uid, "name": "j"}]
        metadata["labels"] = {LABEL_JOB_NAME: "j"}
    return {"metadata": metadata}


class CountingTarpit(Tarpit):
    """Counts the 429s it is asked to hold, and holds none."""

    def __init__(self) -> None:
        super().__init__(0.0, 0)
        self.holds = 0

    async def hold(self) -> None:
        self.holds += 1


class Setup:
    def __init__(self, job: dict[str, Any] | None = JOB) -> None:
        self.time = FakeTime()
        self.tarpit = CountingTarpit()
        self.api = FakeApi()
        self.written: list[tuple[JobVersion, dict[str, Any]]] = []
        self.writer: CoalescingWriter[JobVersion] = CoalescingWriter(
            self._write, 10.0, clock=self.time.clock
        )
        self.service = ProgressService(
            jobs=lambda api: FixedJobs(job) if api is TRAINING_JOB else None,
            authenticator=Authenticator(self.api, clock=self.time.clock, max_reviews=2),
            limit=JobRateLimit(1.0, 3, clock=self.time.clock),
            writer=self.writer,
            tarpit=self.tarpit,
        )

    async def _write(self, job: JobVersion, report: dict[str, Any]) -> None:
        self.written.append((job, report))


@pytest.fixture
async def setup() -> Setup:
    return Setup()


@pytest.fixture
async def http(setup: Setup) -> AsyncIterator[TestClient[Any, Any]]:
    async with TestClient(TestServer(progress_app(setup.service))) as client:
        yield client


async def _post(
    http: TestClient[Any, Any], token: str | None = "good", body: Any = REPORT, url: str = URL
) -> tuple[int, dict[str, Any], Any]:
    """POST as the user named `token` (a JWT-shaped token of it), or with no token (None)."""
    headers = {"Authorization": f"Bearer {_jwt(token)}"} if token else {}
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    response = await http.post(url, data=data, headers=headers)
    return response.status, orjson.loads(await response.read()), response.headers


def _status(answer: dict[str, Any], code: int, reason: str) -> bool:
    return answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": answer.get("message"),
        "reason": reason,
        "code": code,
    } and bool(answer["message"])


async def test_an_accepted_report_is_answered_with_what_will_be_written(
    http: TestClient[Any, Any], setup: Setup
) -> None:
    code, answer, _ = await _post(http)
    assert code == 200
    status = answer["trainerStatus"]
    assert status["progressPercentage"] == 30
    assert status["metrics"] == [{"name": "loss", "value": "1"}]
    assert status["estimatedRemainingSeconds"] is None
    await setup.writer.write_due()
    assert setup.written == [(JobVersion(REF, JOB["metadata"]["uid"]), status)]


@pytest.mark.parametrize(
    ("token", "url", "body", "code", "reason"),
    [
        (None, URL, REPORT, 401, "Unauthorized"),
        ("bad", URL, REPORT, 401, "Unauthorized"),
        ("good", "/apis/x/v1/namespaces/ns/things/j/status", REPORT, 404, "NotFound"),
        ("good", URL.replace("/status", ""), REPORT, 404, "NotFound"),
        ("good", URL, b"{", 400, "BadRequest"),
        ("good", URL, {"trainerStatus": {"progressPercentage": 150}}, 422, "Invalid"),
        ("good", URL, b"x" * (MAX_BODY_BYTES + 1), 413, "RequestEntityTooLarge"),
    ],
)
async def test_refusals_are_statuses(
    http: TestClient[Any, Any], token: str | None, url: str, body: Any, code: int, reason: str
) -> None:
    status, answer, _ = await _post(http, token, body, url)
    assert status == code and _status(answer, code, reason), answer


async def test_only_post(http: TestClient[Any, Any]) -> None:
    response = await http.get(URL)
    assert response.status == 405
    assert _status(await response.json(), 405, "MethodNotAllowed")


@pytest.mark.parametrize(
    ("user", "message"),
    [
        (_user(namespace="other"), "not in namespace ns"),
        (_user(pod=None), "not bound to a pod"),
        (_user(pod="stray"), "the token's pod stray does not belong to PyTorchTrainingJob ns/j"),
        (_user(pod="gone"), "the token's pod gone does not belong"),
        ({"username": "alice"}, "not a service account's"),
    ],
)
async def test_a_token_not_of_the_jobs_pods_is_forbidden(
    http: TestClient[Any, Any], setup: Setup, user: dict[str, Any], message: str
) -> None:
    setup.api.users["other"] = user
    code, answer, _ = await _post(http, "other")
    assert code == 403 and _status(answer, 403, "Forbidden")
    assert message in answer["message"]


async def test_a_token_of_another_audience_is_unauthorized(
    http: TestClient[Any, Any], setup: Setup
) -> None:
    setup.api.users["elsewhere"] = _user()
    setup.api.audiences["elsewhere"] = "batch.tensorstack.dev/v1beta1/namespaces/ns/x/k/status"
    code, answer, _ = await _post(http, "elsewhere")
    assert code == 401 and _status(answer, 401, "Unauthorized")


async def test_verdicts_are_remembered(http: TestClient[Any, Any], setup: Setup) -> None:
    for _ in range(2):
        assert (await _post(http))[0] == 200
        assert (await _post(http, "bad"))[0] == 401
    assert setup.api.reviews == 2, "one review for each token"
    await setup.time.advance(11)
    assert (await _post(http, "bad"))[0] == 401
    assert setup.api.reviews == 3, "a refusal is remembered for 10 s"
    await setup.time.advance(50)
    assert (await _post(http))[0] == 200
    assert setup.api.reviews == 4, "an acceptance for 60 s"


async def test_beyond_the_jobs_burst_429_with_retry_after(
    http: TestClient[Any, Any], setup: Setup
) -> None:
    codes = [(await _post(http))[0] for _ in range(3)]
    code, answer, headers = await _post(http)
    assert codes == [200] * 3
    assert code == 429 and _status(answer, 429, "TooManyRequests")
    assert headers["Retry-After"] == "1"
    assert setup.tarpit.holds == 1, "the 429 is held before it is sent"
    assert (await _post(http, "bad"))[0] == 401, "a stranger is refused before the limit"
    await setup.time.advance(1)
    assert (await _post(http))[0] == 200


async def test_too_many_reviews_at_once_429(http: TestClient[Any, Any], setup: Setup) -> None:
    setup.api.hold = asyncio.Event()
    setup.api.users.update({"t1": _user(), "t2": _user(), "t3": _user()})
    held = [asyncio.create_task(_post(http, token)) for token in ("t1", "t2")]
    await eventually(lambda: setup.api.reviews == 2, "two reviews under way")
    code, answer, _ = await _post(http, "t3")
    assert code == 429 and _status(answer, 429, "TooManyRequests")
    setup.api.hold.set()
    assert [(await task)[0] for task in held] == [200, 200]


async def test_a_finished_or_unknown_job_is_not_written() -> None:
    for job, code in (({**JOB, "status": {"phase": "Succeeded"}}, 409), (None, 404)):
        setup = Setup(job)
        async with TestClient(TestServer(progress_app(setup.service))) as http:
            status, answer, _ = await _post(http)
        assert status == code, answer
        if code == 409:
            assert answer["message"] == "the job has finished"
        assert setup.writer.waiting == 0


async def test_no_body_makes_a_500_whatever_it_holds(http: TestClient[Any, Any]) -> None:
    generator = random.Random(31)
    pieces = [b"{", b"}", b"[", b"]", b'"trainerStatus"', b":", b",", b"1e999", b"null", b"-1"]
    bodies = [b"".join(generator.choices(pieces, k=generator.randint(0, 12))) for _ in range(150)]
    odd: tuple[Any, ...] = (
        [],
        "x",
        {"trainerStatus": []},
        {"trainerStatus": {"metrics": [{"name": "a" * 65, "value": "v"}]}},
        {"trainerStatus": {"metrics": [{}] * 300}},
        {"trainerStatus": {"progressPercentage": True}},
        {"trainerStatus": {"lastUpdatedTime": "yesterday"}},
        {"trainerStatus": {"estimatedRemainingSeconds": 2**40}},
    )
    bodies += [orjson.dumps(value) for value in odd]
    bodies += [b"\xff\xfe", b"[" * 5000]
    for body in bodies:
        code, answer, _ = await _post(http, body=body)
        assert code in (200, 400, 422, 429), (body, answer)


def test_the_pod_rewrite_is_told_the_current_ca() -> None:
    serving = ServingCertificate()
    try:
        target = ProgressTarget("https://svc.ns.svc:9444", serving)
        assert target.current is None, "no CA known: no endpoint"
        serving.ca_pem = b"PEM-1"
        first = target.current
        assert first is not None and first.ca_pem == "PEM-1"
        assert first.url(REF) == "https://svc.ns.svc:9444" + URL
        assert target.current is first
        serving.ca_pem = b"PEM-2"
        assert target.current is not None and target.current.ca_pem == "PEM-2"
    finally:
        serving.close()


async def test_the_tarpit_holds_at_most_its_capacity_at_once() -> None:
    tarpit = Tarpit(3600.0, 1)
    held = asyncio.create_task(tarpit.hold())
    await eventually(lambda: tarpit.held == 1, "one answer held")
    await tarpit.hold()  # beyond the capacity: answered at once
    assert tarpit.held == 1
    held.cancel()
    await asyncio.gather(held, return_exceptions=True)
    assert tarpit.held == 0


@pytest.mark.parametrize(
    ("token", "message"),
    [
        ("not-a-jwt", "not a service account token"),
        (
            _jwt("good", audience="batch.tensorstack.dev/v1beta1/namespaces/ns/x/k/status"),
            "audience",
        ),
        (_jwt("good", namespace="other"), "namespace ns"),
        (_jwt("good", exp=-1), "expired"),  # the fake clock starts at 0
    ],
)
async def test_a_token_whose_own_claims_refuse_it_costs_no_review(
    http: TestClient[Any, Any], setup: Setup, token: str, message: str
) -> None:
    response = await http.post(
        URL, data=orjson.dumps(REPORT), headers={"Authorization": f"Bearer {token}"}
    )
    answer = orjson.loads(await response.read())
    assert response.status == 401 and _status(answer, 401, "Unauthorized"), answer
    assert message in answer["message"]
    assert setup.api.reviews == 0


async def test_a_token_that_is_not_ascii_is_unauthorized(http: TestClient[Any, Any]) -> None:
    headers = {"Authorization": "Bearer caf\u00e9".encode().decode("unicode_escape")}
    response = await http.post(URL, data=orjson.dumps(REPORT), headers=headers)
    assert response.status == 401


async def test_a_pod_that_names_the_job_its_owner_without_its_label_is_forbidden(
    http: TestClient[Any, Any], setup: Setup
) -> None:
    """Anyone who may create pods can write an owner reference; only the reconciler may create a
    pod with the job's label."""
    setup.api.pods["j-worker-0"]["metadata"]["labels"] = {}
    code, answer, _ = await _post(http)
    assert code == 403 and "does not belong" in answer["message"], answer

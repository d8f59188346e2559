"""Run in a replica pod of a job: what the progress endpoint answers this pod, as JSON on stdout.

Reads Kubeflow Trainer's three variables as a reporter would, then tries what a tenant might:
its own job's URL, another job's URL (OTHER_JOB_URL), an oversized and a malformed body, a token
it was not given (FORGED_TOKEN, and the pod's ordinary ServiceAccount token), and a flood.
Standard library only: the example image's Python."""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.request
from typing import Any

URL = os.environ["KUBEFLOW_TRAINER_SERVER_URL"]
CONTEXT = ssl.create_default_context(cafile=os.environ["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
SERVICE_ACCOUNT_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


def own_token() -> str:
    with open(os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]) as token:
        return token.read().strip()


def post(url: str, body: dict[str, Any] | bytes, token: str | None) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=CONTEXT, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def report(percent: int) -> dict[str, Any]:
    return {
        "trainerStatus": {
            "progressPercentage": percent,
            "estimatedRemainingSeconds": 60,
            "metrics": [{"name": "loss", "value": "0.5"}],
            "lastUpdatedTime": "2026-01-01T00:00:00Z",
        }
    }


def main() -> None:
    token = own_token()
    results: dict[str, Any] = {"own": post(URL, report(10), token)}
    results["other_job"] = post(os.environ["OTHER_JOB_URL"], report(66), token)
    results["no_token"] = post(URL, report(11), None)
    results["forged_expired"] = post(URL, report(12), os.environ["FORGED_TOKEN"])
    if os.path.exists(SERVICE_ACCOUNT_TOKEN):
        with open(SERVICE_ACCOUNT_TOKEN) as other:
            results["api_audience"] = post(URL, report(13), other.read().strip())
    oversized = b'{"trainerStatus": {"metrics": "' + b"x" * 70_000 + b'"}}'
    results["oversized"] = post(URL, oversized, token)
    results["malformed"] = post(URL, b"{not json", token)
    results["out_of_range"] = post(URL, report(150), token)
    started = time.monotonic()
    flood = [post(URL, report(20), token)[0] for _ in range(60)]
    results["flood_seconds"] = time.monotonic() - started
    results["flood"] = {str(code): flood.count(code) for code in set(flood)}
    time.sleep(3)  # the job's allowance refills
    results["last"] = post(URL, report(100), token)
    print("PROBE " + json.dumps(results), flush=True)


main()

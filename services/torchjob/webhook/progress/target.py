"""Where the pod rewrite points training processes: the progress endpoint's URL and the CA its
certificate is verified with. The CA is the serving certificate's, which a refresh may change
after start (a CA rotation, or cert-manager's ca.crt appearing), so it is read when asked for."""

from __future__ import annotations

from aiohttp import web

from torchjob.api.progress import ProgressEndpoint
from torchjob.webhook.certificates.tls import ServingCertificate


class ProgressTarget:
    """`current` is the endpoint the pod rewrite hands to each pod: None while no CA is known
    (a pod told to verify with no CA could not report) or when reporting is off."""

    def __init__(self, base_url: str, serving: ServingCertificate | None) -> None:
        self._base_url = base_url
        self._serving = serving
        self._made_from = b""
        self._current: ProgressEndpoint | None = None

    @property
    def current(self) -> ProgressEndpoint | None:
        if self._serving is None:
            return None
        ca_pem = self._serving.ca_pem
        # Read on every pod admission: compared by identity first, so an unchanged CA costs
        # no comparison of its bytes.
        if ca_pem is not self._made_from and ca_pem != self._made_from:
            self._current = (
                ProgressEndpoint(self._base_url, ca_pem.decode("ascii")) if ca_pem else None
            )
        self._made_from = ca_pem
        return self._current


# The pod rewrite's target when reporting is off: no endpoint.
NO_PROGRESS = ProgressTarget("", None)

# Where the application keeps the target (its `current` endpoint is handed to the pod rewrite);
# absent when the chart turns reporting off.
PROGRESS = web.AppKey("progress", ProgressTarget)

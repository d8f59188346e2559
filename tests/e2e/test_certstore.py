"""The certificate Secret and the webhook configurations' caBundle on the real apiserver: created
once, renewed once, one CA however many replicas race; plus the cert-manager file source."""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from support.eventually import eventually

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import NotFound
from torchjob.webhook.certificates import pki
from torchjob.webhook.certificates.pki import (
    CertBundle,
    bundle_from_secret_data,
    new_bundle,
    not_after,
    secret_data,
)
from torchjob.webhook.certificates.store import (
    Clock,
    FileCertificateSource,
    SecretCertificateStore,
    patch_ca_bundle,
    utc_now,
    webhook_configuration_owner,
)

SECRET_NAME = "torchjob-webhook-certs"
DNS_NAMES = ("torchjob-webhook.torchjob.svc", "torchjob-webhook.torchjob.svc.cluster.local")
IPS = ("127.0.0.1",)
REPLICAS = 8
# Long enough for the watch to deliver every write made before it started.
WATCH_SECONDS = 1


def store(api_client: KubeClient, namespace: str, clock: Clock = utc_now) -> SecretCertificateStore:
    return SecretCertificateStore(api_client, namespace, SECRET_NAME, DNS_NAMES, IPS, clock=clock)


def frozen_at(moment: datetime.datetime) -> Clock:
    return lambda: moment


async def read_secret(kube_client: client.ApiClient, namespace: str) -> Any:
    return await client.CoreV1Api(kube_client).read_namespaced_secret(SECRET_NAME, namespace)


async def stored_bundle(kube_client: client.ApiClient, namespace: str) -> CertBundle | None:
    return bundle_from_secret_data((await read_secret(kube_client, namespace)).data)


async def writes_since(kube_client: client.ApiClient, namespace: str, resource_version: str) -> int:
    """How many times the Secret was written after `resource_version`."""
    core = client.CoreV1Api(kube_client)
    stream = watch.Watch().stream(
        core.list_namespaced_secret,
        namespace,
        field_selector=f"metadata.name={SECRET_NAME}",
        resource_version=resource_version,
        timeout_seconds=WATCH_SECONDS,
    )
    events = [event["type"] async for event in stream]
    return events.count("MODIFIED")


async def test_ensure_creates_the_secret_then_leaves_it_alone(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    bundle = await store(service_client, namespace).ensure()

    secret = await read_secret(kube_client, namespace)
    assert secret.type == "kubernetes.io/tls"
    assert bundle_from_secret_data(secret.data) == bundle
    assert {entry.manager for entry in secret.metadata.managed_fields} == {"torchjob"}

    assert await store(service_client, namespace).ensure() == bundle
    assert await writes_since(kube_client, namespace, secret.metadata.resource_version) == 0


async def test_a_store_looks_again_only_when_the_secret_changes_or_something_is_due(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settles: list[datetime.datetime] = []
    settle = pki.settle

    def counted(*args: Any) -> pki.Settled:
        settles.append(args[3])
        return settle(*args)

    monkeypatch.setattr(pki, "settle", counted)
    now = [utc_now()]
    each = store(service_client, namespace, clock=lambda: now[0])

    first = await each.ensure()
    assert await each.ensure() == first
    assert len(settles) == 1  # the Secret as written, nothing due: not settled again

    other = new_bundle(DNS_NAMES, IPS, utc_now())
    secret = await read_secret(kube_client, namespace)
    secret.data = secret_data(other)
    await client.CoreV1Api(kube_client).replace_namespaced_secret(SECRET_NAME, namespace, secret)
    assert await each.ensure() == other
    assert len(settles) == 2  # written by someone else: looked at, and adopted

    now[0] = each.not_after - datetime.timedelta(days=30)
    renewed = await each.ensure()
    assert len(settles) == 3  # the rotation point passed: renewed
    assert renewed.cert_pem != other.cert_pem
    assert await stored_bundle(kube_client, namespace) == renewed


async def validating_configuration(kube_client: client.ApiClient, name: str) -> Any:
    """A webhook configuration with no webhooks: an owner, nothing the apiserver calls."""
    api = client.AdmissionregistrationV1Api(kube_client)
    body = client.V1ValidatingWebhookConfiguration(metadata=client.V1ObjectMeta(name=name))
    return await api.create_validating_webhook_configuration(body)


def owned_by(api_client: KubeClient, namespace: str, configuration: Any) -> SecretCertificateStore:
    """A store whose Secret the webhook configuration owns."""
    owner = webhook_configuration_owner(api_client, configuration.metadata.name)
    return SecretCertificateStore(api_client, namespace, SECRET_NAME, DNS_NAMES, IPS, owner=owner)


async def test_the_secret_goes_with_its_webhook_configuration(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    configuration = await validating_configuration(kube_client, f"{namespace}-validating")
    await owned_by(service_client, namespace, configuration).ensure()
    secret = await read_secret(kube_client, namespace)
    assert [(o.kind, o.uid) for o in secret.metadata.owner_references] == [
        ("ValidatingWebhookConfiguration", configuration.metadata.uid)
    ]

    await client.AdmissionregistrationV1Api(kube_client).delete_validating_webhook_configuration(
        configuration.metadata.name
    )

    # The garbage collector of kube-controller-manager deletes the dependent Secret.
    async def secret_gone() -> bool:
        try:
            await read_secret(kube_client, namespace)
        except client.ApiException as error:
            assert error.status == 404
            return True
        return False

    await eventually(secret_gone, "the Secret deleted with its owner", timeout=60, interval=0.2)


async def test_a_secret_written_without_an_owner_is_adopted_keeping_its_bundle(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    bundle = await store(service_client, namespace).ensure()
    configuration = await validating_configuration(kube_client, f"{namespace}-validating")
    try:
        assert await owned_by(service_client, namespace, configuration).ensure() == bundle
        secret = await read_secret(kube_client, namespace)
        assert [o.uid for o in secret.metadata.owner_references] == [configuration.metadata.uid]
        assert await stored_bundle(kube_client, namespace) == bundle
    finally:
        await client.AdmissionregistrationV1Api(
            kube_client
        ).delete_validating_webhook_configuration(configuration.metadata.name)


async def test_replicas_starting_together_end_with_one_secret_and_one_ca(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    stores = [store(service_client, namespace) for _ in range(REPLICAS)]

    bundles = await asyncio.gather(*(each.ensure() for each in stores))

    assert len(set(bundles)) == 1
    secrets = await client.CoreV1Api(kube_client).list_namespaced_secret(namespace)
    assert [secret.metadata.name for secret in secrets.items] == [SECRET_NAME]
    assert await stored_bundle(kube_client, namespace) == bundles[0]


async def test_expiring_serving_cert_is_renewed_once_by_racing_replicas(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    original = await store(service_client, namespace).ensure()
    before = (await read_secret(kube_client, namespace)).metadata.resource_version
    # A month before the end of a year-long certificate: well past the rotate point.
    later = frozen_at(not_after(original.cert_pem) - datetime.timedelta(days=30))
    stores = [store(service_client, namespace, clock=later) for _ in range(REPLICAS)]

    bundles = await asyncio.gather(*(each.ensure() for each in stores))

    assert len(set(bundles)) == 1
    renewed = bundles[0]
    assert renewed.cert_pem != original.cert_pem
    assert renewed.ca_cert_pem == original.ca_cert_pem
    assert await stored_bundle(kube_client, namespace) == renewed
    assert await writes_since(kube_client, namespace, before) == 1


async def test_expiring_ca_is_rotated_once_by_racing_replicas(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    original = await store(service_client, namespace).ensure()
    before = (await read_secret(kube_client, namespace)).metadata.resource_version
    later = frozen_at(not_after(original.ca_cert_pem) - datetime.timedelta(days=365))
    stores = [store(service_client, namespace, clock=later) for _ in range(REPLICAS)]

    bundles = await asyncio.gather(*(each.ensure() for each in stores))

    assert len(set(bundles)) == 1
    rotated = bundles[0]
    assert rotated.ca_cert_pem != original.ca_cert_pem
    # The old CA stays trusted: replicas not yet reloaded still serve certificates it signed.
    assert rotated.ca_bundle_pem == rotated.ca_cert_pem + original.ca_cert_pem
    assert await writes_since(kube_client, namespace, before) == 1


async def test_a_garbled_secret_is_replaced_keeping_its_type(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    garbled = client.V1Secret(
        metadata=client.V1ObjectMeta(name=SECRET_NAME),
        type="Opaque",
        data={"tls.crt": base64.b64encode(b"not a certificate").decode()},
    )
    await client.CoreV1Api(kube_client).create_namespaced_secret(namespace, garbled)

    bundle = await store(service_client, namespace).ensure()

    secret = await read_secret(kube_client, namespace)
    assert secret.type == "Opaque"
    assert bundle_from_secret_data(secret.data) == bundle


@pytest.fixture
async def webhook_configurations(
    kube_client: client.ApiClient, namespace: str
) -> AsyncIterator[tuple[str, str]]:
    """A MutatingWebhookConfiguration and a ValidatingWebhookConfiguration of two webhooks each,
    which call nothing reachable and ignore failures, for ConfigMaps in the test namespace only."""
    api = client.AdmissionregistrationV1Api(kube_client)
    mutating, validating = f"{namespace}-mutating", f"{namespace}-validating"
    await api.create_mutating_webhook_configuration(
        client.V1MutatingWebhookConfiguration(
            metadata=client.V1ObjectMeta(name=mutating),
            webhooks=[
                client.V1MutatingWebhook(
                    **unreachable_webhook(f"{hook}.{mutating}.test", namespace)
                )
                for hook in "ab"
            ],
        )
    )
    try:
        await api.create_validating_webhook_configuration(
            client.V1ValidatingWebhookConfiguration(
                metadata=client.V1ObjectMeta(name=validating),
                webhooks=[
                    client.V1ValidatingWebhook(
                        **unreachable_webhook(f"{hook}.{validating}.test", namespace)
                    )
                    for hook in "ab"
                ],
            )
        )
        try:
            yield mutating, validating
        finally:
            await api.delete_validating_webhook_configuration(validating)
    finally:
        await api.delete_mutating_webhook_configuration(mutating)


def unreachable_webhook(name: str, namespace: str) -> dict[str, Any]:
    """The fields a mutating and a validating webhook share, as keyword arguments."""
    return {
        "name": name,
        "client_config": client.AdmissionregistrationV1WebhookClientConfig(
            url="https://127.0.0.1:1/x"
        ),
        "failure_policy": "Ignore",
        "side_effects": "None",
        "admission_review_versions": ["v1"],
        "namespace_selector": client.V1LabelSelector(
            match_labels={"kubernetes.io/metadata.name": namespace}
        ),
        "rules": [
            client.V1RuleWithOperations(
                api_groups=[""],
                api_versions=["v1"],
                operations=["CREATE"],
                resources=["configmaps"],
            )
        ],
    }


async def ca_bundles(kube_client: client.ApiClient, mutating: str, validating: str) -> list[str]:
    """The caBundle of every webhook, mutating ones first."""
    api = client.AdmissionregistrationV1Api(kube_client)
    mutating_hooks = (await api.read_mutating_webhook_configuration(mutating)).webhooks
    validating_hooks = (await api.read_validating_webhook_configuration(validating)).webhooks
    return [hook.client_config.ca_bundle for hook in mutating_hooks] + [
        hook.client_config.ca_bundle for hook in validating_hooks
    ]


async def resource_versions(
    kube_client: client.ApiClient, mutating: str, validating: str
) -> tuple[str, str]:
    api = client.AdmissionregistrationV1Api(kube_client)
    return (
        (await api.read_mutating_webhook_configuration(mutating)).metadata.resource_version,
        (await api.read_validating_webhook_configuration(validating)).metadata.resource_version,
    )


def b64(pem: bytes) -> str:
    return base64.b64encode(pem).decode()


async def test_patch_ca_bundle_sets_every_webhook_and_writes_only_changes(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    webhook_configurations: tuple[str, str],
) -> None:
    mutating, validating = webhook_configurations
    bundle = new_bundle(DNS_NAMES, IPS, utc_now())

    await patch_ca_bundle(service_client, bundle.ca_bundle_pem, mutating, validating)

    assert await ca_bundles(kube_client, mutating, validating) == [b64(bundle.ca_bundle_pem)] * 4
    versions = await resource_versions(kube_client, mutating, validating)
    await patch_ca_bundle(service_client, bundle.ca_bundle_pem, mutating, validating)
    assert await resource_versions(kube_client, mutating, validating) == versions


async def test_patch_ca_bundle_skips_a_configuration_named_none(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    webhook_configurations: tuple[str, str],
) -> None:
    mutating, validating = webhook_configurations
    first, second = (new_bundle(DNS_NAMES, IPS, utc_now()) for _ in range(2))
    await patch_ca_bundle(service_client, first.ca_bundle_pem, mutating, validating)

    await patch_ca_bundle(service_client, second.ca_bundle_pem, None, validating)

    expected = [b64(first.ca_bundle_pem)] * 2 + [b64(second.ca_bundle_pem)] * 2
    assert await ca_bundles(kube_client, mutating, validating) == expected


async def test_patch_ca_bundle_of_a_missing_configuration_is_not_found(
    service_client: KubeClient, namespace: str
) -> None:
    bundle = new_bundle(DNS_NAMES, IPS, utc_now())
    with pytest.raises(NotFound):
        await patch_ca_bundle(service_client, bundle.ca_bundle_pem, f"{namespace}-absent", None)


# The cert-manager file source needs no apiserver, only files laid out as a kubelet mounts a
# Secret: each file a symlink through `..data` into a directory swapped in one rename.


def mount_secret(directory: Path, bundle: CertBundle, version: int) -> None:
    payload = directory / f"..{version}"
    payload.mkdir()
    for key, value in secret_data(bundle).items():
        (payload / key).write_bytes(base64.b64decode(value))
    staged = directory / "..data_tmp"
    staged.symlink_to(payload.name)
    os.replace(staged, directory / "..data")
    for key in ("tls.crt", "tls.key"):
        if not (directory / key).is_symlink():
            (directory / key).symlink_to(Path("..data") / key)


def file_source(directory: Path) -> FileCertificateSource:
    return FileCertificateSource(directory / "tls.crt", directory / "tls.key")


async def test_file_source_loads_and_sees_a_swapped_secret(tmp_path: Path) -> None:
    first, second = (new_bundle(DNS_NAMES, IPS, utc_now()) for _ in range(2))
    mount_secret(tmp_path, first, 1)
    source = file_source(tmp_path)

    assert await source.load() == (first.cert_pem, first.key_pem, not_after(first.cert_pem))

    mount_secret(tmp_path, second, 2)
    assert await source.load() == (second.cert_pem, second.key_pem, not_after(second.cert_pem))


async def test_file_source_refuses_a_key_of_another_certificate(tmp_path: Path) -> None:
    first, second = (new_bundle(DNS_NAMES, IPS, utc_now()) for _ in range(2))
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(second.key_pem)
    source = file_source(tmp_path)

    with pytest.raises(ValueError, match="not the private key"):
        await source.load()

    (tmp_path / "tls.key").write_bytes(first.key_pem)
    assert await source.load() == (first.cert_pem, first.key_pem, not_after(first.cert_pem))

"""The services load kubernetes-asyncio a module at a time (kube/lazy_kubernetes.py): every name
the packages export still resolves to what the eager import gives, and a service's imports leave
the model classes it does not use unloaded. Each check runs in a fresh interpreter, since this
one has loaded kubernetes-asyncio already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest


def run(script: str) -> object:
    """What `script` prints (JSON), run in a new interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(result.stdout)


@pytest.mark.parametrize("service", ["reconciler", "webhook", "housekeeper"])
def test_a_service_loads_few_of_the_clients_modules(service: str) -> None:
    loaded = run(
        f"""
        import json, sys
        import torchjob.{service}.__main__
        names = [m for m in sys.modules if m.startswith("kubernetes_asyncio")]
        print(json.dumps(names))
        """
    )
    assert isinstance(loaded, list)
    assert "kubernetes_asyncio.client.models.v1_pod" not in loaded
    assert len(loaded) < 60, loaded


def test_every_exported_name_is_the_one_the_eager_import_gives() -> None:
    script = r"""
        import json, re, sys
        FIRST
        import kubernetes_asyncio, kubernetes_asyncio.client, kubernetes_asyncio.client.models
        import kubernetes_asyncio.client.api
        names = {}
        packages = (
            kubernetes_asyncio.client,
            kubernetes_asyncio.client.api,
            kubernetes_asyncio.client.models,
        )
        for package in packages:
            source = open(package.__file__).read()
            for module, name in re.findall(r"^from ([\w.]+) import (\w+)$", source, re.M):
                value = getattr(package, name)
                what = f"{getattr(value, '__module__', '')}.{getattr(value, '__qualname__', value)}"
                names[package.__name__ + "." + name] = what
        for name in ("client", "config", "watch", "utils", "stream", "dynamic"):
            names["kubernetes_asyncio." + name] = getattr(kubernetes_asyncio, name).__name__
        print(json.dumps(names))
        """
    lazy = run(script.replace("FIRST", "import torchjob.kube.lazy_kubernetes"))
    eager = run(script.replace("FIRST", ""))
    assert isinstance(eager, dict) and len(eager) > 800
    assert lazy == eager


def test_after_an_eager_import_nothing_changes() -> None:
    kinds = run(
        """
        import json
        import kubernetes_asyncio.client
        import torchjob.kube.lazy_kubernetes
        import sys
        print(json.dumps(type(sys.modules["kubernetes_asyncio.client"]).__name__))
        """
    )
    assert kinds == "module"


def test_config_names_are_the_ones_the_eager_import_gives() -> None:
    script = r"""
        import json
        FIRST
        from kubernetes_asyncio import config
        names = {}
        for name in (*config.__all__, "load_config", "KUBE_CONFIG_DEFAULT_LOCATION"):
            value = getattr(config, name)
            where = getattr(value, "__module__", "")
            names[name] = f"{where}.{getattr(value, '__qualname__', value)}"
        print(json.dumps(names))
        """
    lazy = run(script.replace("FIRST", "import torchjob.kube.lazy_kubernetes"))
    eager = run(script.replace("FIRST", ""))
    assert isinstance(eager, dict) and "load_kube_config" in eager
    assert lazy == eager


@pytest.mark.parametrize("service", ["reconciler", "webhook", "housekeeper"])
def test_the_in_cluster_configuration_loads_no_kubeconfig_loader(service: str) -> None:
    loaded = run(
        f"""
        import json, sys
        import torchjob.{service}.__main__
        from kubernetes_asyncio import config
        config.load_incluster_config
        print(json.dumps(sorted(m for m in ("yaml", "rich") if m in sys.modules)))
        """
    )
    assert loaded == []


def test_an_api_class_loads_its_own_module_only() -> None:
    loaded = run(
        """
        import json, sys
        import torchjob.reconciler.__main__
        from kubernetes_asyncio import client
        client.CoreV1Api, client.CustomObjectsApi
        apis = [m for m in sys.modules if m.startswith("kubernetes_asyncio.client.api.")]
        print(json.dumps(apis))
        """
    )
    assert isinstance(loaded, list)
    assert "kubernetes_asyncio.client.api.core_v1_api" in loaded
    assert "kubernetes_asyncio.client.api.batch_v1_api" not in loaded


@pytest.mark.parametrize("service", ["reconciler", "webhook", "housekeeper"])
def test_a_service_runs_none_of_the_deferred_modules(service: str) -> None:
    loaded = run(
        f"""
        import json, sys
        import torchjob.{service}.__main__
        from torchjob.runtime.lean_imports import DEFERRED
        ran = {{name: sorted(set(vars(sys.modules[name])) - {{"__getattr__", *DEFERRED[name]}})
                for name in DEFERRED}}
        print(json.dumps({{"ran": ran, "parts": [m for m in sys.modules if m.startswith(
            ("urllib3.", "dateutil.parser.", "dateutil.tz"))]}}))
        """
    )
    assert isinstance(loaded, dict)
    assert loaded["parts"] == []
    for name, attributes in loaded["ran"].items():
        # Only what the import system sets on a module it has not run yet.
        assert set(attributes) <= {
            "__name__",
            "__doc__",
            "__package__",
            "__loader__",
            "__spec__",
            "__path__",
            "__file__",
            "__cached__",
        }, name


def test_a_deferred_module_is_the_real_one_once_used() -> None:
    script = r"""
        import asyncio, json, sys
        FIRST
        import urllib3, dateutil.parser, multiprocessing.pool
        from kubernetes_asyncio import client

        version = urllib3.__version__  # a name the module sets itself, read first

        async def decoded():
            api = client.ApiClient()
            try:
                meta = api.deserialize(
                    type("R", (), {"data": '{"creationTimestamp": "2024-01-02T03:04:05Z"}'}),
                    "V1ObjectMeta",
                )
                pool = api.pool
                pool.close()
                return [meta.creation_timestamp.isoformat(), type(pool).__qualname__]
            finally:
                await api.close()

        used = {
            "version": version,
            "decoded": asyncio.run(decoded()),
            "headers": urllib3.util.make_headers(basic_auth="user:secret"),
        }
        names = {
            name: sorted(n for n in vars(sys.modules[name]) if not n.startswith("_"))
            for name in ("urllib3", "dateutil.parser", "multiprocessing.pool")
        }
        print(json.dumps({
            **used,
            "names": names,
            "same": [
                sys.modules["urllib3"] is urllib3,
                sys.modules["dateutil.parser"] is dateutil.parser,
            ],
        }))
        """
    deferred = run(script.replace("FIRST", "import torchjob.runtime.lean_imports"))
    eager = run(script.replace("FIRST", ""))
    assert isinstance(eager, dict)
    assert eager["decoded"] == ["2024-01-02T03:04:05+00:00", "ThreadPool"]
    assert deferred == eager

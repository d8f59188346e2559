"""Credentials from a kubeconfig file, of its current context or of one chosen by name; the only
module of the package that imports kubernetes-asyncio.

A kubeconfig whose user authenticates by token, token file or client certificate (every one the
services are given: a service account token, an admin certificate) is read here. Any other way of
authenticating (an exec plugin, an auth provider, a password), or several files in $KUBECONFIG,
is kubernetes-asyncio's to load. Its loader is imported only then: importing it imports its whole
package, with every API and model class (about 30 MB of resident memory and a third of a second).
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path
from typing import Any

import yaml

from torchjob.kube.credentials import (
    ConfigError,
    Credentials,
    StaticToken,
    Token,
    TokenFile,
    tls_context,
)

# The user fields read here; a user with any other is loaded by kubernetes-asyncio.
USER_FIELDS = frozenset(
    {
        "token",
        "tokenFile",
        "client-certificate",
        "client-certificate-data",
        "client-key",
        "client-key-data",
    }
)
Section = dict[str, Any]
# Where kubectl and client-go look when neither a flag nor $KUBECONFIG names a kubeconfig.
DEFAULT_PATH = "~/.kube/config"


async def load(path: str, context: str | None = None) -> Credentials:
    """The credentials of the current context of the kubeconfig at `path` (or of the files
    `path` lists, separated as in $KUBECONFIG), or of the context named `context`."""
    if os.pathsep not in path:
        file = _expanded(path)
        config = _read(file)
        user = _current(config, "user", context)
        if set(user) <= USER_FIELDS:
            return _credentials(_current(config, "cluster", context), user, file.parent)
    return await _loaded_by_kubernetes_asyncio(path, context)


def context_namespace(path: str, context: str | None = None) -> str | None:
    """The namespace the current context (or the one named `context`) of the kubeconfig at
    `path` names, if it names one; None as well for a kubeconfig that cannot be read."""
    try:
        config = _read(_expanded(path))
        chosen = _context(config, context)
    except ConfigError:
        return None
    namespace = chosen.get("namespace")
    return namespace if isinstance(namespace, str) and namespace else None


def load_server(path: str) -> Credentials:
    """Where the current context's apiserver is and the CA it is trusted by, with no credentials
    at all: not the kubeconfig user's token, nor its client certificate (the console sends each
    of its users' own)."""
    file = _expanded(path)
    return _credentials(_current(_read(file), "cluster"), {}, file.parent)


def load_token(path: str) -> Token:
    """The current context user's token (or token file): the console's own, in proxy mode."""
    file = _expanded(path)
    user = _current(_read(file), "user")
    if not user.get("token") and user.get("tokenFile"):
        return TokenFile(file.parent / user["tokenFile"])
    return StaticToken(user.get("token"))


def _expanded(path: str) -> Path:
    return Path(path).expanduser()  # KUBECONFIG=~/.kube/config, as client-go reads it


def _read(path: Path) -> Section:
    try:
        config = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"cannot read the kubeconfig {path}: {error}") from error
    if not isinstance(config, dict):
        raise ConfigError(f"the kubeconfig {path} is not a mapping")
    return config


def _current(config: Section, kind: str, context_name: str | None = None) -> Section:
    """The cluster or user (`kind`) of the context named `context_name` (the current context
    when None), as its section."""
    name = _context(config, context_name).get(kind)
    return _named(config, f"{kind}s", name, kind) if name or kind == "cluster" else {}


def _context(config: Section, name: str | None) -> Section:
    """The context named `name`, or the current context when None."""
    return _named(config, "contexts", name or config.get("current-context"), "context")


def _named(config: Section, collection: str, name: object, field: str) -> Section:
    for entry in config.get(collection) or ():
        if isinstance(entry, dict) and entry.get("name") == name:
            section = entry.get(field) or {}
            if isinstance(section, dict):
                return section
    raise ConfigError(f"the kubeconfig has no {collection} entry named {name!r}")


def _credentials(cluster: Section, user: Section, base: Path) -> Credentials:
    server = cluster.get("server")
    if not server:
        raise ConfigError("the kubeconfig's cluster names no server")
    ca_data = cluster.get("certificate-authority-data")
    ca_file = cluster.get("certificate-authority")
    with tempfile.TemporaryDirectory(prefix="torchjob-kubeconfig-") as scratch:
        # The TLS context reads the client certificate and key when it is made; from files only.
        context = tls_context(
            ca_file=str(base / ca_file) if ca_file and not ca_data else None,
            ca_data=base64.b64decode(ca_data).decode() if ca_data else None,
            cert_file=_as_file(user, "client-certificate", base, Path(scratch)),
            key_file=_as_file(user, "client-key", base, Path(scratch)),
            verify=not cluster.get("insecure-skip-tls-verify", False),
        )
    token: Token = StaticToken(user.get("token"))
    if not user.get("token") and user.get("tokenFile"):
        token = TokenFile(base / user["tokenFile"])
    return Credentials(
        str(server).rstrip("/"),
        context,
        token,
        server_name=cluster.get("tls-server-name"),
        proxy=cluster.get("proxy-url"),
    )


def _as_file(user: Section, field: str, base: Path, scratch: Path) -> str | None:
    """The path of `field`'s file: as the kubeconfig names it (relative to the kubeconfig), or
    its `-data` written to `scratch`."""
    data = user.get(f"{field}-data")
    if data:
        written = scratch / field
        written.write_bytes(base64.b64decode(data))
        return str(written)
    named = user.get(field)
    return str(base / named) if named else None


async def _loaded_by_kubernetes_asyncio(path: str, context: str | None) -> Credentials:
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import ConfigException, load_kube_config

    configuration = Configuration()
    try:
        await load_kube_config(
            config_file=path,
            context=context,
            client_configuration=configuration,
            persist_config=False,
        )
    except ConfigException as error:
        raise ConfigError(f"cannot load the kubeconfig {path}: {error}") from error
    authorization = await configuration.get_api_key_with_prefix("BearerToken")
    tls = tls_context(
        ca_file=configuration.ssl_ca_cert,
        cert_file=configuration.cert_file,
        key_file=configuration.key_file,
        verify=configuration.verify_ssl,
    )
    return Credentials(
        str(configuration.host).rstrip("/"),
        tls,
        _Header(authorization),
        server_name=configuration.tls_server_name,
        proxy=configuration.proxy,
    )


class _Header:
    """An Authorization header as kubernetes-asyncio's configuration makes it."""

    def __init__(self, header: str | None) -> None:
        self._header = header or None

    def authorization(self) -> str | None:
        return self._header

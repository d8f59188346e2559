"""The console's vendored front-end files are exactly the ones VENDOR.json records (checked
offline), and tools/vendor_frontend.py refuses a tarball or a file that is not the pinned one."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.tools import load_tool

ROOT = Path(__file__).parents[2]
VENDOR = ROOT / "services" / "torchjob" / "console" / "static" / "vendor"


def recorded_files() -> dict[str, dict[str, str]]:
    files: dict[str, dict[str, str]] = json.loads((VENDOR / "VENDOR.json").read_text())["files"]
    return files


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_tool("vendor_frontend")


def test_every_recorded_file_is_there_with_its_checksum() -> None:
    files = recorded_files()
    assert files, "VENDOR.json lists no file"
    for name, pin in files.items():
        path = VENDOR / name
        assert path.is_file(), f"{name} is listed in VENDOR.json but missing: run `make vendor`"
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        assert digest == pin["sha256"], f"{name} is not the vendored file: run `make vendor`"


def test_no_file_in_the_folder_is_unlisted() -> None:
    listed = set(recorded_files()) | {"VENDOR.json"}
    on_disk = {
        str(path.relative_to(VENDOR))
        for path in VENDOR.rglob("*")
        if path.is_file() and path.relative_to(VENDOR).parts[0] != "LICENSES"
    }
    assert on_disk - listed == set(), "files not recorded in VENDOR.json"


def test_each_package_has_its_licence_text_and_one_pinned_release() -> None:
    releases: dict[str, set[tuple[str, str, str]]] = {}
    for pin in recorded_files().values():
        release = (pin["version"], pin["integrity"], pin["license"])
        releases.setdefault(pin["package"], set()).add(release)
        assert pin["integrity"].startswith("sha512-")
        assert pin["license"]
    for package, pinned in releases.items():
        assert len(pinned) == 1, f"{package}'s files come from different releases: {pinned}"
        assert (VENDOR / "LICENSES" / f"{package}.txt").read_text().strip()
    licence_files = {path.stem for path in (VENDOR / "LICENSES").iterdir()}
    assert licence_files == set(releases)


def test_the_pinned_majors_and_the_htmx_version_string() -> None:
    files = recorded_files()
    majors = {pin["package"]: pin["version"].split(".")[0] for pin in files.values()}
    assert majors == {"htmx.org": "2", "htmx-ext-sse": "2", "uplot": "1"}
    htmx = (VENDOR / "htmx.min.js").read_text()
    assert f'version:"{files["htmx.min.js"]["version"]}"' in htmx


def test_newest_within_major_skips_prereleases_and_other_majors(tool: ModuleType) -> None:
    versions = ["2.0.9", "2.0.10", "4.0.1", "2.1.0-beta1", "2.0.11", "1.9.12", "2.0.x"]
    assert tool.newest_within_major(versions, 2) == "2.0.11"
    assert tool.newest_within_major(versions, 1) == "1.9.12"
    with pytest.raises(tool.VendorError):
        tool.newest_within_major(versions, 3)


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def test_integrity_check(tool: ModuleType) -> None:
    tool.check_integrity(b"tarball", integrity_of(b"tarball"))
    with pytest.raises(tool.VendorError):
        tool.check_integrity(b"tampered", integrity_of(b"tarball"))
    with pytest.raises(tool.VendorError, match="no sha512"):
        tool.check_integrity(b"tarball", "sha1-" + base64.b64encode(b"x" * 20).decode())


def npm_tarball(name: str, version: str, files: dict[str, bytes]) -> bytes:
    manifest = json.dumps({"name": name, "version": version, "license": "MIT"}).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, data in {"package.json": manifest, "LICENSE": b"MIT License\n", **files}.items():
            info = tarfile.TarInfo(f"package/{path}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    # gzip's header holds the time it was written: without mtime=0 the same package made in two
    # different seconds would have two integrities.
    return gzip.compress(buffer.getvalue(), mtime=0)


class FakeRegistry:
    """The registry's answers for every wanted package at one version each, from memory."""

    def __init__(self, tool: ModuleType, tamper: str = "") -> None:
        self.answers: dict[str, bytes] = {}
        for package in {wanted.package for wanted in tool.WANTED}:
            paths = [w.candidates[-1] for w in tool.WANTED if w.package == package]
            contents = {path: f"{package} {path}".encode() for path in paths}
            tarball = npm_tarball(package, "2.0.1", contents)
            url = f"https://tarballs.test/{package}.tgz"
            integrity = integrity_of(tarball)
            self.answers[url] = tarball + (b"!" if package == tamper else b"")
            dist = {"tarball": url, "integrity": integrity}
            self.answers[tool.package_url(package, "2.0.1")] = json.dumps({"dist": dist}).encode()
            versions: dict[str, object] = {"versions": {"2.0.1": {}, "3.0.0": {}, "1.0.0": {}}}
            self.answers[tool.package_url(package)] = json.dumps(versions).encode()

    def fetch(self, url: str, accept: str = "") -> bytes:
        return self.answers[url]


def vendor_offline(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, folder: Path, upgrade: bool, tamper: str = ""
) -> Any:
    monkeypatch.setattr(tool, "fetch", FakeRegistry(tool, tamper).fetch)
    return tool.vendor(folder, upgrade=upgrade)


def test_upgrade_then_refetch_writes_and_verifies(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The fake registry lists 1.0.0, 2.0.1 and 3.0.0 but serves only 2.0.1: the major-2 packages.
    monkeypatch.setattr(tool, "WANTED", tuple(w for w in tool.WANTED if w.major == 2))
    files = vendor_offline(tool, monkeypatch, tmp_path, upgrade=True)
    assert {pin["version"] for pin in files.values()} == {"2.0.1"}
    assert (tmp_path / "htmx-ext-sse.js").read_bytes() == b"htmx-ext-sse sse.js"
    assert (tmp_path / "LICENSES" / "htmx.org.txt").read_text() == "MIT License\n"
    pins = (tmp_path / "VENDOR.json").read_text()
    assert vendor_offline(tool, monkeypatch, tmp_path, upgrade=False) == files
    assert (tmp_path / "VENDOR.json").read_text() == pins


def test_a_tampered_tarball_or_a_changed_pin_writes_nothing(
    tool: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tool, "WANTED", tuple(w for w in tool.WANTED if w.major == 2))
    vendor_offline(tool, monkeypatch, tmp_path, upgrade=True)
    (tmp_path / "htmx.min.js").write_text("edited")
    with pytest.raises(tool.VendorError, match="tarball digest"):
        vendor_offline(tool, monkeypatch, tmp_path, upgrade=False, tamper="htmx.org")
    assert (tmp_path / "htmx.min.js").read_text() == "edited"
    document = json.loads((tmp_path / "VENDOR.json").read_text())
    document["files"]["htmx-ext-sse.js"]["sha256"] = "0" * 64
    (tmp_path / "VENDOR.json").write_text(json.dumps(document))
    with pytest.raises(tool.VendorError, match="sha256 differs"):
        vendor_offline(tool, monkeypatch, tmp_path, upgrade=False)
    assert (tmp_path / "htmx.min.js").read_text() == "edited"

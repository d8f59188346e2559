"""The console's front-end libraries, vendored from the npm registry as single files, no build step.

`python tools/vendor_frontend.py` (`make vendor`) fetches exactly the versions pinned in
services/torchjob/console/static/vendor/VENDOR.json, verifies each tarball against the pinned
`dist.integrity` (sha512, the one the registry's metadata states) and each file against its
recorded sha256, and writes the files and each package's LICENSE text (LICENSES/<package>.txt).
`--upgrade` picks the newest stable release within each package's pinned major, fetches it the
same way and rewrites VENDOR.json. tests/unit/test_vendored_frontend.py checks offline that the
files on disk are the recorded ones. Only the standard library: it runs before any venv exists.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VENDOR_DIR = ROOT / "services" / "torchjob" / "console" / "static" / "vendor"
PINS_FILE = VENDOR_DIR / "VENDOR.json"
LICENSES_DIR = "LICENSES"
REGISTRY = "https://registry.npmjs.org"
TIMEOUT_SECONDS = 60
# A bound on any one download: these tarballs are well under a megabyte.
MAX_DOWNLOAD_BYTES = 32 * 1024 * 1024
LICENSE_NAMES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "LICENCE", "license", "LICENSE-MIT")
# A package.json without a `license` field (htmx-ext-sse has none): the licence is read from the
# first line of its LICENSE text, and only these titles are recognised; anything else stops.
LICENSE_TITLES = {
    "BSD Zero Clause License": "0BSD",
    "MIT License": "MIT",
    "The MIT License (MIT)": "MIT",
}


@dataclass(frozen=True)
class Wanted:
    """One vendored file: where it comes from in which package, and its name in VENDOR_DIR."""

    package: str
    major: int
    destination: str
    candidates: tuple[str, ...]  # paths inside the package, the first one present is taken


WANTED = (
    Wanted("htmx.org", 2, "htmx.min.js", ("dist/htmx.min.js",)),
    Wanted("htmx-ext-sse", 2, "htmx-ext-sse.js", ("dist/sse.min.js", "sse.js")),
    Wanted("uplot", 1, "uPlot.iife.min.js", ("dist/uPlot.iife.min.js",)),
    Wanted("uplot", 1, "uPlot.min.css", ("dist/uPlot.min.css",)),
)


class VendorError(Exception):
    """A download, a checksum or a pin that does not hold: nothing more is written."""


@dataclass(frozen=True)
class Package:
    """One release's tarball, verified, with the parts of it that are vendored."""

    name: str
    version: str
    integrity: str
    license: str
    license_text: bytes
    members: Mapping[str, bytes]  # path inside the package -> contents


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_integrity(data: bytes, integrity: str) -> None:
    """Subresource-integrity string (`sha512-<base64>`, as npm records it) against the bytes."""
    sha512 = [part for part in integrity.split() if part.startswith("sha512-")]
    if not sha512:
        raise VendorError(f"integrity {integrity!r} has no sha512 digest")
    actual = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
    if actual not in sha512:
        raise VendorError(f"tarball digest {actual} is not the recorded {integrity}")


def version_key(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a stable release; None for a prerelease or anything else."""
    parts = version.split(".")
    if len(parts) != 3 or not all(part.isdigit() for part in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def newest_within_major(versions: Sequence[str], major: int) -> str:
    stable = [(key, v) for v in versions if (key := version_key(v)) and key[0] == major]
    if not stable:
        raise VendorError(f"no stable release with major version {major}")
    return max(stable)[1]


def fetch(url: str, accept: str = "application/json") -> bytes:
    if urllib.parse.urlsplit(url).scheme != "https":
        raise VendorError(f"refusing a non-HTTPS URL: {url}")
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
        data: bytes = response.read(MAX_DOWNLOAD_BYTES + 1)
    if len(data) > MAX_DOWNLOAD_BYTES:
        raise VendorError(f"{url} is larger than {MAX_DOWNLOAD_BYTES} bytes")
    return data


def fetch_json(url: str, accept: str = "application/json") -> dict[str, Any]:
    document = json.loads(fetch(url, accept))
    if not isinstance(document, dict):
        raise VendorError(f"{url} did not answer a JSON object")
    return document


def package_url(name: str, version: str = "") -> str:
    quoted = urllib.parse.quote(name, safe="@")
    return f"{REGISTRY}/{quoted}/{version}" if version else f"{REGISTRY}/{quoted}"


def newest_version(name: str, major: int) -> str:
    # The abbreviated metadata ("corgi") lists every version without each one's package.json.
    document = fetch_json(package_url(name), "application/vnd.npm.install-v1+json")
    return newest_within_major(list(document.get("versions", {})), major)


def read_members(tarball: bytes) -> dict[str, bytes]:
    """Every regular file of an npm tarball, by its path under its one top folder (`package/`)."""
    members: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive.getmembers():
            _folder, _, path = member.name.partition("/")
            extracted = archive.extractfile(member) if member.isfile() else None
            if extracted is not None and path:
                members[path] = extracted.read()
    return members


def license_of(manifest: Mapping[str, Any], license_text: bytes, name: str) -> str:
    declared = manifest.get("license")
    if isinstance(declared, str) and declared:
        return declared
    first_line = license_text.decode("utf-8", "replace").strip().splitlines()[:1]
    title = first_line[0].strip() if first_line else ""
    if title in LICENSE_TITLES:
        return LICENSE_TITLES[title]
    raise VendorError(f"{name}: package.json names no licence and its LICENSE is not recognised")


def download(name: str, version: str, pinned_integrity: str | None) -> Package:
    """The release's tarball, checked against the registry's integrity and (when pinned) the pin."""
    metadata = fetch_json(package_url(name, version))
    dist = metadata.get("dist", {})
    integrity, tarball_url = dist.get("integrity"), dist.get("tarball")
    if not isinstance(integrity, str) or not isinstance(tarball_url, str):
        raise VendorError(f"{name}@{version}: the registry gives no tarball and integrity")
    if pinned_integrity is not None and integrity != pinned_integrity:
        raise VendorError(f"{name}@{version}: registry integrity {integrity} is not the pinned one")
    tarball = fetch(tarball_url, "application/octet-stream")
    check_integrity(tarball, integrity)
    members = read_members(tarball)
    manifest = json.loads(members.get("package.json", b"{}"))
    if manifest.get("name") != name or manifest.get("version") != version:
        raise VendorError(f"{name}@{version}: the tarball's package.json names another release")
    license_file = next((n for n in LICENSE_NAMES if n in members), None)
    if license_file is None:
        raise VendorError(f"{name}@{version}: the tarball has no LICENSE file")
    license_text = members[license_file]
    return Package(
        name, version, integrity, license_of(manifest, license_text, name), license_text, members
    )


def pick_path(package: Package, wanted: Wanted) -> str:
    for path in wanted.candidates:
        if path in package.members:
            return path
    raise VendorError(f"{package.name}@{package.version} has none of {wanted.candidates}")


def entry(package: Package, path: str) -> dict[str, str]:
    return {
        "package": package.name,
        "version": package.version,
        "path": path,
        "integrity": package.integrity,
        "sha256": sha256_hex(package.members[path]),
        "license": package.license,
    }


def load_pins(pins_file: Path) -> dict[str, dict[str, str]]:
    if not pins_file.exists():
        raise VendorError(f"{pins_file} is missing: `{Path(__file__).name} --upgrade` writes it")
    files: dict[str, dict[str, str]] = json.loads(pins_file.read_text())["files"]
    return files


def pinned_major(pin: Mapping[str, str] | None, wanted: Wanted) -> int:
    key = version_key(pin["version"]) if pin else None
    return key[0] if key else wanted.major


def versions_to_fetch(pins: Mapping[str, Mapping[str, str]], upgrade: bool) -> dict[str, str]:
    """package -> version: the pinned ones, or with --upgrade the newest within each major."""
    chosen: dict[str, str] = {}
    for wanted in WANTED:
        pin = pins.get(wanted.destination)
        if upgrade:
            if wanted.package not in chosen:
                chosen[wanted.package] = newest_version(wanted.package, pinned_major(pin, wanted))
        elif pin is None:
            raise VendorError(f"{wanted.destination} is not pinned: run with --upgrade")
        elif chosen.setdefault(wanted.package, pin["version"]) != pin["version"]:
            raise VendorError(f"{wanted.package}: its files are pinned to different versions")
    return chosen


def vendor(vendor_dir: Path, upgrade: bool) -> dict[str, dict[str, str]]:
    """Fetch, verify and write every wanted file; return VENDOR.json's `files` as written."""
    pins_file = vendor_dir / "VENDOR.json"
    pins = load_pins(pins_file) if pins_file.exists() or not upgrade else {}
    packages: dict[str, Package] = {}
    for name, version in versions_to_fetch(pins, upgrade).items():
        integrity = None if upgrade else pins_integrity(pins, name)
        packages[name] = download(name, version, integrity)
    files: dict[str, dict[str, str]] = {}
    for wanted in WANTED:
        package = packages[wanted.package]
        path = pick_path(package, wanted) if upgrade else pins[wanted.destination]["path"]
        if path not in package.members:
            raise VendorError(f"{package.name}@{package.version} has no {path}")
        files[wanted.destination] = entry(package, path)
        pinned_sha256 = None if upgrade else pins[wanted.destination]["sha256"]
        if pinned_sha256 not in (None, files[wanted.destination]["sha256"]):
            raise VendorError(f"{wanted.destination}: sha256 differs from the pinned one")
    write(vendor_dir, packages, files)
    return files


def pins_integrity(pins: Mapping[str, Mapping[str, str]], name: str) -> str:
    return next(pin["integrity"] for pin in pins.values() if pin["package"] == name)


def write(
    vendor_dir: Path, packages: Mapping[str, Package], files: dict[str, dict[str, str]]
) -> None:
    """Only after every check passed: the files, the licences, then the pins."""
    (vendor_dir / LICENSES_DIR).mkdir(parents=True, exist_ok=True)
    for destination, pin in files.items():
        (vendor_dir / destination).write_bytes(packages[pin["package"]].members[pin["path"]])
    for package in packages.values():
        (vendor_dir / LICENSES_DIR / f"{package.name}.txt").write_bytes(package.license_text)
    document = {
        "comment": "Written by tools/vendor_frontend.py (make vendor); do not edit by hand.",
        "files": files,
    }
    (vendor_dir / "VENDOR.json").write_text(json.dumps(document, indent=2) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--upgrade",
        action="store_true",
        help="take the newest stable release within each pinned major and rewrite VENDOR.json",
    )
    parser.add_argument("--vendor-dir", type=Path, default=VENDOR_DIR, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        files = vendor(args.vendor_dir, args.upgrade)
    except (VendorError, OSError, tarfile.TarError, ValueError) as error:
        print(f"vendor_frontend: {error}", file=sys.stderr)
        return 1
    for destination, pin in files.items():
        print(f"{destination}: {pin['package']}@{pin['version']} {pin['path']} ({pin['license']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

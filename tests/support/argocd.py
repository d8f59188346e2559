"""The Argo CD health check (docs/argocd-health.lua) run by a real Lua interpreter on an object,
as Argo CD runs it: the object as a Lua table named `obj`, the script's body a function whose
returned table says `status` and `message`. Argo CD's gopher-lua is Lua 5.1; the script uses
nothing that 5.1 and 5.4 do differently. `make lua` (hack/install-lua.sh) installs Debian's."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from support.controlplane import REPO_ROOT

SCRIPT = REPO_ROOT / "docs" / "argocd-health.lua"


def lua_binary() -> str:
    found = shutil.which("lua") or shutil.which("lua5.4") or shutil.which("lua5.3")
    if found is None:
        raise RuntimeError("no Lua interpreter: run `make lua` (hack/install-lua.sh)")
    return found


def to_lua(value: Any) -> str:
    """A Lua literal of a JSON value (null as nil, as Argo CD's conversion leaves it out)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return _lua_string(value)
    if isinstance(value, list):
        return "{" + ", ".join(to_lua(v) for v in value) + "}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"[{_lua_string(k)}] = {to_lua(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"not JSON: {value!r}")


def _lua_string(text: str) -> str:
    """A Lua 5.1 string literal: printable ASCII as it is, every other byte of its UTF-8 as a
    decimal escape."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in ('"', "\\") or byte < 32 or byte > 126:
            out.append(f"\\{byte:03d}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def health(obj: dict[str, Any]) -> tuple[str, str]:
    """(status, message) the health check gives `obj`."""
    program = "\n".join(
        [
            f"local obj = {to_lua(obj)}",
            "local function check()",
            SCRIPT.read_text(),
            "end",
            "local hs = check()",
            'io.write(hs.status, "\\n", hs.message or "")',
        ]
    )
    result = subprocess.run(
        [lua_binary(), "-"], input=program, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    status, _, message = result.stdout.partition("\n")
    return status, message

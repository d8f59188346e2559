"""docs/settings.md, written from the services' setting declarations (runtime/settings.py and each
service's settings.py): `python tools/settings_doc.py > docs/settings.md` (`make generate`).
tests/unit/test_settings_doc.py fails when the file is stale."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from torchjob.console import settings as console
from torchjob.housekeeper import settings as housekeeper
from torchjob.reconciler import settings as reconciler
from torchjob.runtime.settings import Setting
from torchjob.webhook import settings as webhook

HEADER = """# Service settings

Generated from the declarations in `services/torchjob/runtime/settings.py` and each service's
`settings.py` by `tools/settings_doc.py` (`make generate`); do not edit.

Each setting is a flag; its environment variable, when set, changes the default, and the flag
wins over it. The Helm chart passes every setting it configures as a flag (its values are in
`charts/torchjob/values.yaml`), and the pod's name as `TORCHJOB_POD_NAME`. A service reports at
start each `TORCHJOB_*` variable that none of its settings reads, with the name it was probably
meant to be, and each one a flag given overrides.
"""


def default_text(setting: Setting) -> str:
    if setting.documented_default:
        return setting.documented_default
    if isinstance(setting.default, bool):
        return "off" if not setting.default else "on"
    if setting.default is None or setting.default == "":
        return "none"
    return f"`{setting.default}`"


def table(declared: Sequence[Setting]) -> str:
    rows = ["| flag | variable | default | meaning |", "| --- | --- | --- | --- |"]
    for s in declared:
        flag = (
            f"`{s.flag}`" if not isinstance(s.default, bool) else f"`{s.flag}`, `--no-{s.flag[2:]}`"
        )
        meaning = s.help + (f" (one of {', '.join(s.choices)})" if s.choices else "")
        rows.append(f"| {flag} | `{s.variable}` | {default_text(s)} | {meaning} |")
    return "\n".join(rows)


def document() -> str:
    sections = [
        ("webhook", "`python -m torchjob.webhook`", webhook.declared({})),
        ("reconciler", "`python -m torchjob.reconciler`", reconciler.declared()),
        ("housekeeper", "`python -m torchjob.housekeeper`", housekeeper.declared()),
        ("console", "`python -m torchjob.console`", console.declared({})),
    ]
    parts = [HEADER]
    for name, command, declared in sections:
        parts.append(f"## {name}\n\n{command}\n\n{table(declared)}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(document())

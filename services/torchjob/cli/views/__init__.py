"""What the CLI makes of objects and flags, pure: the text the cluster commands print (tables,
description, quantities), the job `torchjob submit` builds from its flags (submission) and the
local process a replica's pod becomes for `torchjob run` (local, run_status). Objects, flags and
the time come in, text and plain dicts go out: no I/O, which pyproject.toml's import-linter
contract "CLI views do no I/O" keeps true. They build on the pure layers (api/, render/,
lifecycle/) only; the CLI's commands around them do the reading, writing and waiting."""

"""What people read, pure: the words, figures and forms the CLI and the console show. Objects,
flags and the time come in, text and plain values go out: no I/O, and no `kube`, `runtime` or
service reached even through another module, which pyproject.toml's import-linter contract
"Views do no I/O" keeps true. Views build on the pure layers (api/, render/, lifecycle/) only;
the commands and pages around them do the reading, writing and waiting.

Shared by both: `summary` (a job's and a pod's state in words), `quantities` (resource figures),
`replica_command` (the command line a job's replicas run). The CLI's own are in `cli/`, the
console's in `console/`."""

"""Service settings, each declared once (a `Setting`): its flag, the environment variable that gives
its default, the default, and what it means. From the declarations follow each service's parser
(`parser_of`), its settings object (`values_of`), the variables it reads (a misspelled one is
reported at start, `undeclared_variables`), and the chart's check that every flag it renders is
one the service declares (tests/chart).

The chart passes every setting it configures as a flag. An environment variable only changes a
default, for running a service by hand or under another installer; a flag wins over it, and a
variable a flag overrides is reported at start."""

from __future__ import annotations

import argparse
import difflib
import os
import socket
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

PREFIX = "TORCHJOB_"
TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
# Set in every pod of the chart (from the downward API), read by the leader-elected services only.
SET_IN_EVERY_POD = frozenset({"TORCHJOB_POD_NAME"})

# A job of N replicas asks for 2N creations at once (a pod and a Service each), then a status
# write per change. controller-runtime's 20/30 would make a 50-replica job wait seconds for its
# pods; 50/100 starts it in one burst and sustains 2.5x that, while the apiserver's own priority
# and fairness still protects it from us.
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100


@dataclass(frozen=True, slots=True)
class Setting:
    flag: str  # "--max-connections"
    variable: str  # the environment variable whose value is the default: "TORCHJOB_..."
    default: Any  # its type is the setting's: str, int, float, bool; None for an optional text
    help: str = ""
    dest: str = ""  # the settings object's field, when it is not the flag's name
    choices: tuple[str, ...] = ()
    # A check of the parsed value: the problem, or None.
    check: Callable[[Any], str | None] | None = None
    # The default as docs/settings.md states it, where it depends on the machine.
    documented_default: str = ""

    @property
    def field(self) -> str:
        return self.dest or self.flag.removeprefix("--").replace("-", "_")

    def add_to(self, parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> None:
        given = environ.get(self.variable)
        help_text = f"{self.help} (${self.variable})" if self.help else f"${self.variable}"
        options: dict[str, Any] = {"dest": self.field, "help": help_text}
        default: Any
        if self.choices:
            options["choices"] = self.choices
        if isinstance(self.default, bool):
            default = self.default if given is None else given.strip().lower() in TRUE_WORDS
            options["action"] = argparse.BooleanOptionalAction
        elif self.default is None:
            default = given or None
        else:
            # A variable's text is converted by argparse, which names the flag when it is not
            # a number, and not at all when the flag is given.
            default = self.default if given is None else given
            options["type"] = type(self.default)
        parser.add_argument(self.flag, default=default, **options)


def parser_of(
    prog: str, description: str, declared: Sequence[Setting], environ: Mapping[str, str]
) -> argparse.ArgumentParser:
    """The service's parser, each flag's default from its variable in `environ`; a variable of
    ours that no setting reads is reported on stderr."""
    warn_of_undeclared(environ, declared, sys.stderr)
    parser = argparse.ArgumentParser(prog=prog, description=description)
    for setting in declared:
        setting.add_to(parser, environ)
    return parser


def values_of(
    parser: argparse.ArgumentParser,
    declared: Sequence[Setting],
    argv: list[str] | None,
    environ: Mapping[str, str],
) -> dict[str, Any]:
    """The parsed settings by field; a value its check refuses ends the process as argparse
    does, naming the flag. A variable that a flag given overrides is reported on stderr."""
    given = sys.argv[1:] if argv is None else argv
    for setting in declared:
        flag_given = any(a == setting.flag or a.startswith(f"{setting.flag}=") for a in given)
        if flag_given and setting.variable in environ:
            sys.stderr.write(
                f"warning: {setting.variable} is set, but {setting.flag} is given and wins\n"
            )
    parsed = parser.parse_args(argv)
    values = {setting.field: getattr(parsed, setting.field) for setting in declared}
    for setting in declared:
        problem = setting.check(values[setting.field]) if setting.check else None
        if problem:
            parser.error(f"{setting.flag}: {problem}")
    return values


def undeclared_variables(environ: Mapping[str, str], declared: Iterable[Setting]) -> list[str]:
    """The TORCHJOB_* variables set that no setting of the service reads: a misspelled name
    would otherwise leave its setting at the default without a word."""
    known = {setting.variable for setting in declared} | SET_IN_EVERY_POD
    return sorted(name for name in environ if name.startswith(PREFIX) and name not in known)


def warn_of_undeclared(
    environ: Mapping[str, str], declared: Sequence[Setting], stderr: TextIO
) -> None:
    """A line on stderr for each TORCHJOB_* variable no setting reads, with the name it was
    probably meant to be. A warning, not an error: every service of one pod's environment is
    not the same service, and a variable a newer release reads must not stop this one."""
    known = [setting.variable for setting in declared]
    for name in undeclared_variables(environ, declared):
        close = difflib.get_close_matches(name, known, n=1)
        meant = f"; did you mean {close[0]}?" if close else ""
        stderr.write(f"warning: {name} is set, but no setting of this service reads it{meant}\n")


KUBEFLOW = Setting(
    "--kubeflow",
    f"{PREFIX}KUBEFLOW",
    False,
    "also run Kubeflow's PyTorchJobs (kubeflow.org/v1), whose CRD must be installed",
)
TRAINER = Setting(
    "--trainer",
    f"{PREFIX}TRAINER",
    False,
    "also run Kubeflow Trainer's TrainJobs (trainer.kubeflow.org/v1alpha1) from their training "
    "runtimes, whose CRDs must be installed",
)


def default_of(declared: Iterable[Setting], field: str) -> Any:
    """The default of the setting that fills `field`: what a settings dataclass gives a field
    it does not require, read from the declaration so that it is written once."""
    return next(setting.default for setting in declared if setting.field == field)


def common_settings(namespace_help: str) -> tuple[Setting, ...]:
    """What every service takes: its namespace, probe port, kubeconfig, log level and whether it
    runs Kubeflow's PyTorchJobs and Trainer's TrainJobs too."""
    return (
        Setting("--namespace", f"{PREFIX}NAMESPACE", "torchjob-system", namespace_help),
        Setting(
            "--probe-port",
            f"{PREFIX}PROBE_PORT",
            8080,
            "the plain-HTTP port of /healthz, /readyz, /metrics",
        ),
        Setting("--kubeconfig", "KUBECONFIG", None, "a kubeconfig file; else in-cluster"),
        Setting("--log-level", f"{PREFIX}LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR"),
        KUBEFLOW,
        TRAINER,
    )


def leader_settings(service: str, default_workers: int) -> tuple[Setting, ...]:
    """The settings of a leader-elected controller (the reconciler, the housekeeper)."""
    prefix = f"{PREFIX}{service.upper()}_"
    return (
        *common_settings("where the leader Lease lives"),
        Setting("--lease-name", f"{prefix}LEASE", f"torchjob-{service}", "the leader Lease"),
        Setting(
            "--identity",
            f"{PREFIX}POD_NAME",
            socket.gethostname(),
            "this candidate's name in the Lease",
            documented_default="the host name",
        ),
        # kube-controller-manager's flags and defaults: a standby takes over at most about
        # lease-duration + retry-period after the leader vanishes; the leader stops acting once
        # it has failed to renew for renew-deadline (an apiserver outage longer than that
        # restarts it).
        Setting(
            "--leader-elect-lease-duration",
            f"{PREFIX}LEADER_ELECT_LEASE_DURATION",
            15.0,
            "seconds a standby waits after the last renewal before taking the lease",
            dest="lease_duration",
        ),
        Setting(
            "--leader-elect-renew-deadline",
            f"{PREFIX}LEADER_ELECT_RENEW_DEADLINE",
            10.0,
            "seconds the leader keeps trying to renew before it gives up leading",
            dest="renew_deadline",
        ),
        Setting(
            "--leader-elect-retry-period",
            f"{PREFIX}LEADER_ELECT_RETRY_PERIOD",
            2.0,
            "seconds between attempts to acquire or renew the lease",
            dest="retry_period",
        ),
        Setting("--workers", f"{prefix}WORKERS", default_workers, "concurrent reconciles"),
        Setting(
            "--max-connections",
            f"{PREFIX}MAX_CONNECTIONS",
            100,
            "concurrent requests to the apiserver",
        ),
        Setting(
            "--qps",
            f"{PREFIX}KUBE_QPS",
            DEFAULT_QPS,
            "requests a second to the apiserver, watches aside (0 or less: no client-side limit)",
        ),
        Setting(
            "--burst",
            f"{PREFIX}KUBE_BURST",
            DEFAULT_BURST,
            "requests sent at once before --qps applies",
        ),
        Setting("--probe-host", f"{PREFIX}PROBE_HOST", "0.0.0.0", "the probe server's address"),
    )


def environment() -> Mapping[str, str]:
    """The process's environment: the one place settings read it."""
    return os.environ

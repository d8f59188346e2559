"""What validation says of an object: each error with its field path and its Kubernetes cause,
and the warnings. Shared by the rules of both APIs (api/validation.py, api/kubeflow_admission.py)
and the schema checks (api/schema_checks.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Cause(StrEnum):
    """What is wrong with a field, as Kubernetes names it (apimachinery's field.ErrorType): the
    reason of the error's cause in a Status."""

    REQUIRED = "FieldValueRequired"
    FORBIDDEN = "FieldValueForbidden"
    INVALID = "FieldValueInvalid"
    NOT_SUPPORTED = "FieldValueNotSupported"
    DUPLICATE = "FieldValueDuplicate"
    TOO_LONG = "FieldValueTooLong"
    TOO_MANY = "FieldValueTooMany"


@dataclass(frozen=True, slots=True)
class FieldError:
    path: str
    message: str
    cause: Cause = Cause.INVALID
    # Which rule refused, where another API must tell it apart (a RULE_* name); not compared.
    rule: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass(slots=True)
class Result:
    errors: list[FieldError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> bool:
        return not self.errors


def counted(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

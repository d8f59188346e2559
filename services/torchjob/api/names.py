"""Kubernetes' own rules for names (k8s.io/apimachinery/pkg/util/validation), one home for every
layer: a namespace is a DNS-1123 label, most objects' names (a pod's, a job's) a DNS-1123
subdomain, and a Service's name a DNS-1035 label. Pure."""

from __future__ import annotations

import re
from typing import Final

from torchjob.api import constants

DNS_1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_1123_SUBDOMAIN: Final = re.compile(rf"{DNS_1123_LABEL.pattern}(\.{DNS_1123_LABEL.pattern})*")
DNS_1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")


def is_dns_1123_label(name: str) -> bool:
    """A namespace's name, a label value's form: lower-case letters, digits and '-'."""
    return len(name) <= constants.DNS_LABEL_MAX and bool(DNS_1123_LABEL.fullmatch(name))


def is_dns_1123_subdomain(name: str) -> bool:
    """An object's name (a pod, a job, a ConfigMap): DNS-1123 labels joined by '.'."""
    return len(name) <= constants.DNS_SUBDOMAIN_MAX and bool(DNS_1123_SUBDOMAIN.fullmatch(name))


def is_dns_1035_label(name: str) -> bool:
    """A Service's name: a DNS-1123 label that starts with a letter."""
    return len(name) <= constants.DNS_LABEL_MAX and bool(DNS_1035_LABEL.fullmatch(name))

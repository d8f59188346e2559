"""Labels, annotations and names shared by every part of the system."""

from __future__ import annotations

from typing import Final

from torchjob.api.types import GROUP

LABEL_JOB_NAME: Final = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE: Final = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX: Final = f"{GROUP}/replica-index"
LABEL_JOB_ROLE: Final = f"{GROUP}/job-role"
JOB_ROLE_MASTER: Final = "master"
# T9k's owner label, kept so tools written for T9k find the replicas.
LABEL_T9K_OWNER: Final = "tensorstack.dev/owner-name"
# Set by the reconciler on a pod created while the job resumes from a pause.
ANNOTATION_RESUMING: Final = f"{GROUP}/resuming"
FIELD_MANAGER: Final = "torchjob"

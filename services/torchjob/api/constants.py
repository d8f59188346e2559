"""Labels, annotations and names shared by every part of the system."""

from __future__ import annotations

from typing import Final

from torchjob.api.types import GROUP, JobPhase

# The phases a job never leaves once it has ended (lifecycle/finishing.py says when it may): the
# one list of them; a pod's are `objects.FINISHED_POD_PHASES`.
FINISHED_JOB_PHASES: Final[tuple[JobPhase, ...]] = ("Succeeded", "Failed")

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
# On every replica pod: the job's backoffCount including this pod's own creation. Persisting the
# count on the pod makes it survive a crash between creating the pod and writing the status.
ANNOTATION_BACKOFF_COUNT: Final = f"{GROUP}/backoff-count"
# On every replica pod: the replica's restarts in a row that led to this pod (0 for a first pod).
# The next restart's delay grows with it (lifecycle/backoff.py); kept on the pod so that neither a
# crash nor a stale status loses it while the pod lives.
ANNOTATION_CONSECUTIVE_RESTARTS: Final = f"{GROUP}/consecutive-restarts"
# On pods created while debug mode is on: they are replaced when debug mode is switched off.
ANNOTATION_DEBUG: Final = f"{GROUP}/debug"
# On a job's TensorBoard Deployment, its pods and its Service; the value is the job's name. They
# never carry LABEL_JOB_NAME: that label marks replica pods and Services only (the reconciler and
# the clean-up select on it, and the webhook admits pods carrying it only from the reconciler).
LABEL_TENSORBOARD: Final = f"{GROUP}/tensorboard"
# On the TensorBoard's Deployment and Service: the hash of what was rendered, so a changed
# tensorboardSpec is noticed without comparing the objects the apiserver has defaulted.
ANNOTATION_SPEC_HASH: Final = f"{GROUP}/spec-hash"
# The T9k scheduler's queue and group labels, as T9k documents them; the priority is ours (T9k
# keeps it on its PodGroup), for a cluster that has the T9k scheduler without its PodGroups.
LABEL_T9K_QUEUE: Final = "scheduler.tensorstack.dev/queue"
LABEL_T9K_GROUP: Final = "scheduler.tensorstack.dev/group-name"
LABEL_T9K_ROLE: Final = "scheduler.tensorstack.dev/role"
LABEL_T9K_PRIORITY: Final = "scheduling.tensorstack.dev/priority"
# A job's own choice of how its pods are placed together (docs/scheduling.md), overriding the
# reconciler's setting; Kueue is chosen with Kueue's queue label instead.
ANNOTATION_GANG_SCHEDULING: Final = f"{GROUP}/gang-scheduling"
# A job's own start deadline, overriding the reconciler's --start-deadline: seconds a replica may
# be unable to start (lifecycle/start_failure.py) before the job fails; 0 turns it off.
ANNOTATION_START_DEADLINE: Final = f"{GROUP}/start-deadline-seconds"
GANG_SCHEDULING_CHOICES: Final = ("native", "volcano", "coscheduling", "none")
# A job's choice of what a replica's restart restarts (lifecycle/gang.py): the replica alone, or
# every replica together. Absent: Replica for a job run by torchrun (its rendezvous lets a
# restarted replica rejoin), Gang otherwise.
ANNOTATION_RESTART_SCOPE: Final = f"{GROUP}/restart-scope"
RESTART_SCOPE_REPLICA: Final = "Replica"
RESTART_SCOPE_GANG: Final = "Gang"
RESTART_SCOPES: Final = (RESTART_SCOPE_REPLICA, RESTART_SCOPE_GANG)
# A job's choice of the headless Services that give its replicas their DNS names: one per replica
# (`Replica`: `<job>-<type>-<index>.<namespace>.svc`, Kubeflow's and T9k's names), or one for the
# whole job (`Job`: `<job>-<type>-<index>.<job>.<namespace>.svc`, each pod's hostname under the
# job's Service, as JobSet names them): one write per job instead of one per replica. Absent:
# Replica. Fixed once the job exists: its running pods were given the names.
ANNOTATION_SERVICE_SCOPE: Final = f"{GROUP}/service-scope"
SERVICE_SCOPE_REPLICA: Final = "Replica"
SERVICE_SCOPE_JOB: Final = "Job"
SERVICE_SCOPES: Final = (SERVICE_SCOPE_REPLICA, SERVICE_SCOPE_JOB)
# A job's choice of whether its new pods avoid a node its replicas failed on in two charged gang
# restarts in a row (lifecycle/gang.py): "true" (or absent) or "false".
ANNOTATION_AVOID_FAILING_NODES: Final = f"{GROUP}/avoid-failing-nodes"
# At most this many nodes are avoided by one job, the latest kept.
MAX_AVOIDED_NODES: Final = 16
# A job's own restart delay: the seconds before a first restart in a row (doubling with each
# restart in a row, lifecycle/backoff.py), overriding the reconciler's --restart-backoff; 0
# restarts at once.
ANNOTATION_RESTART_BACKOFF: Final = f"{GROUP}/restart-backoff-seconds"
# A job's own progress deadline in seconds (lifecycle/no_progress.py), 0 off; absent: the
# reconciler's --progress-deadline.
ANNOTATION_PROGRESS_DEADLINE: Final = f"{GROUP}/progress-deadline-seconds"
# On every replica pod: the job's status.gangRestarts when the pod was created. A pod of a lower
# count is of a gang restarted since, and is deleted before the new gang's pods are created.
ANNOTATION_GANG_RESTARTS: Final = f"{GROUP}/gang-restarts"
RETRYABLE_EXIT_CODES: Final = frozenset({130, 137, 143, 138})
# A job's choice of how its replicas restart where the cluster can restart a pod's containers
# where it stands (render/in_place.py): in place ("true", or absent) or by recreating the pod
# ("false"). Read when a pod is made: a change applies to the pods made after it.
ANNOTATION_RESTART_IN_PLACE: Final = f"{GROUP}/restart-in-place"
TRUE_FALSE: Final = ("true", "false")
# On a replica pod made to restart in place: the restarts in place asked of it so far. The
# reconciler raises it; the pod's restart agent restarts every container once it exceeds the
# agent's own restarts (render/in_place.py).
ANNOTATION_RESTARTS_ASKED: Final = f"{GROUP}/restarts-asked"
# On a job: a request for a diagnosis of where its training processes are (lifecycle/
# diagnosis.py): each new value (`torchjob diagnose` and the console write the time) asks one.
ANNOTATION_DIAGNOSE: Final = f"{GROUP}/diagnose"
# On a replica pod with the restart agent: the diagnoses asked of it so far. The reconciler
# raises it; the agent collects the stacks of the pod's training processes once it exceeds those
# it answered (render/diagnosis.py).
ANNOTATION_DIAGNOSES_ASKED: Final = f"{GROUP}/diagnoses-asked"
# The scheduler of pods whose job asks for the T9k scheduler, unless the reconciler is told another.
T9K_SCHEDULER_NAME: Final = "t9k-scheduler"
# A TensorBoard log source: t9k://pvc/<claim>/<subpath>.
T9K_PVC_PREFIX: Final = "t9k://pvc/"

# Kubernetes' own limits on names.
DNS_LABEL_MAX: Final = 63  # a Service name, a label value, a DNS label
DNS_SUBDOMAIN_MAX: Final = 253  # an object's name: a pod's, a job's
GENERATE_NAME_SUFFIX: Final = 5  # characters the apiserver appends to metadata.generateName

# Condition reasons: a closed, documented set.
REASON_CREATED: Final = "ReplicasCreated"
REASON_CREATING: Final = "CreatingReplicas"
REASON_RUNNING: Final = "AllReplicasRunning"
REASON_NOT_RUNNING: Final = "ReplicasNotRunning"
REASON_DEBUG: Final = "Debug"
REASON_PAUSED: Final = "Paused"
REASON_RESUMING: Final = "Resuming"
# Paused condition False once a resumed job runs again.
REASON_RESUMED: Final = "Resumed"
# Debug condition (and its Events): debug mode switched on, or off again.
REASON_DEBUG_ENABLED: Final = "DebugEnabled"
REASON_DEBUG_DISABLED: Final = "DebugDisabled"
REASON_MASTER_SUCCEEDED: Final = "MasterSucceeded"
REASON_MASTER_FAILED: Final = "MasterFailed"
REASON_REPLICA_FAILED: Final = "ReplicaFailed"
# ReplicaFailure condition and Event: a replica that ended waits for its restart delay.
REASON_RESTART_BACKOFF: Final = "RestartBackoff"
REASON_BACKOFF_LIMIT_EXCEEDED: Final = "BackoffLimitExceeded"
REASON_DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
REASON_POD_CREATION_FAILED: Final = "PodCreationFailed"
REASON_SERVICE_CREATION_FAILED: Final = "ServiceCreationFailed"
REASON_POD_GROUP_CREATION_FAILED: Final = "PodGroupCreationFailed"
# Scheduled condition (gang scheduling, render/scheduling.py) and its Events.
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"
REASON_WAITING_FOR_ADMISSION: Final = "WaitingForAdmission"
REASON_SCHEDULING_GATED: Final = "SchedulingGated"
REASON_SCHEDULING: Final = "Scheduling"
REASON_PREEMPTED: Final = "Preempted"
# StartFailure condition, and Failed once the start deadline passed: a replica's container cannot
# start (its image cannot be pulled; its configuration is refused); Unschedulable says the
# scheduler cannot place it. Started: the condition no longer holds.
REASON_IMAGE_PULL_FAILED: Final = "ImagePullFailed"
REASON_CONTAINER_CONFIG_INVALID: Final = "ContainerConfigInvalid"
REASON_STARTED: Final = "Started"
# Warning Event: a replica's pod was lost with its node (lifecycle/nodes.py).
REASON_NODE_LOST: Final = "NodeLost"
# Failed condition: the job asks for gang scheduling this cluster does not serve.
REASON_GANG_UNAVAILABLE: Final = "GangSchedulingUnavailable"
REASON_REPLICA_RESTARTING: Final = "ReplicaRestarting"
# ReplicaFailure condition and Warning Event: every replica is restarted together.
REASON_GANG_RESTARTING: Final = "GangRestarting"
REASON_NODE_AVOIDED: Final = "NodeAvoided"
# Failed condition: more gang restarts within the window than the reconciler allows.
REASON_GANG_RESTART_LIMIT_EXCEEDED: Final = "GangRestartLimitExceeded"
# Warning Event, and Failed condition when no restart is allowed: the job's progress reports
# stopped for longer than its progress deadline.
REASON_NO_PROGRESS: Final = "NoProgress"
# Event: a diagnosis of where the job's training processes are was collected (a Warning when the
# job's silence asked for it, before its restart).
REASON_DIAGNOSED: Final = "Diagnosed"
# A TrainJob's runtime (docs/trainjob.md): copied into its status when it starts; or, gone or
# changed into one torchjob does not run since the job was admitted, the job fails (Trainer's
# reason for the second).
REASON_RUNTIME_COPIED: Final = "TrainingRuntimeCopied"
REASON_RUNTIME_NOT_FOUND: Final = "TrainingRuntimeNotFound"
REASON_RUNTIME_NOT_SUPPORTED: Final = "TrainingRuntimeNotSupported"
DIAGNOSIS_REQUESTED: Final = "Requested"  # status.diagnosis.reason of one a user asked for
# The reporting controller of our services' Events (events.k8s.io reportingController). The
# chart's event policy (charts/torchjob/templates/rbac/event-policy.yaml) lets only our
# ServiceAccounts write Events that name one of them, and the console marks those as ours.
REPORTER_RECONCILER: Final = "torchjob-reconciler"
REPORTER_HOUSEKEEPER: Final = "torchjob-housekeeper"
OUR_REPORTERS: Final = (REPORTER_RECONCILER, REPORTER_HOUSEKEEPER)
# Event reasons of the reconciler's actions, as the built-in controllers name them.
REASON_SUCCESSFUL_CREATE: Final = "SuccessfulCreate"
REASON_SUCCESSFUL_DELETE: Final = "SuccessfulDelete"
REASON_SUCCESSFUL_UPDATE: Final = "SuccessfulUpdate"
# Warning Event: a Kubeflow job's HorizontalPodAutoscaler (elasticPolicy.metrics) was refused.
REASON_AUTOSCALER_FAILED: Final = "HorizontalPodAutoscalerFailed"
# Event reason: an elastic job's replica count changed.
REASON_SCALED: Final = "ReplicasScaled"
REASON_NO_FAILURE: Final = "NoReplicaFailure"
# Event: the job has ended and its pods that still run are stopped before it says so.
REASON_STOPPING: Final = "StoppingReplicas"

# Event reasons of the housekeeper.
REASON_TENSORBOARD_CREATED: Final = "TensorBoardCreated"
REASON_TENSORBOARD_UPDATED: Final = "TensorBoardUpdated"
REASON_TENSORBOARD_RESTORED: Final = "TensorBoardRestored"
REASON_TENSORBOARD_DELETED: Final = "TensorBoardDeleted"
REASON_TENSORBOARD_FAILED: Final = "TensorBoardFailed"
REASON_CLEAN_UP: Final = "CleanUp"
REASON_TTL_EXPIRED: Final = "TTLExpired"

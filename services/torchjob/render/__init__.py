"""Pure functions from a job and a replica to the Pod and Service manifests, from a job recipe to
a job's manifest (recipe), and each job kind's own (job_kinds)."""

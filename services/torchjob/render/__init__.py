"""Pure functions from a job and a replica to the Pod and Service manifests."""

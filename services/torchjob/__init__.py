"""torchjob: runs PyTorchTrainingJobs (batch.tensorstack.dev/v1beta1) on Kubernetes."""

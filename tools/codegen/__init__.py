"""protoc-gen-torchjob: generates the CRD, the Python API model and docs/api.md from proto/."""

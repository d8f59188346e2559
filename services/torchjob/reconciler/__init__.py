"""The reconciler service."""

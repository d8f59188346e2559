"""The admission webhook service."""

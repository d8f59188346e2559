"""What every service process shares: logging, probes and metrics."""

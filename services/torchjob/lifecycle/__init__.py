"""Pure functions from observed pods and a job to status and restart decisions."""

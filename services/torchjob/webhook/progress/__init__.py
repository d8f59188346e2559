"""The progress endpoint: training processes' reports, who may send them, how often, and
where the pod rewrite points them."""

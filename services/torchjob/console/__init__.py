"""The browser console: pages for a user who does not use a terminal, every Kubernetes request
made as the signed-in user (docs/console.md)."""

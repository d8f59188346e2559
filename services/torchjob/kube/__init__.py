"""All Kubernetes I/O: client, informers, work queue, leader election, events, patches."""

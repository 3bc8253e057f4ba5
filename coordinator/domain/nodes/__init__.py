"""Kubernetes Nodes: which Node is a machine's, how the cluster is reached, what the Node watch
records, drains and their steps, removal, certificates, workloads."""

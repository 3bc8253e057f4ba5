"""Releases: what applying a spec changes, what it asks of a deployed machine (the items of each
phase it runs), and which Kubernetes versions it may move a cluster to."""

"""A test Kubernetes API server per test, on loopback, with a small workload on three nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.kubeapi import KubeApiServer, kube_api_server
from tests.support.workloads import workload


@pytest.fixture
def server() -> Iterator[KubeApiServer]:
    with kube_api_server(workload()) as running:
        yield running

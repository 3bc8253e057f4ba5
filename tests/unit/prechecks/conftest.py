"""A check context over the temp root tree: the tree is the machine, the config is built
from camelCase keys as the config file spells them."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.host import Host
from nodeagent.prechecks.base import CheckContext
from nodeagent.wire.config import AgentConfig
from nodeagent.wire.contract import Role
from tests.support.roots import MakeContext, RootTree


@pytest.fixture
def make_ctx(root_tree: RootTree) -> MakeContext:
    def make(role: Role = "worker", **config: Any) -> CheckContext:
        return CheckContext(Host(root_tree.path), AgentConfig.model_validate(config), role)

    return make

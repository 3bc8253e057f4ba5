"""How pytest-xdist hands out the tests (`--dist loadfile`, as scripts/test.sh runs them).

A work unit is a whole file, so that a module's fixtures are made once, and all the shipping
tests are one unit: they share the session's package build (packaging/build.sh writes
build/packaging inside the repository, and the .deb upgrade test packages those bundles
again) and its Debian root, which two workers would each make, at once, in the same place.
"""

from __future__ import annotations

from xdist.scheduler import LoadFileScheduling

SHIPPING = "tests/integration/shipping/"


class FileOrShippingScheduling(LoadFileScheduling):
    def _split_scope(self, nodeid: str) -> str:
        return SHIPPING if nodeid.startswith(SHIPPING) else super()._split_scope(nodeid)

"""One fixture for the tvm test modules: a fresh library cache per module, so cache hits and
misses are that module's. Import it into a module (``from tests.tvm_cache import
fresh_library_cache``); it is autouse, named ``library_cache`` for tests that want the
directory it yields."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True, name="library_cache")
def fresh_library_cache(tmp_path_factory, request):
    mp = pytest.MonkeyPatch()
    path = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1])
    mp.setenv("PEREGRINE_CACHE_DIR", str(path))
    yield path
    mp.undo()

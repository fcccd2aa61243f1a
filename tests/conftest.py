import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "2")
# Idle OpenMP threads (torch's libgomp) sleep instead of spinning: with `-n 2` workers of two
# threads each on two cores, a spinning thread takes the core from the other worker's busy one.
# Measured on an AMD EPYC Zen 3 (2 vCPUs), tests/test_dtype_flow.py with -n 2: 175-224 s
# spinning (libgomp's default), 51 s passive. Answers cannot change: only how idle threads wait.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def pytest_report_header(config):
    """Which CPU code paths this run takes (``make test-cpu-levels`` forces lower ones)."""
    import platform

    level = os.environ.get("PEREGRINE_CPU_LEVEL", "native (host)")
    try:
        import torch

        aten = torch.backends.cpu.get_cpu_capability()
    except ImportError:
        aten = "no torch"
    return f"peregrine CPU level: {level}; ATen kernels: {aten}; {platform.processor() or ''}"


def pytest_collection_modifyitems(config, items):
    # GPU tests skip cleanly on machines without CUDA (CI never has one).
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip)

"""The record kernels every batch-path test runs with (RMQCTL_KERNEL): the numpy kernel of rmqctl.scanvec
and the numba-compiled one of rmqctl.kernels. numba is a test dependency (the `fast` extra in `all`):
a missing numba fails the numba runs, it never skips them."""
import pytest

KERNELS = ["numpy", "numba"]


@pytest.fixture(params=KERNELS)
def kernel(request, monkeypatch):
    monkeypatch.setenv("RMQCTL_KERNEL", request.param)
    from rmqctl import kernels

    assert kernels.name() == request.param     # the kernel under test is the one that runs
    return request.param

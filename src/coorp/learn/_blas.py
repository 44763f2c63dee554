"""One BLAS thread per process for the learning workers.

numpy's bundled OpenBLAS starts one thread per core. The networks here are small, so its
threads spin more than they compute, and several worker processes each spinning on
every core make an iteration ~10x slower on two cores (measured: 0.86 s vs 0.08 s).
The workers *are* the parallelism: each process keeps one BLAS thread, as Ray does for
its workers (``OMP_NUM_THREADS=1``). Found by name in the loaded libraries, as
threadpoolctl does; a BLAS without the call is left alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import re

__all__ = ["single_thread_blas"]

_DONE = False
_CALLS = (
    "scipy_openblas_set_num_threads64_",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
    "MKL_Set_Num_Threads",
)


def single_thread_blas() -> bool:
    """Limit this process's BLAS to one thread; returns whether a BLAS was found."""
    global _DONE
    if _DONE:
        return True
    import numpy  # noqa: F401  (loads the BLAS)

    try:
        with open("/proc/self/maps") as f:
            libs = set(re.findall(r"(/\S*(?:openblas|mkl_rt|blas)\S*\.so\S*)", f.read()))
    except OSError:
        return False
    for path in sorted(libs):
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(path)
            for name in _CALLS:
                fn = getattr(lib, name, None)
                if fn is not None:
                    fn(1)
                    _DONE = True
    return _DONE

"""How the speech models share the CPU with the LM: threads that sleep when idle, not spin, and not in torch's
OpenMP.

On a 2-core machine the LM, Whisper and Piper take turns on the same cores, and each runtime keeps worker threads
that, by default, spin for a while after their work to catch the next piece sooner. A neighbour's spinning
threads take the cores from the LM's next pass, and a team that joins torch's GNU OpenMP makes all its teams
sleep between regions. ``python -m latency_bench neighbours`` and ``python -m latency_bench openmp`` measure each
case; Piper's session is built in :func:`voice.tts.load_voice`.
"""

from __future__ import annotations

import os
import sys


def import_ctranslate2_on_its_own_openmp() -> None:
    """Import CTranslate2 (faster-whisper's engine) so its OpenMP calls go to the GNU OpenMP it ships.

    Why: torch, imported first, puts its own GNU OpenMP in the process's global symbol scope, and CTranslate2's
    calls then bind to it. Whisper's team and the LM's become two teams of one library, which, once its threads
    outnumber the cores, sleeps between parallel regions instead of spinning: on 2 cores a demo-checkpoint turn
    took 53 ms with Whisper loaded that way against 21 with Whisper on its own (``python -m latency_bench
    openmp``). ``RTLD_DEEPBIND`` makes the library prefer its own dependencies whatever the import order.
    A CTranslate2 already imported stays as it was bound."""
    if "ctranslate2" in sys.modules:
        return
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | getattr(os, "RTLD_DEEPBIND", 0))
    try:
        import ctranslate2  # noqa: F401
    finally:
        sys.setdlopenflags(flags)


def one_blas_thread() -> None:
    """Run numpy's BLAS (OpenBLAS) on one thread, process-wide.

    Why: Whisper's feature extractor multiplies by its mel filters through numpy, a millisecond's work, after
    which OpenBLAS's second thread spins; the LM's next turn then took twice as long on 2 cores (``python -m
    latency_bench neighbours``). Nothing in the voice pipeline gives numpy enough work to need a second thread."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(1, user_api="blas")

"""Root conftest: tests run many engines side by side; keep BLAS single-threaded (as the
engine's command line does) so xdist workers do not oversubscribe the cores."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""Imported by the math verifier's fork server (see `utu.verify.workers._context`): one judgement there loads
math-verify, sympy and the LaTeX parser, which every worker forked from the server then has ready."""

import atexit
import contextlib
import logging
import os

from utu.verify.math import _grade

logging.getLogger("math_verify").setLevel(logging.ERROR)
with contextlib.suppress(Exception):  # only a head start: the server must come up whatever happens here
    _grade("1", "\\boxed{1}")

# The server ends with the run. It holds nothing to clean up, and dismantling sympy took 0.1 s, during which
# it kept the run's output pipes open (a caller reading them waited for it). Its workers never run this.
atexit.register(os._exit, 0)

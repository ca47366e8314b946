"""Where NVIDIA's CUDA 13 wheels are in this interpreter: the sys.path entries holding nvidia/cu13."""

from __future__ import annotations

import os
import sys


def cuda_wheel_site_packages() -> list[str]:
    """The sys.path directories whose ``nvidia/cu13/lib`` exists, in sys.path order."""
    found: list[str] = []
    for entry in sys.path:
        site = os.path.abspath(entry or os.curdir)
        if site not in found and os.path.isdir(os.path.join(site, "nvidia", "cu13", "lib")):
            found.append(site)
    return found

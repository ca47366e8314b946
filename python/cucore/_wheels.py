"""Where NVIDIA's CUDA wheels are in this interpreter: the sys.path entries holding nvidia/cu13
(CUDA 13) or nvidia/cuda_nvrtc (CUDA 12's per-package wheels)."""

from __future__ import annotations

import os
import sys


def cuda_wheel_site_packages() -> list[str]:
    """The sys.path directories whose ``nvidia/cu13/lib`` or ``nvidia/cuda_nvrtc/lib`` exists, in
    sys.path order (the library searches every cu13 directory before CUDA 12's)."""
    found: list[str] = []
    for entry in sys.path:
        site = os.path.abspath(entry or os.curdir)
        if site in found:
            continue
        for package in ("cu13", "cuda_nvrtc"):
            if os.path.isdir(os.path.join(site, "nvidia", package, "lib")):
                found.append(site)
                break
    return found

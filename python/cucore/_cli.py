"""The ``cucore`` console script: runs the command-line tool shipped inside the package."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def executable() -> Path:
    """The path of the bundled ``cucore`` program."""
    return Path(__file__).resolve().parent / "_bin" / "cucore"


def main() -> None:
    exe = executable()
    if not exe.is_file():
        sys.exit(f"cucore: the command-line tool is missing from the package ({exe})")
    # The tool cannot see this interpreter's sys.path: hand it the CUDA wheels found there, after
    # any the user named (docs/library-discovery.md).
    from cucore._wheels import cuda_wheel_site_packages

    sites = [s for s in os.environ.get("CUCORE_CUDA_WHEELS", "").split(":") if s]
    sites += [s for s in cuda_wheel_site_packages() if s not in sites]
    env = dict(os.environ)
    if sites:
        env["CUCORE_CUDA_WHEELS"] = ":".join(sites)
    # exec, not a child process: exit status, signals and the terminal are the tool's own.
    os.execve(exe, [str(exe), *sys.argv[1:]], env)


if __name__ == "__main__":
    main()

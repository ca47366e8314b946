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
    # exec, not a child process: exit status, signals and the terminal are the tool's own.
    os.execv(exe, [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()

"""python -m einsummable: the package's version and the library it loads.

    python -m einsummable --version   einsummable 0.1.0
    python -m einsummable --info      version, library, worker and Python
"""

import os
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    """The command line: --version, --info or --help; returns the exit
    status (2 for a bad argument)."""
    args = sys.argv[1:] if argv is None else argv
    if args in (["-h"], ["--help"]):
        print(__doc__.strip())
        return 0
    if args not in (["--version"], ["--info"], ["-V"]):
        sys.stderr.write("usage: python -m einsummable --version | --info | --help\n")
        return 2
    from ._version import __version__
    if args != ["--info"]:
        print("einsummable %s" % __version__)
        return 0
    from . import _lib
    worker = None
    for d in _lib.bin_dirs():
        p = os.path.join(d, "einworker")
        if os.path.isfile(p) and os.access(p, os.X_OK):
            worker = p
            break
    print("einsummable %s" % __version__)
    print("library: %s" % _lib.lib.path)
    print("worker: %s" % (os.environ.get("EINWORKER") or worker or "not found (set EINWORKER)"))
    print("python: %s %s" % (sys.executable, sys.version.split()[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

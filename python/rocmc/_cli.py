"""The `rocmc` command of the wheel: the compiler's command line, run in
this process by the extension module."""

import sys

from . import _rocmc


def main():
    if not hasattr(_rocmc, "cli"):
        sys.exit("rocmc: this build of the package has no compiler (runtime only)")
    sys.exit(_rocmc.cli(sys.argv))

"""`python -m gaptop ...`: runs the gaptop binary that pip installed with this package."""
import os
import shutil
import sys
import sysconfig


def main():
    exe = os.path.join(sysconfig.get_path("scripts"), "gaptop")
    if not os.path.isfile(exe):
        exe = shutil.which("gaptop") or exe
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()

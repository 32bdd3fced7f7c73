"""`rtenv doctor`: what this machine and a cluster have of what rtenv's commands need.

Each check is one typed `Check` (ok, warn or fail, a one-line detail and the fix); `run_doctor`
returns them all in a `DoctorReport` whose exit code is 1 when a check failed (something a
command needs is missing). Nothing here prints.
"""

from rtenv_cli.core.doctor.model import Check, DoctorReport, Status

__all__ = ["Check", "DoctorReport", "Status"]

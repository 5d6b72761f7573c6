"""HTCondor submit files, resolved into tasks the way `condor_submit` (23.9) resolves them."""

from llic.submit.errors import SubmitFileError
from llic.submit.task import TaskSpec

__all__ = ["SubmitFileError", "TaskSpec"]

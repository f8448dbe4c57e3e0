"""Exit codes: one fsck-style bit set shared by every command.

Bits combine (a repair that fixed some problems and left others exits 1|4 = 5).
"""
from enum import IntFlag


class Exit(IntFlag):
    OK = 0            # nothing wrong / nothing to do
    FIXED = 1         # problems were found and repaired
    USAGE = 2         # bad command line
    PROBLEMS = 4      # problems found and left (verify findings, corrupt input, could not repair)
    FAILED = 8        # could not run: I/O, permission, store locked by a running broker, internal error


# Not a bit of Exit: 130 (128 + SIGINT) never combines with the codes above.
INTERRUPTED = 130


EXIT_CODES_DOC = """\b
Exit status (bits combine, like fsck):
  0    ok, nothing to report / nothing to do
  1    problems were found and fixed
  2    usage error
  4    problems found and left unfixed (corrupt input, verify findings)
  8    could not run (I/O error, permission, store locked by a running broker, internal error)
  130  interrupted (Ctrl-C)
A broken pipe on stdout (rmqctl ... | head) exits 0."""

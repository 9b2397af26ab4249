"""Process exit codes: one documented enum, mapped from exceptions only in cli.app."""

from enum import IntEnum


class ExitCode(IntEnum):
    """Exit status of every deploykit command (also the table in README.md "Exit codes")."""

    OK = 0
    INTERNAL_ERROR = 1  # a bug in deploykit: please report it with --debug output
    USAGE = 2  # bad command line (Click's own code)
    INVALID_INVENTORY = 3  # inventory or config failed validation; no host was contacted
    ANSIBLE_FAILED = 4  # one or more Ansible tasks failed
    HOSTS_UNREACHABLE = 5  # one or more hosts could not be reached
    VERIFY_FAILED = 6  # `verify` (or the verify between `up`'s upgrade waves) found a failing check
    # this machine lacks something the command needs (root, a package), or cannot run it now:
    # another run holds the site's lock (ops/site_lock.py)
    ENVIRONMENT = 7
    INTERRUPTED = 130
    BROKEN_PIPE = 141  # the reader of stdout went away (`| head`): 128 + SIGPIPE, as a shell

"""Exception families; each carries the exit code the CLI turns it into."""

from __future__ import annotations

from dataclasses import dataclass

from deploy_kit.core.exit_codes import ExitCode


class DeployKitError(Exception):
    """Base class: a failure explained to a human, with an exit code."""

    exit_code: ExitCode = ExitCode.INTERNAL_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True, order=True)
class Problem:
    """One thing wrong with the inventory, reported as `file: key: problem — fix`."""

    file: str
    key: str
    message: str
    fix: str
    hosts: tuple[str, ...] = ()  # the hosts it applies to (merged when one value is shared)

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message}{hosts_note(self.hosts)} — {self.fix}"


def hosts_note(hosts: tuple[str, ...], shown: int = 8) -> str:
    if not hosts:
        return ""
    names = ", ".join(hosts[:shown]) + (f", … ({len(hosts)} hosts)" if len(hosts) > shown
                                        else "")
    return f" (host{'s' if len(hosts) > 1 else ''} {names})"


def merge_problems(problems: list[Problem]) -> list[Problem]:
    """One problem per (file, key, message, fix): a bad site-wide value is reported once,
    naming every host it applies to."""
    merged: dict[tuple[str, str, str, str], set[str]] = {}
    for p in problems:
        merged.setdefault((p.file, p.key, p.message, p.fix), set()).update(p.hosts)
    return sorted(Problem(*k, hosts=tuple(sorted(h))) for k, h in merged.items())


class InventoryError(DeployKitError):
    """The inventory is invalid; carries every problem found in one pass."""

    exit_code = ExitCode.INVALID_INVENTORY

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = merge_problems(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class EnvironmentProblem(DeployKitError):
    """This machine cannot run the command (not root, missing tool)."""

    exit_code = ExitCode.ENVIRONMENT


class AnsibleFailed(DeployKitError):
    exit_code = ExitCode.ANSIBLE_FAILED


class HostsUnreachable(DeployKitError):
    exit_code = ExitCode.HOSTS_UNREACHABLE


class VerifyFailed(DeployKitError):
    exit_code = ExitCode.VERIFY_FAILED


class BadInput(DeployKitError):
    """A command-line value the run cannot take, found below the CLI (a --limit that names
    nothing, an unknown tag, a missing vars file). The CLI shows it as the usage error of the
    option `param_hint` names; elsewhere it is an ordinary error with exit 2."""

    exit_code = ExitCode.USAGE

    def __init__(self, message: str, *, param_hint: str | None = None) -> None:
        super().__init__(message)
        self.param_hint = param_hint

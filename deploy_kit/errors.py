"""Exception families; each carries the exit code the CLI turns it into."""

from __future__ import annotations

from dataclasses import dataclass

from deploy_kit.exit_codes import ExitCode


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

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.message} — {self.fix}"


class InventoryError(DeployKitError):
    """The inventory is invalid; carries every problem found in one pass."""

    exit_code = ExitCode.INVALID_INVENTORY

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = sorted(set(problems))
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

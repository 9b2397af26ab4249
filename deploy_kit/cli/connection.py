"""-K once per run, and the connection flags handed to the host transport."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from deploy_kit.cli.options import ConnectionOptions, VaultOptions
from deploy_kit.config.site import Site


@contextmanager
def reaching(connection: ConnectionOptions, ask: bool = True) -> Iterator[ConnectionOptions]:
    """The options with -K answered: the password typed once, kept for this run only in a
    0600 file of a private directory (ansible-playbook's --become-password-file reads it),
    removed afterwards. It is never in argv, the environment, a log or a run record.
    `ask=False` (--print-command): left for Ansible to ask."""
    if not (connection.ask_become_pass and ask) or connection.become_password_file:
        yield connection
        return
    import getpass
    import sys

    if not sys.stdin.isatty():
        raise typer.BadParameter("needs a terminal; set ansible_become_password in a vaulted "
                                 "file, or use passwordless sudo",
                                 param_hint="--ask-become-pass")
    password = getpass.getpass("BECOME password: ")
    with tempfile.TemporaryDirectory(prefix="deploykit-become-") as private:
        os.chmod(private, 0o700)
        path = Path(private) / "become-password"
        path.touch(mode=0o600)
        path.write_text(password + "\n")
        yield dataclasses.replace(connection, become_password_file=path)


def on_site(site: Site, connection: ConnectionOptions) -> Site:
    """The site whose host contacts (deploy_kit.transport.hosts) use these flags."""
    return dataclasses.replace(site, connection=tuple(connection.argv()))


@contextmanager
def reached_site(inventory: list[str], vault: VaultOptions,
                 connection: ConnectionOptions) -> Iterator[Site]:
    """The site a host-reading verb works on: vault secrets read once (a prompt asks here),
    -K answered once, and its host contacts using the connection flags."""
    from deploy_kit.ops.secrets_store import with_stored
    from deploy_kit.ops.site import open_site

    secrets = vault.secrets()
    with reaching(connection) as reach:
        # the generated secrets (vLLM's API key) fill what the inventory leaves unset
        yield on_site(with_stored(open_site(inventory, secrets)), reach)

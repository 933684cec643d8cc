"""The `nrt` command run in this process (click's runner), as tests of the CLI call it."""

from __future__ import annotations

from click.testing import CliRunner


def nrt_cli(*args: str) -> tuple[int, str, str]:
    """``nrt ARGS``: its exit code, stdout and stderr."""
    from nrt.entrypoints.cli.main import cli

    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr

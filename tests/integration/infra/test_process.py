"""A server child never outlives the process that started it, however that process dies."""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from infra_helpers import process_gone
from nrt.testing.stacks import eventually

# a parent that starts `sleep` as a ServerProcess (as the given account, when it names one), says
# the child's pid, then waits to be killed; the child has no reason of its own to exit
PARENT = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from nrt.adapters.infra._process import Identity, ServerProcess
    account = sys.argv[2]
    identity = Identity(account, int(sys.argv[3]), int(sys.argv[4])) if account else None
    child = ServerProcess(["sleep", "600"], log_path=Path(sys.argv[1]), cwd=Path("/"), identity=identity)
    print(child.pid, flush=True)
    time.sleep(600)
    """
)


def _orphan_check(tmp_path: Path, account: str = "", uid: int = 0, gid: int = 0) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(tmp_path / "sleep.log"), account, str(uid), str(gid)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert not process_gone(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
        eventually(lambda: process_gone(child), 5, f"sleep (pid {child}) gone with its parent")
    finally:
        parent.kill()
        parent.wait(10)
        if not process_gone(child):  # the check failed: leave nothing behind
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
def test_a_server_child_goes_when_its_parent_is_killed(tmp_path: Path) -> None:
    _orphan_check(tmp_path)


@pytest.mark.skipif(sys.platform != "linux" or os.geteuid() != 0, reason="switching accounts needs root (Linux)")
def test_a_server_child_that_runs_as_another_account_goes_with_its_parent_too(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")  # the account switch happens before the signal is armed, or would clear it
    _orphan_check(tmp_path, nobody.pw_name, nobody.pw_uid, nobody.pw_gid)

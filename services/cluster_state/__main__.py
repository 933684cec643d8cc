"""``python -m cluster_state [--manifest FILE]``: run the cluster_state service.

Needs NRT_NATS_URL and NRT_DATABASE_URL. ``--manifest`` (or NRT_MANIFEST) is applied as
version 1 when the event log is empty; on a restart the state is rebuilt from the log, and a
manifest that differs from the one in force is swapped in as the next version (drained).
A second instance waits as a standby and takes over when the leader's lease ends; a deposed
leader exits with status 3.
"""

from __future__ import annotations

import argparse
import functools
import sys

from cluster_state.app import MANIFEST_ENV, run
from cluster_state.leadership import Deposed
from cluster_state.settings import ClusterStateSettings
from nrt.adapters.settings import SettingsError
from nrt.entrypoints.service import main

DEPOSED_EXIT = 3  # another instance leads the log: restart this one (it waits as a standby)


def cli() -> None:
    parser = argparse.ArgumentParser(prog="python -m cluster_state", description=__doc__)
    parser.add_argument("--manifest", metavar="FILE", help=f"bootstrap manifest (default: ${MANIFEST_ENV})")
    args = parser.parse_args()
    try:
        settings = ClusterStateSettings.from_env()
    except SettingsError as exc:
        print(f"cluster_state: {exc}", file=sys.stderr)
        sys.exit(2)
    if not settings.database_url:
        print(
            "cluster_state: NRT_DATABASE_URL is not set; it records the event log in PostgreSQL "
            "(e.g. NRT_DATABASE_URL=postgresql://user@127.0.0.1:5432/nrt)",
            file=sys.stderr,
        )
        sys.exit(2)
    try:
        main("cluster_state", functools.partial(run, manifest=args.manifest, settings=settings))
    except Deposed as exc:
        print(f"cluster_state: deposed: {exc}; exiting to start again as a standby", file=sys.stderr)
        sys.exit(DEPOSED_EXIT)


if __name__ == "__main__":
    cli()

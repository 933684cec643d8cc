"""``python -m cluster_state [--manifest FILE]``: run the cluster_state service.

Needs NRT_NATS_URL and NRT_DATABASE_URL. ``--manifest`` (or NRT_MANIFEST) is applied as
version 1 when the event log is empty; on a restart the state is rebuilt from the log, and a
manifest that differs from the one in force is swapped in as the next version (drained).
"""

from __future__ import annotations

import argparse
import functools
import sys

from cluster_state.app import MANIFEST_ENV, run
from cluster_state.settings import ClusterStateSettings
from nrt.adapters.settings import SettingsError
from nrt.entrypoints.service import main


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
    main("cluster_state", functools.partial(run, manifest=args.manifest, settings=settings))


if __name__ == "__main__":
    cli()

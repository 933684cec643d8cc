"""Leadership of the log: one writer at a time, with a lease and a fencing epoch.

One ``cluster_state`` records the stream and decides; others wait as standbys. The store keeps one
leadership record, ``(epoch, holder, lease_until)``, next to the log (PostgreSQL's ``leadership``
row, or the in-memory store's copy), and the store's clock is the only one that says when a lease
has expired:

- **claim**: a candidate takes the lead only when the lease has expired (or was released), in one
  compare-and-set that bumps the epoch: of two candidates at once, one wins;
- **renew**: the leader extends its lease while the epoch is still its own; a renewal that finds
  another epoch means the leader was deposed;
- **release**: a leader that stops ends its lease at once, so a standby takes over without waiting;
- **fence**: a store fenced at an epoch checks, inside the transaction of every write (appends,
  decisions, checkpoints, snapshots, the outbox), that the epoch is still current, and refuses the
  write with ``Fenced`` otherwise. In PostgreSQL the check holds a share lock on the leadership row
  until the write commits, so a takeover waits for a deposed leader's write in flight and every
  write after the takeover sees the new epoch. Fencing is what makes a deposed leader harmless: a
  leader paused past its lease (a stopped process, a long pause) that wakes up believing it leads
  cannot write, whatever it believes.

The leader's own view of its lease (``Tenure``) is counted on its monotonic clock from the moment
it *sent* each renewal: the store granted the lease at or after that moment, so the local deadline
falls before the store's and the leader stops acting before a standby may take over. The fence
covers the rest (clock rate drift, a pause between the check and the write).

Pure data and functions; the stores implement ``LeaseStore``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol


class Fenced(Exception):
    """A write carried a leadership epoch that is no longer current: its writer was deposed."""

    def __init__(self, epoch: int, current: int) -> None:
        self.epoch, self.current = epoch, current
        super().__init__(
            f"this writer leads epoch {epoch}, but the log is now led at epoch {current}: "
            "the write was refused (a standby took over; this instance must stop deciding)"
        )


OnFenced = Callable[[Fenced], None]


@dataclass(frozen=True, slots=True)
class Lease:
    """The leadership record as the store granted it: ``until`` is on the store's clock."""

    epoch: int
    holder: str
    until: datetime


class LeaseStore(Protocol):
    """The leadership record kept beside the log, and the fence on its writes."""

    async def claim(self, holder: str, lease_s: float) -> Lease | None:
        """Lead for ``lease_s`` at the next epoch if the current lease has expired or was released;
        None when another holder's lease still runs."""
        ...

    async def renew(self, lease: Lease, lease_s: float) -> Lease | None:
        """Extend ``lease`` by ``lease_s`` from now while its epoch is current (even past its end: nobody
        took over meanwhile); None when another epoch leads (deposed)."""
        ...

    async def release(self, lease: Lease) -> None:
        """End ``lease`` now (if its epoch is still current), so that a standby may claim at once."""
        ...

    async def leader(self) -> Lease | None:
        """The current leadership record (None before anyone led)."""
        ...

    def fence(self, epoch: int, on_fenced: OnFenced | None = None) -> None:
        """From now on, every write of this store carries ``epoch`` and is refused with ``Fenced`` (after
        ``on_fenced`` is told) when the log is led at another epoch."""
        ...


def expired(lease: Lease | None, now: datetime) -> bool:
    """Whether a candidate may claim at ``now`` (the store's clock): no lease yet, or it has ended."""
    return lease is None or lease.until <= now


class LeaseError(ValueError):
    """Lease timings that cannot work; the message names the settings."""


@dataclass(frozen=True, slots=True)
class LeaseTerms:
    """How long a granted lease lasts and how often the leader renews it.

    A standby leads within about ``lease_s + campaign_s`` of the leader's death (plus its rebuild);
    a leader survives ``lease_s - renew_s`` of failed renewals before it stops acting.
    """

    lease_s: float = 3.0
    renew_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.lease_s > 0 or not self.renew_s > 0:
            raise LeaseError(
                f"the leader lease ({self.lease_s:g}s) and its renewal interval ({self.renew_s:g}s) must be positive"
            )
        if self.renew_s * 2 > self.lease_s:
            raise LeaseError(
                f"the leader renews its lease every {self.renew_s:g}s, more than half the lease of "
                f"{self.lease_s:g}s: one late renewal would end it; renew at most every {self.lease_s / 2:g}s"
            )

    @property
    def campaign_s(self) -> float:
        """How often a standby tries to claim."""
        return self.renew_s / 2


class Renewal(enum.Enum):
    RENEWED = "renewed"  # the store extended the lease at our epoch
    DEPOSED = "deposed"  # the store holds another epoch (or refused a write of ours)
    UNANSWERED = "unanswered"  # the store did not answer in time, or failed


class Verdict(enum.Enum):
    LEAD = "lead"  # act: the lease runs
    PAUSE = "pause"  # stop acting: the lease may have run out, but no other epoch was seen (the fence holds)
    STEP_DOWN = "step_down"  # another epoch leads: stop for good


@dataclass(frozen=True, slots=True)
class Tenure:
    """The leader's view of its own lease, on its monotonic clock."""

    epoch: int
    holder: str
    terms: LeaseTerms
    valid_until: float  # monotonic: the granted lease, counted from when its renewal was sent
    deposed: bool = False

    @classmethod
    def granted(cls, lease: Lease, terms: LeaseTerms, sent_at: float) -> Tenure:
        """The tenure a claim sent at ``sent_at`` (monotonic) won."""
        return cls(epoch=lease.epoch, holder=lease.holder, terms=terms, valid_until=sent_at + terms.lease_s)

    def after(self, renewal: Renewal, sent_at: float) -> Tenure:
        """The tenure once a renewal sent at ``sent_at`` came back as ``renewal``."""
        if renewal is Renewal.DEPOSED:
            return replace(self, deposed=True)
        if renewal is Renewal.RENEWED and not self.deposed:
            return replace(self, valid_until=max(self.valid_until, sent_at + self.terms.lease_s))
        return self

    def verdict(self, now: float) -> Verdict:
        """What the leader does at ``now`` (monotonic)."""
        if self.deposed:
            return Verdict.STEP_DOWN
        return Verdict.LEAD if now < self.valid_until else Verdict.PAUSE

    def next_renewal(self, sent_at: float) -> float:
        """When to send the renewal after the one sent at ``sent_at``."""
        return sent_at + self.terms.renew_s

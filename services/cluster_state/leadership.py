"""cluster_state's leadership: wait as a standby, lead with a lease, stop deciding when deposed.

The rules are ``nrt.core.eventlog.leadership``'s; this is their shell. ``acquire`` campaigns every
``campaign_s`` until the store grants this instance the lease (logging once who leads meanwhile), then
fences the store at the won epoch: from then on every write of this instance's store is refused by the
database if another epoch leads. ``keep`` renews the lease every ``renew_s``; ``leads`` says whether to act
now (the lease runs on this instance's monotonic clock); a renewal that finds another epoch, or a write that
the fence refused, sets ``deposed``: the service then stops and exits, and its supervisor starts it again
as a standby. A leader that cannot reach the store stops acting once its lease would have run out and acts
again if a renewal at its own epoch succeeds later (nobody took over meanwhile: nobody else wrote).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from nrt.core.eventlog import Fenced, Lease, LeaseStore, LeaseTerms, Renewal, Tenure, Verdict

log = logging.getLogger("nrt.cluster_state.leadership")


class Deposed(Exception):
    """Another cluster_state instance leads the log now: this one stopped deciding."""


class Leadership:
    def __init__(
        self, store: LeaseStore, terms: LeaseTerms, holder: str, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.terms = terms
        self.holder = holder
        self.clock = clock
        self.lease: Lease | None = None
        self.tenure: Tenure | None = None
        self.deposed = asyncio.Event()
        self.why = ""  # what deposed it, for the log and the exit
        self._verdict = Verdict.PAUSE

    async def acquire(self) -> Tenure:
        """Wait as a standby until this instance leads (cancel it to stop waiting); the store is then fenced
        at the won epoch."""
        announced = False
        while True:
            sent = self.clock()
            try:
                lease = await self.store.claim(self.holder, self.terms.lease_s)
            except Exception as exc:
                log.warning("claiming the leadership failed (%s); trying again in %.1fs", exc, self.terms.campaign_s)
                lease = None
            if lease is not None:
                self.lease, self.tenure = lease, Tenure.granted(lease, self.terms, sent)
                self._verdict = Verdict.LEAD
                self.store.fence(lease.epoch, self._fenced)
                log.info("leading the log at epoch %d as %s (lease %gs)", lease.epoch, self.holder, self.terms.lease_s)
                return self.tenure
            if not announced:
                with contextlib.suppress(Exception):
                    current = await self.store.leader()
                    if current is not None:
                        log.warning(
                            "standby: %s leads the log at epoch %d; taking over when its lease ends",
                            current.holder,
                            current.epoch,
                        )
                        announced = True
            await asyncio.sleep(self.terms.campaign_s)

    def epoch(self) -> int:
        """The epoch this instance leads now (0: a standby, deposed, or its lease ran out)."""
        return self.tenure.epoch if self.tenure is not None and self.leads() else 0

    def leads(self) -> bool:
        """Whether to act now: the lease runs and this instance was not deposed."""
        if self.tenure is None:
            return False
        verdict = self.tenure.verdict(self.clock())
        if verdict is not self._verdict:
            self._verdict = verdict
            if verdict is Verdict.PAUSE:
                log.error(
                    "the leader lease (epoch %d) ran out without a renewal: not acting until one succeeds "
                    "(writes stay fenced by the database)",
                    self.tenure.epoch,
                )
            elif verdict is Verdict.LEAD:
                log.warning("the leader lease (epoch %d) was renewed: acting again", self.tenure.epoch)
        return verdict is Verdict.LEAD

    async def keep(self, stopping: asyncio.Event) -> None:
        """Renew the lease every ``renew_s`` until stopped or deposed."""
        while not stopping.is_set() and not self.deposed.is_set():
            assert self.tenure is not None
            assert self.lease is not None
            sent = self.clock()
            renewal = await self._renew()
            self.tenure = self.tenure.after(renewal, sent)
            if self.tenure.verdict(self.clock()) is Verdict.STEP_DOWN:
                self._depose(f"epoch {self.tenure.epoch} was taken over: another instance leads the log")
                return
            self.leads()  # log a pause or a resumption
            wait = max(0.0, self.tenure.next_renewal(sent) - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), wait)

    async def _renew(self) -> Renewal:
        assert self.lease is not None
        try:
            renewed = await asyncio.wait_for(self.store.renew(self.lease, self.terms.lease_s), self.terms.lease_s)
        except Exception as exc:
            log.warning("renewing the leader lease (epoch %d) failed: %s", self.lease.epoch, exc or type(exc).__name__)
            return Renewal.UNANSWERED
        if renewed is None:
            return Renewal.DEPOSED
        self.lease = renewed
        return Renewal.RENEWED

    def _fenced(self, refused: Fenced) -> None:
        """The store refused a write of ours: another epoch leads."""
        if self.tenure is not None:
            self.tenure = self.tenure.after(Renewal.DEPOSED, self.clock())
        self._depose(str(refused))

    def _depose(self, why: str) -> None:
        if not self.deposed.is_set():
            self.why = why
            log.error("deposed: %s; stopping (a supervisor starts this instance again as a standby)", why)
            self.deposed.set()

    async def release(self) -> None:
        """End the lease now (a clean stop), so that a standby takes over without waiting for it to run out."""
        if self.lease is None or self.deposed.is_set():
            return
        try:
            await self.store.release(self.lease)
        except Exception as exc:
            log.warning("releasing the leader lease failed (%s): a standby takes over when it runs out", exc)
        else:
            log.info("released the leader lease (epoch %d)", self.lease.epoch)
        self.tenure = None

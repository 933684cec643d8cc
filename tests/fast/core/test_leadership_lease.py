"""The leader's view of its lease (``nrt.core.eventlog.leadership``): pure, on a given monotonic clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nrt.core.eventlog import Lease, LeaseError, LeaseTerms, Renewal, Tenure, Verdict
from nrt.core.eventlog.leadership import expired

TERMS = LeaseTerms(lease_s=3.0, renew_s=1.0)
T0 = datetime(2026, 11, 27, tzinfo=UTC)


def _tenure(sent_at: float = 100.0) -> Tenure:
    return Tenure.granted(Lease(epoch=4, holder="a", until=T0), TERMS, sent_at)


def test_a_granted_lease_is_counted_from_when_its_claim_was_sent() -> None:
    tenure = _tenure(sent_at=100.0)
    assert (tenure.epoch, tenure.holder, tenure.valid_until) == (4, "a", 103.0)
    assert tenure.verdict(102.99) is Verdict.LEAD
    assert tenure.verdict(103.0) is Verdict.PAUSE  # the store may let a standby claim from now on
    assert tenure.next_renewal(100.0) == 101.0


def test_renewals_extend_from_their_sending_and_never_shorten() -> None:
    tenure = _tenure(sent_at=100.0).after(Renewal.RENEWED, sent_at=101.0)
    assert tenure.valid_until == 104.0
    assert tenure.after(Renewal.RENEWED, sent_at=100.5).valid_until == 104.0  # a late answer to an older renewal


def test_unanswered_renewals_lead_until_the_lease_runs_out_then_pause() -> None:
    tenure = _tenure(sent_at=100.0)
    for sent in (101.0, 102.0):
        tenure = tenure.after(Renewal.UNANSWERED, sent_at=sent)
        assert tenure.verdict(sent + 0.5) is Verdict.LEAD
    tenure = tenure.after(Renewal.UNANSWERED, sent_at=103.0)
    assert tenure.verdict(103.0) is Verdict.PAUSE
    # the store answers again and no other epoch took over: lead again
    assert tenure.after(Renewal.RENEWED, sent_at=104.0).verdict(104.1) is Verdict.LEAD


def test_deposed_is_for_good() -> None:
    tenure = _tenure().after(Renewal.DEPOSED, sent_at=101.0)
    assert tenure.verdict(101.0) is Verdict.STEP_DOWN
    assert tenure.after(Renewal.RENEWED, sent_at=101.5).verdict(101.6) is Verdict.STEP_DOWN


def test_a_claim_needs_an_ended_lease() -> None:
    lease = Lease(epoch=1, holder="a", until=T0)
    assert expired(None, T0)
    assert not expired(lease, T0 - timedelta(milliseconds=1))
    assert expired(lease, T0)


@pytest.mark.parametrize(
    ("lease_s", "renew_s", "message"),
    [
        (0.0, 1.0, "must be positive"),
        (3.0, -1.0, "must be positive"),
        (3.0, 2.0, "renew at most every 1.5s"),
    ],
)
def test_terms_that_cannot_work_are_refused_naming_the_problem(lease_s: float, renew_s: float, message: str) -> None:
    with pytest.raises(LeaseError, match=message):
        LeaseTerms(lease_s=lease_s, renew_s=renew_s)


def test_the_default_terms_let_a_standby_lead_within_5s() -> None:
    terms = LeaseTerms()
    assert terms.lease_s + terms.campaign_s < 5.0

"""When a serving session's threads spin-wait (NRT_WORKER_ORT_SPIN): the ONNX Runtime entries each policy sets."""

from __future__ import annotations

import onnxruntime as ort
import pytest

from nrt.adapters.inference import Spin
from nrt.adapters.inference.weights import session_options

SPINNING = "session.intra_op.allow_spinning"
STOP_AT_END = "session.force_spinning_stop"


def entry(options: ort.SessionOptions, key: str) -> str | None:
    """The entry's value, None when the options do not set it (ONNX Runtime raises for a missing key)."""
    try:
        value: str = options.get_session_config_entry(key)
    except RuntimeError:
        return None
    return value


@pytest.mark.parametrize(
    ("spin", "spinning", "stop_at_end"),
    [("run", "1", "1"), ("always", "1", None), ("never", "0", None)],
)
def test_each_policy_sets_when_the_threads_spin(spin: Spin, spinning: str, stop_at_end: str | None) -> None:
    options = session_options(2, spin=spin)
    assert (entry(options, SPINNING), entry(options, STOP_AT_END)) == (spinning, stop_at_end)
    assert options.intra_op_num_threads == 2


def test_by_default_no_thread_spins() -> None:
    assert (entry(session_options(), SPINNING), entry(session_options(), STOP_AT_END)) == ("0", None)

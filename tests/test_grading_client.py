"""The grader's kernel client notices a message that has arrived within a slice, even when the
poll's wake-up is lost (autograder/guarded_execute.poll_in_slices)."""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from queue import Empty

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograder"))
from guarded_execute import POLL_SLICE, poll_in_slices  # noqa: E402


class LostWakeUp:
    """A channel whose message arrives at `arrives` s but whose poll only sees it when the poll
    times out, as pyzmq's asyncio poll does after a lost wake-up."""

    def __init__(self, arrives: float | None):
        self.start, self.arrives = time.monotonic(), arrives

    async def get_msg(self, timeout=None):
        await asyncio.sleep(timeout if timeout is not None else 3600)
        if self.arrives is not None and time.monotonic() - self.start >= self.arrives:
            return {"msg_type": "execute_reply"}
        raise Empty


def waited(channel, timeout):
    client = type("Client", (), {"shell_channel": channel, "iopub_channel": LostWakeUp(None)})()
    poll_in_slices(client)
    start = time.monotonic()
    try:
        return asyncio.run(channel.get_msg(timeout=timeout)), time.monotonic() - start
    except Empty:
        return None, time.monotonic() - start


@pytest.mark.parametrize("timeout", [60, None])
def test_a_message_whose_wake_up_was_lost_is_read_within_a_slice(timeout):
    message, seconds = waited(LostWakeUp(arrives=0.2), timeout)
    assert message == {"msg_type": "execute_reply"}
    assert seconds < POLL_SLICE + 0.5  # not the 60 s of the cell's timeout


def test_no_message_is_still_a_timeout_at_the_deadline():
    message, seconds = waited(LostWakeUp(arrives=None), 2.5)
    assert message is None and 2.4 < seconds < 3.5

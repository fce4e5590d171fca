"""The agents benchmark's instruments: the class hooks it installs come off again (other
sections and tests must see the real classes), the overhead split adds up, and the fake
server's arrival log answers "first request after this moment"."""

from __future__ import annotations

import trio

from bench.agents import _FEEDS, ArrivalLog, Probe, instrumented
from threadspindle.agents.base import StampedEvent
from threadspindle.agents.claude.parser import ClaudeStreamParser
from threadspindle.agents.opencode.server import OpencodeServer
from threadspindle.effects.process import ManagedProcess
from threadspindle.runtime.core.agent_events import TextDelta, TurnCompleted


def test_hooks_are_installed_only_inside_the_block() -> None:
    originals = [ManagedProcess.write_line, OpencodeServer.request]
    originals += [cls.__dict__[name] for cls, name in _FEEDS]
    probe = Probe()
    with instrumented(probe):
        hooked = [ManagedProcess.write_line, OpencodeServer.request]
        hooked += [cls.__dict__[name] for cls, name in _FEEDS]
        assert all(a is not b for a, b in zip(originals, hooked, strict=True))
        # A hooked parser still parses, and marks the line that yielded an event.
        probe.start("r1")
        line = '{"type":"system","subtype":"init","session_id":"s1","model":"m"}'
        events = ClaudeStreamParser().feed(line).events
        assert events and probe.first_feed is not None
    after = [ManagedProcess.write_line, OpencodeServer.request]
    after += [cls.__dict__[name] for cls, name in _FEEDS]
    assert all(a is b for a, b in zip(originals, after, strict=True))


async def test_overhead_split_adds_up_to_the_first_event() -> None:
    probe = Probe()
    probe.start("r1")
    t0 = probe.prompted = probe.prompted - 0.1  # the prompt went 100 ms before the event
    probe.writes.append((t0 + 0.001, t0 + 0.002))  # the prompt reached the pipe at +2 ms
    probe.prompt_returned = t0 + 0.003
    probe.writes.append((t0 + 0.020, t0 + 0.021))  # a later write (not the prompt's)
    probe.first_feed = t0 + 0.050
    await probe.emit(StampedEvent("old-run", None, TextDelta(text="late")))  # ignored
    assert probe.first_event is None
    await probe.emit(StampedEvent("r1", None, TextDelta(text="hi")))
    assert probe.first_event is not None and probe.text_seen.is_set()
    split = probe.overhead()
    assert split is not None
    spindle_in, spindle_out, cli = split
    assert abs(spindle_in - 0.002) < 1e-9
    assert spindle_out == probe.first_event - probe.first_feed
    assert abs(spindle_in + spindle_out + cli - (probe.first_event - t0)) < 1e-9
    await probe.emit(StampedEvent("r1", None, TurnCompleted()))
    with trio.fail_after(1):
        await probe.done.wait()


def test_arrival_log_finds_the_first_request_after_a_moment() -> None:
    log = ArrivalLog(["earlier"])
    assert list(log) == ["earlier"] and log.arrived == []
    log.append("a")
    moment = log.arrived[0] + 1e-9
    assert log.first_after(moment) is None
    log.append("b")
    assert log.first_after(moment) == log.arrived[1]
    assert list(log) == ["earlier", "a", "b"]

"""effects.render_pacing: when messages are sent and edited, alone (without the renderer's
effects), over the retrying recording platform in trio's mock time (``autojump_clock``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
import trio

from threadspindle.effects.platform import PlatformError, PlatformLimits
from threadspindle.effects.render_outputs import Output, OutputBook, RenderTally
from threadspindle.effects.render_pacing import PacedDelivery, RenderError
from threadspindle.effects.retrying_platform import RetryingPlatform
from threadspindle.testkit.recording_platform import RecordingPlatform

CHANNEL = "c"


@dataclass
class Channel:
    platform: RecordingPlatform
    append_only: bool = False
    book: OutputBook = field(default_factory=OutputBook)
    tally: RenderTally = field(default_factory=RenderTally)
    posted: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.delivery = PacedDelivery(
            RetryingPlatform(self.platform),
            CHANNEL,
            self.book,
            self.tally,
            clock=trio.current_time,
            append_only=self.append_only,
            on_posted=lambda out, message_id: self.posted.append((out.key, message_id)),
        )

    def output(self, key: str) -> Output:
        return self.book.add(Output(key, "block"))


@pytest.fixture
def channel() -> Channel:
    return Channel(RecordingPlatform())  # edits at most every 0.5 s


async def test_edits_until_one_is_due_are_coalesced_into_one(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("k")
    message = channel.book.new_message(out, "a")
    await channel.delivery.send(out, message)
    for text in ("ab", "abc", "abcd"):
        message.final = text
        channel.delivery.mark_dirty(out, message)
    assert channel.delivery.next_deadline() == 0.5 and channel.delivery.waiting() == 1
    await trio.sleep(0.4)
    await channel.delivery.flush_due(trio.current_time())
    assert channel.platform.count("edit") == 0
    await trio.sleep_until(channel.delivery.next_deadline())
    await channel.delivery.flush_due(trio.current_time())
    [edit] = channel.platform.calls_of("edit")
    assert (edit.at, edit.text) == (0.5, "abcd")
    assert channel.delivery.waiting() == 0 and channel.tally.edits == 1


async def test_an_edit_that_changes_nothing_makes_no_call(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("k")
    message = channel.book.new_message(out, "same")
    await channel.delivery.send(out, message)
    channel.delivery.mark_dirty(out, message)
    await trio.sleep(1.0)
    await channel.delivery.flush_due(trio.current_time())
    assert channel.platform.count("edit") == 0 and channel.delivery.waiting() == 0


async def test_a_new_message_may_wait_one_interval(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("k")
    message = channel.book.new_message(out, "card")
    await channel.delivery.post(out, message, now=False)
    assert channel.delivery.is_unsent(message) and channel.delivery.next_deadline() == 0.5
    await channel.delivery.flush_due(trio.current_time())
    assert channel.posted == []
    await trio.sleep(0.5)
    await channel.delivery.flush_due(trio.current_time())
    assert [c.at for c in channel.platform.calls_of("send")] == [0.5]
    assert channel.posted == [("k", message.id)] and not channel.delivery.is_unsent(message)


async def test_the_channel_shows_messages_in_creation_order(
    channel: Channel, autojump_clock: object
) -> None:
    first, second = channel.output("first"), channel.output("second")
    waiting = channel.book.new_message(first, "made first, waiting")
    await channel.delivery.post(first, waiting, now=False)
    await channel.delivery.send(second, channel.book.new_message(second, "made second"))
    assert channel.platform.texts(CHANNEL) == ["made first, waiting", "made second"]
    assert [key for key, _ in channel.posted] == ["first", "second"]


async def test_settling_waits_out_the_pacing_of_that_output_only(
    channel: Channel, autojump_clock: object
) -> None:
    out, other = channel.output("k"), channel.output("other")
    message = channel.book.new_message(out, "a")
    await channel.delivery.send(out, message)
    message.final = "ab"
    channel.delivery.mark_dirty(out, message)
    unsent = channel.book.new_message(out, "second message")
    await channel.delivery.post(out, unsent, now=False)
    elsewhere = channel.book.new_message(other, "x")
    await channel.delivery.send(other, elsewhere)
    elsewhere.final = "xy"
    channel.delivery.mark_dirty(other, elsewhere)
    await channel.delivery.settle(out)
    assert [(c.kind, c.at, c.text) for c in channel.platform.calls] == [
        ("send", 0.0, "a"),
        ("send", 0.0, "second message"),
        ("send", 0.0, "x"),
        ("edit", 0.5, "ab"),
    ]
    assert channel.delivery.waiting() == 1  # the other output's edit keeps its pacing


async def test_a_blank_message_is_never_sent(channel: Channel, autojump_clock: object) -> None:
    out = channel.output("k")
    message = channel.book.new_message(out, " \n ")
    await channel.delivery.send(out, message)
    assert channel.platform.calls == [] and out.messages == []
    assert channel.tally.blank_skipped == 1


async def test_a_refused_call_fails_its_output_and_names_it(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("t/r1/0")
    message = channel.book.new_message(out, "a")
    await channel.delivery.send(out, message)
    channel.platform.inject(lambda: PlatformError("403 Missing Access"), kind="edit")
    message.final = "ab"
    with pytest.raises(RenderError, match="'t/r1/0': 403 Missing Access") as caught:
        await channel.delivery.edit(out, message)
    assert caught.value.key == "t/r1/0" and out.failed
    message.final = "abc"
    await channel.delivery.edit(out, message)  # a failed output is fed no more
    assert channel.platform.count("edit", ok_only=False) == 1


async def test_without_edits_a_changed_text_is_a_new_message(autojump_clock: object) -> None:
    channel = Channel(RecordingPlatform(PlatformLimits(supports_edit=False)))
    out = channel.output("k")
    message = channel.book.new_message(out, "first")
    await channel.delivery.send(out, message)
    message.final = "second"
    await channel.delivery.edit(out, message)
    assert channel.platform.texts(CHANNEL) == ["first", "second"]
    assert channel.platform.count("edit") == 0 and len(out.messages) == 2


async def test_an_append_only_display_gets_waiting_edits_before_a_new_message(
    autojump_clock: object,
) -> None:
    channel = Channel(RecordingPlatform(streams_append_only=True), append_only=True)
    out = channel.output("k")
    message = channel.book.new_message(out, "a")
    await channel.delivery.send(out, message)
    message.final = "ab"
    channel.delivery.mark_dirty(out, message)  # not due for 0.5 s
    later = channel.output("later")
    await channel.delivery.send(later, channel.book.new_message(later, "next"))
    assert [(c.kind, c.text) for c in channel.platform.calls] == [
        ("send", "a"),
        ("edit", "ab"),
        ("send", "next"),
    ]


async def test_deleting_an_unsent_message_makes_no_call(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("k")
    unsent = channel.book.new_message(out, "never shown")
    await channel.delivery.post(out, unsent, now=False)
    await channel.delivery.delete(out, unsent)
    sent = channel.book.new_message(out, "shown")
    await channel.delivery.send(out, sent)
    await channel.delivery.delete(out, sent)
    assert [c.kind for c in channel.platform.calls] == ["send", "delete"]
    assert channel.delivery.waiting() == 0 and channel.tally.deletes == 1


async def test_a_reply_comes_after_the_messages_made_before_it(
    channel: Channel, autojump_clock: object
) -> None:
    out = channel.output("k")
    await channel.delivery.post(out, channel.book.new_message(out, "card"), now=False)
    reply_out = channel.output("t/reply/a1")
    reply = channel.book.new_message(reply_out, "Queued")
    await channel.delivery.reply(reply_out, reply, "a1", ephemeral=True, buttons=())
    assert channel.platform.transcript(CHANNEL) == "card\n(only you) ↳ Queued"
    assert channel.tally.replies == 1 and channel.posted[-1] == ("t/reply/a1", reply.id)

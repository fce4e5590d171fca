"""Attachments under attack (issue 19.5), through the real discord.py client against the
fake Discord, which serves the bytes: hostile names, two files of one name, symlinks
planted by the agent in its workdir, and files over the size cap (declared, or only found
while streaming). Each either lands safely under ``<workdir>/.spindle/attachments`` or
refuses its message with a reply, never silently."""

from __future__ import annotations

import os
from pathlib import Path

from threadspindle.ingress.attachments import NAME_BYTES, safe_file_name
from threadspindle.runtime.core.actions import ConversationStarted, UserMessage
from threadspindle.testkit.fake_discord import GeneratedBytes
from threadspindle.testkit.fake_discord.harness import SinkRuntime, World, running_bot, wait_for

MIB = 1024 * 1024


async def _start_thread(world: World, runtime: SinkRuntime) -> int:
    world.fake.run_command(world.channel, world.alice, "claude start", workdir=world.workdir)
    started = await wait_for(lambda: runtime.of_kind("conversation_started"))
    return int(started[-1].thread_id)


async def _prompts(runtime: SinkRuntime, count: int = 1) -> list[UserMessage]:
    found = await wait_for(lambda: runtime.of_kind("user_message"), lambda m: len(m) >= count)
    return [m for m in found if isinstance(m, UserMessage)]


async def _reply_to(world: World, thread: int, message: int) -> str:
    replies = await wait_for(
        lambda: [m for m in world.fake.messages(thread) if m.reply_to == message]
    )
    (reply,) = replies
    assert (reply.allowed_mentions or {}).get("parse") == []  # it pings nobody
    return reply.content


def _folder(world: World) -> Path:
    return Path(os.path.realpath(world.workdir)) / ".spindle" / "attachments"


def test_names_are_cleaned_and_bounded() -> None:
    assert safe_file_name("report.pdf") == "report.pdf"
    assert safe_file_name("../../etc/passwd") == "passwd"
    assert safe_file_name("..\\..\\boot.ini") == "boot.ini"
    assert safe_file_name("..") == "file" and safe_file_name("") == "file"
    assert safe_file_name(".bashrc") == "bashrc"  # never a hidden file
    assert safe_file_name("a\0b\nc d.txt") == "a_b_c_d.txt"
    assert safe_file_name("\u202egpj.exe") == "_gpj.exe"
    assert safe_file_name("ünïcödé.md") == "ünïcödé.md"
    long = safe_file_name("é" * 300 + ".tar.gz")
    assert long.endswith(".gz") and len(long.encode()) <= NAME_BYTES


async def test_long_nul_and_duplicate_names_all_arrive_with_their_own_bytes(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        files = (
            ("x" * 300 + ".bin", b"long name", "application/octet-stream"),
            ("evil\0name.bin", b"nul name", "application/octet-stream"),
            ("same.bin", b"first", "application/octet-stream"),
            ("dir/same.bin", b"second", "application/octet-stream"),
        )
        world.fake.send_message(thread, world.alice, "four files", attachments=files)
        (prompt,) = await _prompts(runtime)
        assert prompt.text == "four files"
        paths = [a.path for a in prompt.attachments]
        assert all(p is not None for p in paths) and len(set(paths)) == 4
        for attachment, (_, data, _) in zip(prompt.attachments, files, strict=True):
            assert attachment.path is not None
            path = Path(attachment.path)
            assert path.parent == _folder(world)
            assert len(path.name.encode()) < 255 and "\0" not in path.name
            assert path.read_bytes() == data
            assert "\0" not in attachment.name
        assert prompt.attachments[2].name == prompt.attachments[3].name == "same.bin"


async def test_a_planted_spindle_symlink_is_not_followed(world: World, tmp_path: Path) -> None:
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        # The agent works in the workdir: it can plant .spindle -> anywhere it likes.
        (Path(world.workdir) / ".spindle").symlink_to(outside)
        message = world.fake.send_message(
            thread,
            world.alice,
            "see attached",
            attachments=(("payload.bin", b"planted", "application/octet-stream"),),
        )
        reply = await _reply_to(world, thread, message)
        assert "Not sent to the agent" in reply and "symlink" in reply
        assert list(outside.rglob("*")) == []  # nothing was written outside the workdir
        assert runtime.of_kind("user_message") == []  # refused whole, with the reply above


async def test_a_symlink_at_the_target_name_is_never_written_through(
    world: World, tmp_path: Path
) -> None:
    victim = tmp_path.parent / f"{tmp_path.name}-victim.txt"
    victim.write_bytes(b"precious")
    runtime = SinkRuntime()
    async with running_bot(world, runtime):
        thread = await _start_thread(world, runtime)
        files = (("x.bin", b"attacker bytes", "application/octet-stream"),)
        message = world.fake.send_message(thread, world.alice, "once", attachments=files)
        (first,) = await _prompts(runtime)
        saved = first.attachments[0].path
        assert saved is not None
        # The agent replaces the saved file with a symlink to a victim, then the gateway
        # delivers the message again (a resume replay): the same name comes up again.
        os.unlink(saved)
        os.symlink(victim, saved)
        world.fake.redeliver_message(message)
        _, second = await _prompts(runtime, 2)
        again = second.attachments[0].path
        assert again is not None and again != saved
        assert not os.path.islink(again) and Path(again).read_bytes() == b"attacker bytes"
        assert victim.read_bytes() == b"precious"


async def test_a_file_over_the_cap_refuses_its_message_with_a_reply(world: World) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime, attachment_max_bytes=MIB):
        thread = await _start_thread(world, runtime)
        big = world.fake.send_message(
            thread,
            world.alice,
            "too big",
            attachments=(("big.iso", GeneratedBytes(300 * MIB), None),),
        )
        reply = await _reply_to(world, thread, big)
        assert "big.iso" in reply and "300.0 MiB" in reply and "1.0 MiB" in reply
        # A file whose declared size lies is cut off while it streams, and removed.
        liar = world.fake.send_message(
            thread,
            world.alice,
            "lying size",
            attachments=(("liar.bin", GeneratedBytes(3 * MIB, declared=1000), None),),
        )
        reply = await _reply_to(world, thread, liar)
        assert "liar.bin" in reply and "larger than the 1.0 MiB" in reply
        assert not _folder(world).exists() or list(_folder(world).iterdir()) == []
        # Under the cap, it streams to disk whole.
        world.fake.send_message(
            thread,
            world.alice,
            "fits",
            attachments=(("fits.bin", GeneratedBytes(MIB - 1), None),),
        )
        (prompt,) = await _prompts(runtime)
        assert prompt.text == "fits"
        assert prompt.attachments[0].path is not None
        assert os.path.getsize(prompt.attachments[0].path) == MIB - 1


async def test_a_refused_attachment_in_a_project_channel_still_opens_the_conversation(
    world: World,
) -> None:
    runtime = SinkRuntime()
    async with running_bot(world, runtime, attachment_max_bytes=MIB):
        message = world.fake.send_message(
            world.project_channel,
            world.alice,
            "build this",
            attachments=(("huge.bin", GeneratedBytes(2 * MIB), None),),
        )
        (start,) = await wait_for(lambda: runtime.of_kind("conversation_started"))
        assert isinstance(start, ConversationStarted)
        reply = await _reply_to(world, world.project_channel, message)
        assert "huge.bin" in reply
        assert runtime.of_kind("user_message") == []

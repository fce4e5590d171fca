import json, sys
from pathlib import Path
import pytest, trio
sys.path.insert(0, "/work/wt/workspaces/tests/agents/codex")
from test_codex_integration import running
from threadspindle.testkit.fake_model.openai_responses import OpenAIResponsesFake
from threadspindle.testkit.genuine_clis import codex_options

async def test_exp(tmp_path: Path) -> None:
    fake = OpenAIResponsesFake(); fake.start()
    try:
        work = tmp_path / "work"; work.mkdir()
        async with running(codex_options(fake.base_url, tmp_path / "home"), work) as s:
            await s.turn("r1", "remember ALPHA")
            await s.turn("r2", "remember BETA")
            rpc = s.adapter._rpc; tid = s.adapter._thread_id
            print("TURNRUNS", s.adapter._turn_runs)
            r = await rpc.request("thread/turns/list", {"threadId": tid}, timeout=10)
            print("LIST", json.dumps(r)[:1500])
            beta = [t for t,run in s.adapter._turn_runs.items() if run=="r2"][0]
            try:
                r = await rpc.request("thread/revert", {"threadId": tid, "beforeTurnId": beta}, timeout=10)
                print("REVERT", json.dumps(r)[:800])
            except Exception as e:
                print("REVERTERR", repr(e))
            try:
                r = await rpc.request("thread/rollback", {"threadId": tid, "numTurns": 1}, timeout=10)
                print("ROLLBACK", json.dumps(r)[:800])
            except Exception as e:
                print("ROLLBACKERR", repr(e))
            await s.turn("r3", "what now")
            print("LASTREQ", json.dumps(fake.requests[-1].body)[-1500:])
            n0 = len(s.events)
            try:
                r = await rpc.request("thread/shellCommand", {"threadId": tid, "command": "echo hi; echo err >&2; exit 3", "timeoutMs": 5000}, timeout=10)
                print("SHELL", r)
            except Exception as e:
                print("SHELLERR", repr(e))
            await trio.sleep(3)
            for e in s.events[n0:]: print("EV", e)
            print("RAW", s.adapter._parser.stats.snapshot())
    finally:
        fake.stop()

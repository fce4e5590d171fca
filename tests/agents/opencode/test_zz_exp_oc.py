import json, sys
from pathlib import Path
import trio
from test_opencode_integration import OpenAIChatFake, opencode_options, running

async def test_exp(tmp_path: Path) -> None:
    fake = OpenAIChatFake(); fake.start()
    try:
        work = tmp_path / "work"; work.mkdir()
        async with running(opencode_options(fake, tmp_path / "home"), work) as t:
            await t.turn("remember ALPHA")
            await t.turn("remember BETA")
            server = t.adapter._server; sid = t.adapter._session_id
            r = await server.request("GET", f"/session/{sid}/message")
            msgs = r.json()
            for m in msgs: print("MSG", m["info"]["id"], m["info"]["role"], [p.get("text") for p in m["parts"] if p.get("type")=="text"])
            users = [m["info"]["id"] for m in msgs if m["info"]["role"]=="user"]
            r = await server.request("POST", f"/session/{sid}/revert", json_body={"messageID": users[-1]})
            print("REVERT", r.status_code, r.text[:600])
            r = await server.request("GET", f"/session/{sid}/message")
            print("AFTER", len(r.json()))
            r = await server.request("POST", f"/session/{sid}/unrevert", json_body={})
            print("UNREVERT", r.status_code, r.text[:300])
            r = await server.request("POST", f"/session/{sid}/revert", json_body={"messageID": users[-1]})
            print("REVERT2", r.status_code)
            await t.turn("what now")
            print("LASTREQ", json.dumps(fake.requests[-1].body)[:1500])
            n0 = len(t.events)
            r = await server.request("POST", f"/session/{sid}/shell", json_body={"agent": "build", "command": "echo hi; echo err >&2; exit 3"})
            print("SHELL", r.status_code, r.text[:1500])
            await trio.sleep(2)
            for e in t.events[n0:]: print("EV", e)
    finally:
        fake.stop()

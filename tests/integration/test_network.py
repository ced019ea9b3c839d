"""No route out: from inside a real rollout container (``network none``, the session's socket folder mounted, as the
rollout engine starts it), only its own session's model routes answer.

Probed from the container with the bundle's Node: a TCP server of the host (on 0.0.0.0, so also its non-loopback
addresses), the recording proxy's own port, two external addresses, another session's routes through the socket,
the proxy's root routes through the socket. The same probes from a ``network host`` container reach the host's server,
so an "unreachable" is the container's doing, not a broken probe. Then the real qwen-code completes a scripted rollout
through the socket and its forwarder, and a shell command of the agent's cannot reach the host.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from typing import Any

import pytest

from qwen_swe.agent import qwen as qa
from qwen_swe.config.settings import load_settings
from qwen_swe.data.prompts import build_prompt
from qwen_swe.paths import AGENT_MOUNT, agent_bundle_dir
from qwen_swe.sandbox.docker import DockerSandbox
from qwen_swe.traffic.endpoint import SOCKET_DIR_IN_CONTAINER
from qwen_swe.traffic.proxy import RecordingProxy
from tests.scripted_server import ScriptedServer, smollm2_tokenizer
from tests.task_pack import gold_edit, replayable_task
from tests.toolcall_text import hermes_call

pytestmark = [pytest.mark.docker, pytest.mark.agent]
NODE = f"{AGENT_MOUNT}/node/bin/node"
EXTERNAL = (("1.1.1.1", 443), ("8.8.8.8", 53))
# One probe per line: "tcp HOST PORT" or "http PATH" (through the session socket); prints one JSON result per line.
PROBE_JS = r"""
const net = require("net"), http = require("http");
const [sock, ...lines] = process.argv.slice(2);
const out = (probe, ok, detail) => console.log(JSON.stringify({probe, ok, detail}));
const run = (line) => new Promise((done) => {
  const [kind, a, b] = line.split(" ");
  if (kind === "tcp") {
    const c = net.connect({host: a, port: Number(b)});
    c.setTimeout(3000, () => { out(line, false, "timeout"); c.destroy(); done(); });
    c.on("connect", () => { out(line, true, "connected"); c.destroy(); done(); });
    c.on("error", (e) => { out(line, false, e.code); done(); });
  } else {
    const r = http.get({socketPath: sock, path: a, timeout: 3000}, (res) => {
      res.resume(); out(line, res.statusCode < 400, res.statusCode); done(); });
    r.on("error", (e) => { out(line, false, e.code); done(); });
  }
});
(async () => { for (const l of lines) await run(l); })();
"""


@pytest.fixture(scope="module")
def task() -> dict[str, Any]:
    return replayable_task()


def _box(task: dict, run_id: str, endpoint_dir: Any, network: str = "none") -> DockerSandbox:
    """A rollout container as the engine makes it (``RolloutEngine._start_sandbox``)."""
    return DockerSandbox(
        task["image"],
        run_id=run_id,
        cpus=1.0,
        memory="2g",
        network=network,
        mounts={str(agent_bundle_dir()): AGENT_MOUNT, str(endpoint_dir): SOCKET_DIR_IN_CONTAINER},
        base_commit=task.get("base_commit"),
        hide_future=False,
    )


def _host_addresses() -> list[str]:
    """This machine's IPv4 addresses other than loopback, from iproute2 (none where it is missing)."""
    try:
        out = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return sorted({m for m in re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", out) if not m.startswith("127.")})


async def _probe(box: DockerSandbox, socket_path: str, probes: list[str]) -> dict[str, dict]:
    await box.write_file("/tmp/probe.js", PROBE_JS)
    args = " ".join(f"'{p}'" for p in probes)
    res = await box.exec(f"{NODE} /tmp/probe.js {socket_path} {args}", timeout=120)
    assert res.exit_code == 0, res.output
    found = {r["probe"]: r for r in map(json.loads, (x for x in res.output.splitlines() if x.startswith("{")))}
    assert set(found) == set(probes), res.output
    return found


async def _host_service() -> asyncio.AbstractServer:
    """A TCP service of the host on every address (as vLLM, the trainer or Ray bind): it answers and hangs up."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    return await asyncio.start_server(answer, "0.0.0.0", 0)


def test_a_rollout_container_reaches_only_its_own_session(task, run_id, record_property):
    async def scenario() -> tuple[dict, dict, list[str], int]:
        service = await _host_service()
        port = service.sockets[0].getsockname()[1]
        try:
            async with ScriptedServer(["unused"]) as model, RecordingProxy(model.url, model="scripted") as proxy:
                mine, other = proxy.open_session({"n": 1}), proxy.open_session({"n": 2})
                proxy_port = proxy.root.rsplit(":", 1)[1]
                model_port = model.url.rsplit(":", 1)[1]
                probes = [f"tcp 127.0.0.1 {port}", f"tcp 127.0.0.1 {proxy_port}", f"tcp 127.0.0.1 {model_port}"]
                probes += [f"tcp {ip} {port}" for ip in _host_addresses()]
                probes += [f"tcp {host} {p}" for host, p in EXTERNAL]
                probes += [
                    "http /v1/models",
                    f"http /s/{other.id}/v1/models",
                    f"http /s/{mine.id}/v1/models",
                    "http /health",
                ]
                async with proxy.endpoint(mine.id) as ep, proxy.endpoint(other.id):
                    async with _box(task, run_id, ep.folder) as box:
                        listing = (await box.exec(f"ls -A {SOCKET_DIR_IN_CONTAINER}", timeout=60)).output.split()
                        inside = await _probe(box, ep.socket_in_container, probes)
                    async with _box(task, run_id, ep.folder, network="host") as box:  # the probes' own control
                        control = await _probe(box, ep.socket_in_container, [f"tcp 127.0.0.1 {port}"])
        finally:
            service.close()
            await service.wait_closed()
        return inside, control, listing, port

    inside, control, listing, port = asyncio.run(scenario())
    record_property("routes", json.dumps(inside))
    print(
        "\n".join(f"{r['probe']}: {'reachable' if r['ok'] else 'unreachable'} ({r['detail']})" for r in inside.values())
    )
    assert listing == ["model.sock"]  # only its own session's socket is in the container
    assert control[f"tcp 127.0.0.1 {port}"]["ok"], f"the probe fails even from a host-network container: {control}"
    reachable = [p for p, r in inside.items() if r["ok"]]
    assert reachable == ["http /v1/models"], inside  # the session's own route, nothing else


def test_the_agent_completes_a_rollout_through_its_socket(task, run_id):
    path, old, new = gold_edit(task["patch"])
    target = f"/testbed/{path}"

    async def scenario():
        service = await _host_service()
        port = service.sockets[0].getsockname()[1]
        reach = (
            f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-REACHED || echo HOST-BLOCKED; "
            "(exec 3<>/dev/tcp/1.1.1.1/443) 2>/dev/null && echo NET-REACHED || echo NET-BLOCKED"
        )
        script = [
            hermes_call("run_shell_command", command=reach),
            hermes_call("read_file", file_path=target),
            hermes_call("edit", file_path=target, old_string=old, new_string=new),
            "Fixed the bug.",
        ]
        settings = load_settings([], env={}).replace(max_turns=8, agent_timeout=300.0, tool_choice="required")
        tokenizer = smollm2_tokenizer()
        try:
            async with (
                ScriptedServer(script, tokenizer=tokenizer, max_model_len=8192) as model,
                RecordingProxy(model.url, model="scripted", tokenizer=tokenizer, mode="tokens") as proxy,
            ):
                session = proxy.open_session({"test": run_id})

                def fresh_session() -> str:  # as the rollout engine does
                    nonlocal session
                    session = proxy.restart_session(session.id)
                    return session.base_url

                async with proxy.endpoint(session.id) as ep, _box(task, run_id, ep.folder) as box:
                    result = await qa.run_agent(
                        box,
                        base_url="",
                        model="smollm2-135m",
                        prompt=build_prompt(task),
                        agent=settings.agent,
                        inference=settings.inference,
                        profile="compact",
                        fresh_session=fresh_session,
                        model_socket=ep.socket_in_container,
                    )
                    patch = await qa.take_diff(box)
                turns = proxy.close_session(session.id)
        finally:
            service.close()
            await service.wait_closed()
        return result, patch, turns

    result, patch, turns = asyncio.run(scenario())
    assert result.outcome == "completed" and not result.infra and result.exit_code == 0, result.log_tail
    assert result.tool_calls == 3 and result.final_message == "Fixed the bug."
    assert f"+{new}" in patch and f"-{old}" in patch
    assert len(turns) == 4 and all(t.ok for t in turns)
    tool_output = json.dumps(turns[1].request_messages)
    assert "HOST-BLOCKED" in tool_output and "NET-BLOCKED" in tool_output, tool_output[-2000:]

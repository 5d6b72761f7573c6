"""The gateway never freezes the event loop, and recovers from a dead or hung worker.

These use the real bindings against a local listener that accepts connections and never
answers (a hung collector); no HTCondor daemons are needed.
"""

from __future__ import annotations

import os
import signal

import pytest
import trio

from common.condor import CondorError, Gateway, GatewayCrashed, GatewayTimeout


async def silent_listener(task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Accept connections, read nothing, answer nothing."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    held: list[trio.SocketStream] = []

    async def hold(stream: trio.SocketStream) -> None:
        held.append(stream)
        await trio.sleep_forever()

    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(hold, listeners)


class Ticker:
    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await trio.sleep(0.01)
            self.ticks += 1


async def test_hung_collector_times_out_while_loop_keeps_ticking() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_listener)
        ticker = Ticker()
        nursery.start_soon(ticker.run)
        async with Gateway(condor_config="/dev/null") as gw:
            await gw.version()  # worker up, so the timed call is all network wait
            before = ticker.ticks
            with pytest.raises(GatewayTimeout) as info:
                await gw.pool_load(collector=f"127.0.0.1:{port}", timeout=2.0)
            during = ticker.ticks - before
            assert "pool_load: no answer within 2 s" in str(info.value)
            # A frozen loop would have ticked at most once; 2 s at 10 ms is ~200 ticks.
            assert during >= 20
            assert await gw.version()  # a fresh worker answers the next call
            assert gw.restarts == 0  # the killed worker was discarded, not counted as crashed
        nursery.cancel_scope.cancel()


async def test_worker_killed_mid_call_then_next_call_works() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_listener)
        async with Gateway(condor_config="/dev/null", timeout=60) as gw:
            await gw.version()
            pid = gw.child_pid
            assert pid is not None

            async def kill_soon() -> None:
                await trio.sleep(0.5)
                os.kill(pid, signal.SIGKILL)

            nursery.start_soon(kill_soon)
            with pytest.raises(GatewayCrashed) as info:
                await gw.pool_load(collector=f"127.0.0.1:{port}")
            assert "worker process died during the call" in str(info.value)
            assert await gw.version()
            assert gw.child_pid not in (None, pid)
        nursery.cancel_scope.cancel()


async def test_unknown_operation_is_a_typed_error() -> None:
    async with Gateway(condor_config="/dev/null") as gw:
        with pytest.raises(CondorError) as info:
            await gw.call("no_such_op")
        assert info.value.kind == "BadRequest" and "unknown op 'no_such_op'" in str(info.value)
        assert await gw.version()  # the worker survived the bad request


async def test_cancelled_call_leaves_gateway_usable() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(silent_listener)
        async with Gateway(condor_config="/dev/null") as gw:
            with trio.move_on_after(1):
                await gw.pool_load(collector=f"127.0.0.1:{port}")
            assert await gw.version()
        nursery.cancel_scope.cancel()

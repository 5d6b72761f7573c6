"""The gateway never freezes the event loop, and recovers from a dead or hung worker.

These use the real bindings against a local listener that accepts connections and never
answers (a hung collector); no HTCondor daemons are needed.
"""

from __future__ import annotations

import os
import signal
from functools import partial

import pytest
import trio

from common.condor import CondorError, Gateway, GatewayCrashed, GatewayTimeout
from deploy.harness.sandbox import poll_until_async


class SilentCollector:
    """A hung collector: accepts connections, reads nothing, answers nothing. `connections`
    counts the connections it accepted: a worker connected to it is inside its call."""

    def __init__(self) -> None:
        self.connections = 0

    async def serve(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")

        async def hold(stream: trio.SocketStream) -> None:
            self.connections += 1
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
        collector = SilentCollector()
        port = await nursery.start(collector.serve)
        ticker = Ticker()
        nursery.start_soon(ticker.run)
        async with Gateway(condor_config="/dev/null") as gw:
            await gw.version()  # worker up, so the calls below are all network wait

            # While a call waits on the hung collector, the event loop runs: the collector accepts
            # the worker's connection, and after that the ticker ticks, with the call still
            # pending. A loop frozen by the call would run neither before the call returned.
            finished = trio.Event()

            async def hung_call() -> None:
                await gw.pool_load(collector=f"127.0.0.1:{port}", timeout=120)
                finished.set()

            async with trio.open_nursery() as calls:
                calls.start_soon(hung_call)
                await poll_until_async(
                    "the worker to connect to the collector", lambda: collector.connections
                )
                ticks = ticker.ticks
                await poll_until_async("a tick after the connection", lambda: ticker.ticks > ticks)
                assert not finished.is_set()
                calls.cancel_scope.cancel()

            # A call with a timeout ends with GatewayTimeout, not with an answer, at any speed: the
            # collector never answers. (The cancelled call took its worker along: start a new one
            # first, so that the 2 s are all network wait again.)
            await gw.version()
            with pytest.raises(GatewayTimeout) as info:
                await gw.pool_load(collector=f"127.0.0.1:{port}", timeout=2.0)
            assert "pool_load: no answer within 2 s" in str(info.value)
            assert await gw.version()  # a fresh worker answers the next call
            assert gw.restarts == 0  # the killed worker was discarded, not counted as crashed
        nursery.cancel_scope.cancel()


async def test_worker_killed_mid_call_then_next_call_works() -> None:
    async with trio.open_nursery() as nursery:
        collector = SilentCollector()
        port = await nursery.start(collector.serve)
        async with Gateway(condor_config="/dev/null", timeout=600) as gw:
            await gw.version()
            pid = gw.child_pid
            assert isinstance(pid, int)

            async def kill_mid_call() -> None:
                # Connected to the collector: the worker is inside the call.
                await poll_until_async(
                    "the worker to connect to the collector", lambda: collector.connections
                )
                os.kill(pid, signal.SIGKILL)

            nursery.start_soon(kill_mid_call)
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
        collector = SilentCollector()
        port = await nursery.start(collector.serve)
        async with Gateway(condor_config="/dev/null", timeout=600) as gw:
            async with trio.open_nursery() as calls:
                calls.start_soon(partial(gw.pool_load, collector=f"127.0.0.1:{port}"))
                # Cancelled mid-call: the worker is connected to the collector, waiting.
                await poll_until_async(
                    "the worker to connect to the collector", lambda: collector.connections
                )
                calls.cancel_scope.cancel()
            assert await gw.version()
        nursery.cancel_scope.cancel()

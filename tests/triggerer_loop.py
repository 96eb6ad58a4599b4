"""Airflow's own trigger runner in the test's process, to run triggers the way the triggerer does.

A trigger goes in serialized (its class path and its keyword arguments, encrypted as the triggerer's
``trigger`` rows hold them); Airflow's ``TriggerRunner`` imports the class, decrypts the arguments,
builds the trigger and runs it in ``run_trigger``, which queues each event it yields. Stopping a trigger
cancels its task as a triggerer's shutdown does (``cleanup`` runs, ``on_kill`` does not); killing it
cancels it as a user's action on its task does (``on_kill`` runs, Airflow 3.3+); starting it
again from the same serialized form is what a restarted triggerer does. Used by the unit tests (with
Airflow 3.2 and 3.3) and the integration tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
import time
from typing import Any

from airflow.jobs.triggerer_job_runner import TriggerRunner
from airflow.models.trigger import Trigger
from airflow.triggers.base import BaseTrigger, TriggerEvent


class TriggererLoop:
    """Runs serialized triggers in Airflow's TriggerRunner; collects what each yields."""

    def __init__(self) -> None:
        self.runner = TriggerRunner()
        self._ids = itertools.count(1)
        #: per trigger id, the events it yielded so far, in order
        self.events: dict[int, list[TriggerEvent]] = {}

    async def start(self, trigger: BaseTrigger) -> int:
        """Start ``trigger`` from its serialized form; return its id in the runner."""
        from airflow.executors.workloads import RunTrigger

        classpath, kwargs = trigger.serialize()
        trigger_id = next(self._ids)
        workload = RunTrigger(
            id=trigger_id,
            ti=None,
            classpath=classpath,
            encrypted_kwargs=Trigger(classpath, kwargs).encrypted_kwargs,
        )
        self.runner.to_create.append(workload)
        await self.runner.create_triggers()
        if trigger_id not in self.runner.triggers:
            raise AssertionError(f"the runner did not start {classpath}: {self.runner.failed_triggers}")
        self.events[trigger_id] = []
        return trigger_id

    def _collect(self) -> None:
        while self.runner.events:
            entry = self.runner.events.popleft()
            trigger_id, event = entry[0], entry[1]  # a tuple (3.2) or a TriggerEventEntry (3.3)
            self.events.setdefault(trigger_id, []).append(event)

    async def wait_for_events(self, trigger_id: int, count: int, timeout: float = 60.0) -> list[TriggerEvent]:
        """The first ``count`` events of ``trigger_id`` (waits for them; fails with what came)."""
        deadline = time.monotonic() + timeout
        while True:
            self._collect()
            found = self.events.get(trigger_id, [])
            if len(found) >= count:
                return found[:count]
            task = self.runner.triggers.get(trigger_id, {}).get("task")
            if task is not None and task.done():
                raise AssertionError(f"trigger {trigger_id} ended: {task.exception() or 'no error'}")
            if time.monotonic() > deadline:
                raise AssertionError(f"trigger {trigger_id}: {len(found)} events within {timeout:.0f}s")
            await asyncio.sleep(0.02)

    async def reached(self, point: threading.Event, timeout: float = 60.0) -> None:
        """Wait until a trigger set ``point`` (a pause-point hook sets it: ``on_pause(name, point.set)``)."""
        if not await asyncio.to_thread(point.wait, timeout):
            raise AssertionError(f"no trigger reached its pause point within {timeout:.0f}s")
        point.clear()

    async def settle(self, trigger_id: int, polls: int = 3) -> list[TriggerEvent]:
        """Let the trigger run for a while; the events it yielded so far."""
        for _ in range(polls):
            await asyncio.sleep(0.05)
        self._collect()
        return list(self.events.get(trigger_id, []))

    async def stop(self, trigger_id: int) -> None:
        """Cancel the trigger as a triggerer shutting down does; wait until it ended."""
        task = self.runner.triggers.pop(trigger_id)["task"]
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._collect()

    async def kill(self, trigger_id: int) -> None:
        """Cancel the trigger as Airflow 3.3's triggerer does after a user's action on its task (marked
        failed, cleared, marked success): ``run_trigger`` then awaits the trigger's ``on_kill``."""
        from airflow.jobs.triggerer_job_runner import _USER_ACTION_CANCEL_MSG

        task = self.runner.triggers.pop(trigger_id)["task"]
        task.cancel(_USER_ACTION_CANCEL_MSG)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        self._collect()

    async def close(self) -> None:
        for trigger_id in list(self.runner.triggers):
            await self.stop(trigger_id)

    def running(self, trigger_id: int) -> Any:
        return self.runner.triggers.get(trigger_id)

"""Workflows: jobs that wait for other jobs, sent in one transaction.

    from sqlq.flow import Job, Workflow, chain, chord, group

    # fetch, then resize, then publish: each waits for the one before
    client.send_flow(chain(Job("fetch", "a.png"), Job("resize", "a.png"),
                           Job("publish", "a.png")))
    # three in parallel, then a report once all three completed
    sent = client.send_flow(chord([Job("parts", 1), Job("parts", 2),
                                   Job("parts", 3)], Job("reports", "sum")))
    sent.ids  # [21, 22, 23, 24]: the jobs' ids, in the order they were added

    # any graph: parents are added first, so it never has a cycle
    w = Workflow()
    a = w.add(Job("fetch", "a.png"))
    b = w.add(Job("fetch", "b.png"))
    s = w.add(Job("stitch", ["a.png", "b.png"], kind="stitch"), after=[a, b])
    w.add(Job("mail", "done", if_dependency_dies="run"), after=[s])
    ids = w.send(client).ids          # or: await w.send(aio_client)

A workflow is sent with one POST /v1/messages: all its jobs are stored, or
none. A job waits until every parent has completed (docs/semantics.md,
"Dependencies"); `if_dependency_dies` (a job's option) says what it does
when one dies instead. chain, group and chord take jobs or workflows: a
workflow in a chain starts when the step before it has completed, and the
step after it waits for all of its last jobs.
"""
from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Generator, Sequence, Union

from .client import PARENTS_HEADER, parents_header

__all__ = ["Job", "Step", "Workflow", "chain", "group", "chord", "find",
           "cancel", "retry", "WORKFLOW_HEADER"]

# The header that carries the id of the workflow a job was sent in.
WORKFLOW_HEADER = "sqlq-workflow"


class Job:
    """A job to send: its queue, payload, and the options of a send
    (kind, priority, headers, group, dedup, timeout, expire_after,
    max_attempts, backoff, backoff_max, if_dependency_dies,
    depends_on: ids of messages sent before)."""

    def __init__(self, queue: str, payload: Any = "", **options: Any) -> None:
        if not queue:
            raise ValueError("a job names its queue")
        if "depends_on_batch" in options:
            raise ValueError("a workflow sets depends_on_batch: name a "
                             "job's parents with Workflow.add(after=...)")
        self.queue = queue
        self.payload = payload
        self.options = options

    def __repr__(self) -> str:
        return f"Job({self.queue!r}, {self.payload!r})"


@dataclass(frozen=True)
class Step:
    """A job added to a workflow: its place there (index: its id is
    sent.ids[index])."""
    workflow: "Workflow"
    index: int
    job: Job


# A parent: a job of the same workflow, or a message sent before, by id
# (its results cannot be read: its queue is unknown) or by (queue, id).
Parent = Union[Step, int, tuple[str, int]]
Item = Union[Job, "Workflow"]


class Workflow:
    """A graph of jobs sent in one transaction. add() a job with its
    parents; a parent is added before its children, so there is no cycle."""

    def __init__(self) -> None:
        # Every job carries it (header sqlq-workflow): find() and cancel().
        self.id = uuid.uuid4().hex
        self.steps: list[Step] = []
        self._in: list[list[int]] = []  # parents in the workflow
        self._out: list[list[Union[int, tuple[str, int]]]] = []  # sent before

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, job: Job, *, after: Sequence[Parent] = ()) -> Step:
        """Adds job, to run once every parent in after has completed: a
        Step of this workflow, or a message sent before (an id, or (queue,
        id) so that the job can read its result)."""
        inner: list[int] = []
        outer: list[Union[int, tuple[str, int]]] = []
        for p in after:
            if isinstance(p, Step):
                if p.workflow is not self:
                    raise ValueError(f"{p.job!r} is a job of another "
                                     "workflow")
                if p.index not in inner:
                    inner.append(p.index)
            elif isinstance(p, int) and not isinstance(p, bool):
                outer.append(p)
            elif (isinstance(p, tuple) and len(p) == 2
                  and isinstance(p[0], str) and isinstance(p[1], int)):
                outer.append((p[0], p[1]))
            else:
                raise TypeError(f"not a parent (a Step, an id or (queue, "
                                f"id)): {p!r}")
        step = Step(self, len(self.steps), job)
        self.steps.append(step)
        self._in.append(inner)
        self._out.append(outer)
        return step

    def _roots(self) -> list[int]:
        return [i for i, ps in enumerate(self._in) if not ps]

    def _tails(self) -> list[int]:
        used = {p for ps in self._in for p in ps}
        return [i for i in range(len(self.steps)) if i not in used]

    def _put(self, item: Item, after: Sequence[Step]) -> list[Step]:
        """Adds item (a job, or a copy of a workflow's jobs) after the
        steps of after; returns its last steps (those nothing of it waits
        for)."""
        if isinstance(item, Job):
            return [self.add(item, after=after)]
        if not isinstance(item, Workflow):
            raise TypeError(f"not a Job or a Workflow: {item!r}")
        if item is self:
            raise ValueError("a workflow cannot contain itself")
        mine: list[Step] = []
        for i, s in enumerate(item.steps):
            parents: list[Parent] = [mine[p] for p in item._in[i]]
            parents += item._out[i]
            if not item._in[i]:
                parents += list(after)
            mine.append(self.add(s.job, after=parents))
        return [mine[i] for i in item._tails()]

    def messages(self) -> list[dict[str, Any]]:
        """The messages of POST /v1/messages (client.send_all)."""
        out = []
        for s, inner, outer in zip(self.steps, self._in, self._out):
            m: dict[str, Any] = dict(s.job.options)
            m["queue"] = s.job.queue
            m["payload"] = s.job.payload
            ids = list(m.get("depends_on") or [])
            ids += [p if isinstance(p, int) else p[1] for p in outer]
            if ids:
                m["depends_on"] = ids
            if inner:
                m["depends_on_batch"] = list(inner)
            h: dict[str, str] = dict(m.get("headers") or {})
            h[WORKFLOW_HEADER] = self.id
            named = [p for p in outer if isinstance(p, tuple)]
            if named:
                h[PARENTS_HEADER] = parents_header(named)
            m["headers"] = h
            out.append(m)
        return out

    def queues(self) -> list[str]:
        """The queues of its jobs, each once."""
        return list(dict.fromkeys(s.job.queue for s in self.steps))

    def find(self, client: Any) -> Any:
        """find(client, self.id, self.queues())."""
        return find(client, self.id, self.queues())

    def cancel(self, client: Any) -> Any:
        """cancel(client, self.id, self.queues())."""
        return cancel(client, self.id, self.queues())

    def retry(self, client: Any) -> Any:
        """retry(client, self.id, self.queues())."""
        return retry(client, self.id, self.queues())

    def send(self, client: Any) -> Any:
        """Sends every job in one transaction (client.send_all): all are
        stored, or none. Returns the SendResult (ids in the order the jobs
        were added: sent.ids[step.index]); with sqlq.aio's client, a
        coroutine of it."""
        if not self.steps:
            raise ValueError("an empty workflow sends nothing")
        return client.send_all(self.messages())


def chain(*items: Item) -> Workflow:
    """Each item runs once the one before it has completed."""
    w = Workflow()
    last: list[Step] = []
    for it in items:
        last = w._put(it, last)
    return w


def group(*items: Item) -> Workflow:
    """The items side by side, none waiting for another."""
    w = Workflow()
    for it in items:
        w._put(it, [])
    return w


def chord(members: Union[Workflow, Sequence[Item]], callback: Item
          ) -> Workflow:
    """callback runs once every member has completed (a fan-in)."""
    if not isinstance(members, Workflow):
        members = group(*members)
    return chain(members, callback)


Plan = Generator[tuple[Callable[..., Any], tuple], Any, Any]


def _find(client: Any, workflow_id: str, queues: Sequence[str]) -> Plan:
    out: list[Any] = []
    for q in queues:
        cursor = None
        while True:
            page = yield functools.partial(
                client.queue(q).messages, header=(WORKFLOW_HEADER,
                                                  workflow_id),
                cursor=cursor), ()
            out += [dict(m, queue=q) for m in page["messages"]]
            cursor = page.get("next_cursor")
            if not cursor:
                break
    return out


def find(client: Any, workflow_id: str, queues: Sequence[str]) -> Any:
    """The jobs of workflow workflow_id still in queues (waiting, ready,
    delayed or leased; not those completed or dead), as the listing's
    dicts, each with its "queue". (With sqlq.aio's client: a
    coroutine.)"""
    return client._drive(_find(client, workflow_id, queues))


def _cancel(client: Any, workflow_id: str, queues: Sequence[str]) -> Plan:
    found = yield from _find(client, workflow_id, queues)
    n = 0
    # The waiting ones first, those none of the others waits for before
    # the ones they wait for: no cancel releases one of them (or runs it,
    # with if_dependency_dies="run").
    waiting = {m["id"]: m for m in found if m.get("state") == "waiting"}
    while waiting:
        held = {p for m in waiting.values() for p in m.get("waits_for", [])}
        leaves = [m for i, m in waiting.items() if i not in held]
        by_queue: dict[str, list[int]] = {}
        for m in leaves or list(waiting.values()):
            by_queue.setdefault(m["queue"], []).append(m["id"])
            del waiting[m["id"]]
        for q, ids in by_queue.items():
            n += yield functools.partial(client.queue(q).bulk, "cancel",
                                         ids=ids), ()
    header = {"name": WORKFLOW_HEADER, "value": workflow_id}
    for q in queues:
        n += yield functools.partial(client.queue(q).bulk, "cancel",
                                     filter={"header": header}), ()
    return n


def cancel(client: Any, workflow_id: str, queues: Sequence[str]) -> Any:
    """Cancels every job of workflow workflow_id still in queues (each a
    dead letter with the error "cancelled"); returns how many. Those
    completed stay so. (With sqlq.aio's client: a coroutine.)"""
    return client._drive(_cancel(client, workflow_id, queues))


# Redrive takes at most this many ids a call.
_REDRIVE_MAX = 10_000


def _retry(client: Any, workflow_id: str, queues: Sequence[str]) -> Plan:
    dead: dict[int, Any] = {}
    for q in queues:
        cursor = None
        while True:
            page = yield functools.partial(
                client.queue(q).messages, state="dead",
                header=(WORKFLOW_HEADER, workflow_id), cursor=cursor), ()
            for m in page["messages"]:
                dead[m["id"]] = dict(m, queue=q)
            cursor = page.get("next_cursor")
            if not cursor:
                break
    # A redrive links each job again to its parents still in a queue, and
    # cancels it again when one is still dead: a queue's jobs go back once
    # every dead parent they have in another queue has gone back (those in
    # their own queue go back in the same redrive, parents first).
    n = 0
    while dead:
        progress = False
        for q in queues:
            take = {i for i, m in dead.items() if m["queue"] == q}
            held = True
            while held:
                held = False
                for i in list(take):
                    if any(p["id"] in dead and p["id"] not in take
                           for p in dead[i].get("parents", [])):
                        take.discard(i)
                        held = True
            ids = sorted(take)
            for at in range(0, len(ids), _REDRIVE_MAX):
                n += yield functools.partial(
                    client.queue(q).redrive,
                    ids[at:at + _REDRIVE_MAX]), ()
            for i in ids:
                del dead[i]
            progress = progress or bool(ids)
        if not progress:  # cannot happen: parents are sent first
            break
    return n


def retry(client: Any, workflow_id: str, queues: Sequence[str]) -> Any:
    """Runs the failed part of workflow workflow_id again: redrives its
    dead letters in queues (the job that died and those cancelled because
    of it, or by cancel()), parents first, and returns how many. Each
    waits again for its parents not yet completed, so the graph resumes
    where it failed; those completed are not run again. (With sqlq.aio's
    client: a coroutine.)"""
    return client._drive(_retry(client, workflow_id, queues))

"""The supervisor of a recovering run: from outside the head, it starts the driver, follows
its output, and when the head is lost, replaces it (recovery.py) and starts the driver
again, which resumes from the run's storage. It ends the run when the driver succeeds, is
cancelled, or fails by itself more often than allowed.

It runs where `launcher submit --recover` runs (attached), or as a process of its own there
(`--detach`), or wherever `launcher jobs supervise` is run later: the run's state is kept
(store.py, and a copy on the cluster's nodes) and held by one supervisor at a time (a lease
renewed every few seconds), so any machine with the cluster file can take it up.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from launcher.cluster.head import HeadSession, connect
from launcher.config.loader import Overrides
from launcher.config.model import ClusterConfig
from launcher.errors import LauncherError, NoClusterError
from launcher.events import EventSink
from launcher.providers.base import Node, NodeKind, NodeProvider, NodeState
from launcher.providers.factory import make_provider
from launcher.runs import decide, driver, recovery, replica, store
from launcher.runs.follow import Follower
from launcher.runs.model import LEASE_S, Attempt, AttemptEnd, Lease, Recovery, Run, RunState

Say = Callable[[str], None]
START_TRIES = 5  # a head that answers but will not start the driver, this often in a row


@dataclass(frozen=True)
class SuperviseOptions:
    list_every_s: float = 2.0  # how often the nodes are listed (and the lease renewed)
    probe_every_s: float = 10.0  # how often a head whose driver is followed is asked
    head_silence_s: float = 60.0  # a listed head that answers nothing this long is lost
    workers_timeout_s: float = 600.0  # how long kept workers may take to rejoin
    recovery_tries: int = 3  # a head that cannot be brought up is tried this often
    killed_grace_s: float = 10.0  # a killed driver's head is watched this long for its loss
    # `submit --env` and metadata.launcher.env: for each driver (on its standard input) and
    # kept on a replacement head for its Ray. Held here only, never in the run's record.
    secret_env: Mapping[str, str] = field(default_factory=dict)


class Supervisor:
    def __init__(
        self,
        run: Run,
        config: ClusterConfig,
        overrides: Overrides,
        say: Say,
        echo: Say,
        events: EventSink,
        options: SuperviseOptions | None = None,
    ) -> None:
        self.run = run
        self.config = config
        self.overrides = overrides
        self.say = say
        self.echo = echo
        self.events = events
        self.options = options or SuperviseOptions()
        self.provider: NodeProvider = make_provider(config)
        self._follower: Follower | None = None
        # The run is changed by the loop and its lease renewed by a thread of its own (a
        # recovery step may take minutes): one at a time.
        self._lock = threading.RLock()
        self._stopped = threading.Event()
        self._workers_at_start: set[str] = set()
        self._nodes_lost = False
        self._silent_since: float | None = None
        self._last_probe = 0.0
        self._list_failing = False
        self._start_failures = 0
        self._rejoin_deadline: float | None = None  # kept workers rejoining until then
        self._restarts = recovery.Restarts()  # kept workers whose Ray is being started

    # -- the loop -------------------------------------------------------------------------
    def supervise(self) -> Run:
        """Until the run ends. Returns it ended."""
        self._update(supervisor=Lease.mine(time.time()))
        beat = threading.Thread(target=self._beat, name=f"lease-{self.run.id}", daemon=True)
        beat.start()
        try:
            while not self.run.state.ended:
                if self.run.state is RunState.RECOVERING:
                    self._recover()
                elif self.run.attempt is None or self.run.attempt.ended_at is not None:
                    self._start_attempt()
                else:
                    self._watch()
        finally:
            self._stopped.set()
            beat.join()
            self._update(supervisor=None)
        return self.run

    def _beat(self) -> None:
        """Renew the lease every few seconds until the loop ends."""
        while not self._stopped.wait(LEASE_S / 6):
            with self._lock:  # the loop's own changes are saved by the loop
                store.save(dataclasses.replace(self.run, supervisor=Lease.mine(time.time())))

    def _update(self, push: bool = False, **changes: object) -> None:
        now = time.time()
        changes.setdefault("supervisor", Lease.mine(now))
        with self._lock:
            self.run = dataclasses.replace(self.run, updated_at=now, **changes)  # type: ignore[arg-type]
            store.save(self.run)
        if push:
            replica.push(self.provider, self.config, self.run)

    # -- attempts -------------------------------------------------------------------------
    def _cancelled_elsewhere(self) -> bool:
        """Whether `launcher jobs cancel` on this machine asked for the run to end."""
        if not self.run.cancel_requested and store.cancel_requested(
            self.run.cluster_name, self.run.id
        ):
            self.run = dataclasses.replace(self.run, cancel_requested=True)
        return self.run.cancel_requested

    def _start_attempt(self) -> None:
        if self._cancelled_elsewhere():
            self._finish(RunState.CANCELLED, "cancelled")
            return
        try:
            session = connect(self.config, self.provider)
        except NoClusterError:
            self._begin_recovery(None, "there is no running head")
            return
        number = len(self.run.attempts) + 1
        why = "" if number == 1 else f" (after {self.run.attempts[-1].end or 'a stop'})"
        try:
            driver.start(
                session,
                self.run.id,
                number,
                str(store.script_path(self.run)),
                self.run.args,
                self.run.storage_path,
                self.options.secret_env,
            )
        except LauncherError as exc:
            self._start_failed(session.head, exc)
            return
        self._start_failures = 0
        now = time.time()
        store.append_log(
            self.run.cluster_name, self.run.id, store.attempt_banner(number, session.head.id, why)
        )
        self.say(f"run {self.run.id}: attempt {number} started on head {session.head.id}{why}")
        self.run = self.run.with_attempt(Attempt(number, session.head.id, now))
        open_recovery = self.run.open_recovery
        if open_recovery is not None:
            phases = {**open_recovery.phases, "driver_started": now - open_recovery.seen_at}
            self.run = self.run.with_recovery(
                dataclasses.replace(open_recovery, phases=phases, ended_at=now)
            )
        self._workers_at_start = {
            n.id
            for n in self._list() or []
            if n.kind is NodeKind.WORKER and n.state is NodeState.RUNNING
        }
        self._nodes_lost = False
        self._update(push=True, state=RunState.RUNNING)
        self._start_follower(session)

    def _start_failed(self, head: Node, exc: LauncherError) -> None:
        """The driver could not be started on `head`: its loss is looked for, and a head
        that keeps refusing ends the run."""
        self._start_failures += 1
        self.say(f"run {self.run.id}: {exc}")
        nodes = self._list() or []
        listed = next((n for n in nodes if n.id == head.id), None)
        self._last_probe = 0.0
        why = decide.head_lost(listed, self._probe(listed), self.options.head_silence_s)
        if why is not None:
            self._begin_recovery(head.id, why, listed)
        elif self._start_failures >= START_TRIES:
            self._finish(
                RunState.FAILED, f"the driver could not be started {START_TRIES} times: {exc}"
            )
        else:
            time.sleep(5.0)

    def _start_follower(self, session: HeadSession) -> None:
        attempt = self.run.attempt
        assert attempt is not None
        env = driver.driver_env(session, self.run.id, attempt.number, self.run.storage_path)
        follower = Follower(self.run.cluster_name, self.run.id, self.echo)

        def follow() -> None:
            try:
                driver.follow(
                    session.runner,
                    env,
                    self.run.id,
                    attempt.number,
                    attempt.log_bytes,
                    follower.line,
                )
            except LauncherError:
                pass
            finally:
                follower.done.set()

        self._follower = follower
        threading.Thread(target=follow, name=f"follow-{self.run.id}", daemon=True).start()

    def _drop_follower(self) -> None:
        if self._follower is not None:
            self._follower.stale = True
        self._follower = None

    def _watch(self) -> None:
        """One listing's worth of watching the current attempt."""
        attempt = self.run.attempt
        assert attempt is not None
        if self._follower is None:
            try:
                session = connect(self.config, self.provider, any_status=True)
            except NoClusterError:
                session = None
            if session is None or session.head.id != attempt.head_id:
                self._end_attempt(AttemptEnd.HEAD_LOST, None)
                self._begin_recovery(attempt.head_id, "it is no longer listed")
                return
            self._start_follower(session)
        follower = self._follower
        assert follower is not None
        follower.done.wait(self.options.list_every_s)
        if self._cancelled_elsewhere():
            self.cancel()
            return
        self._save_progress()
        nodes = self._list()
        if nodes is None:  # counted as the head not answering
            self._silent_since = self._silent_since or time.monotonic()
            silent = time.monotonic() - self._silent_since
            if silent < self.options.head_silence_s:
                return
            self._end_attempt(AttemptEnd.HEAD_LOST, None)
            self._begin_recovery(attempt.head_id, f"it has not answered for {silent:.0f} s")
            return
        head = next((n for n in nodes if n.id == attempt.head_id), None)
        self._note_rejoined(nodes)
        self._note_losses(nodes)
        silent = self._probe(head) if not follower.done.is_set() else 0.0
        why = decide.head_lost(head, silent, self.options.head_silence_s)
        if why is None and follower.done.is_set():
            why = self._driver_gone(attempt)
            if why is None:
                return
        if why is not None:
            self._end_attempt(AttemptEnd.HEAD_LOST, None)
            self._begin_recovery(attempt.head_id, why, head)

    def _save_progress(self) -> None:
        attempt = self.run.attempt
        assert attempt is not None
        if self._follower is not None:
            followed = self._follower.take_bytes()
            self.run = self.run.with_attempt(
                dataclasses.replace(attempt, log_bytes=attempt.log_bytes + followed)
            )
        self._update()  # saves the progress and renews the lease

    def _note_losses(self, nodes: list[Node]) -> None:
        listed = {n.id: n for n in nodes if n.kind is NodeKind.WORKER}
        for worker in self._workers_at_start:
            node = listed.get(worker)
            if node is None or node.state is not NodeState.RUNNING:
                self._nodes_lost = True

    def _probe(self, head: Node | None) -> float:
        """How long the head has not answered (asked every probe_every_s)."""
        now = time.monotonic()
        if head is None or now - self._last_probe < self.options.probe_every_s:
            return 0.0 if self._silent_since is None else now - self._silent_since
        self._last_probe = now
        try:
            session = connect(self.config, self.provider, head, any_status=True)
            answered = session.runner.run("true", session.env, timeout=20).ok
        except LauncherError:
            answered = False
        if answered:
            self._silent_since = None
        elif self._silent_since is None:
            self._silent_since = now
        return 0.0 if self._silent_since is None else now - self._silent_since

    def _driver_gone(self, attempt: Attempt) -> str | None:
        """The follower stopped: the driver ended (the attempt is ended here, and None
        returned), the connection broke (followed again; None), or the head no longer
        answers (why it is lost)."""
        self._save_progress()
        self._drop_follower()
        try:
            session = connect(self.config, self.provider, any_status=True)
            seen = driver.outcome(session.runner, session.env, self.run.id, attempt.number)
        except LauncherError as exc:
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            if now - self._silent_since >= self.options.head_silence_s:
                return f"it has not answered for {now - self._silent_since:.0f} s ({exc})"
            time.sleep(min(2.0, self.options.list_every_s))
            return None
        self._silent_since = None
        if seen.running:
            return None  # the connection broke: follow again from where it was
        if seen.exit_code is None and not seen.cancelled:
            # Killed, not exited: as often as not by its head going (a machine that shuts
            # down stops its processes first, and is listed gone only after). Watched a
            # while before the driver is started there again.
            why = self._head_going(attempt)
            if why is not None or self._silent_since is not None:
                return why  # lost, or silent: asked again next round until it is lost
        tail = self._log_tail()
        end = decide.attempt_end(seen.exit_code, seen.cancelled, self._nodes_lost, tail)
        if end is AttemptEnd.NODE_LOST and not self._ray_answers(session):
            return "its Ray does not answer (`ray status` on it fails)"
        self._end_attempt(end, seen.exit_code)
        nxt = decide.after_attempt(self.run, end, seen.exit_code)
        self.say(f"run {self.run.id}: {nxt.why}")
        if nxt.again:
            restarts = self.run.restarts_on_errors + (1 if nxt.counts_as_error else 0)
            self._update(push=True, restarts_on_errors=restarts, message=nxt.why)
        else:
            self._finish(nxt.state, nxt.why)
        return None

    def _ray_answers(self, session: HeadSession) -> bool:
        """Whether Ray's GCS on the head answers (`ray status` there), checked before a
        driver that failed as if a node were lost is started on that head again."""
        try:
            return session.runner.run("ray status >/dev/null 2>&1", session.env, timeout=60).ok
        except LauncherError:
            return False

    def _head_going(self, attempt: Attempt) -> str | None:
        """Why the attempt's head is lost, if it is seen so within killed_grace_s."""
        deadline = time.monotonic() + self.options.killed_grace_s
        while True:
            head = next((n for n in self._list() or [] if n.id == attempt.head_id), None)
            self._last_probe = 0.0  # ask it now
            why = decide.head_lost(head, self._probe(head), self.options.head_silence_s)
            if why is not None or self._silent_since is not None:
                return why
            if time.monotonic() >= deadline:
                return None
            time.sleep(1.0)

    def _log_tail(self) -> str:
        path = store.log_path(self.run.cluster_name, self.run.id)
        try:
            with path.open("rb") as log:
                log.seek(max(0, path.stat().st_size - 16384))
                return log.read().decode("utf-8", errors="replace")
        except OSError:
            return ""

    def _end_attempt(self, end: AttemptEnd, exit_code: int | None) -> None:
        attempt = self.run.attempt
        assert attempt is not None
        if attempt.ended_at is not None:
            return
        self.run = self.run.with_attempt(
            dataclasses.replace(
                attempt,
                ended_at=time.time(),
                exit_code=exit_code,
                end=end,
                saw_node_lost=self._nodes_lost,
            )
        )
        self._update()

    def _finish(self, state: RunState, why: str) -> None:
        self._update(push=True, state=state, message=why, ended_at=time.time())

    # -- recovery -------------------------------------------------------------------------
    def _begin_recovery(self, lost_head: str | None, why: str, head: Node | None = None) -> None:
        self._drop_follower()
        if self._cancelled_elsewhere():
            self._finish(RunState.CANCELLED, "cancelled")
            return
        lost = lost_head or "(none)"
        self.say(f"run {self.run.id}: head {lost} lost: {why}; recovering")
        preempted = head is not None and head.state is NodeState.PREEMPTED
        recovery_ = Recovery(lost, ("preempted: " if preempted else "") + why, time.time())
        self.run = self.run.with_recovery(recovery_)
        self._update(push=True, state=RunState.RECOVERING, message=f"head lost: {why}")

    def _recover(self) -> None:
        if self._cancelled_elsewhere():
            self._finish(RunState.CANCELLED, "cancelled while recovering")
            return
        open_recovery = self.run.open_recovery
        if open_recovery is None:  # the driver was never started on a new head
            self._update(state=RunState.RUNNING)
            return
        head_type = self._replacement_type(open_recovery)
        replaceable = self.provider.traits.replaces_lost_head
        tries = self.options.recovery_tries if replaceable else 1
        problem = ""
        for attempt in range(1, tries + 1):
            try:
                replaced = recovery.replace_head(
                    self.config.source or self.run.config_path,
                    self.overrides,
                    self.config,
                    self.provider,
                    open_recovery.lost_head,
                    head_type,
                    self.events,
                    self._phase,
                    ready_timeout_s=300.0 if replaceable else 60.0,
                    restarts=self._restarts,
                    secret_env=self.options.secret_env or None,
                )
            except LauncherError as exc:
                problem = str(exc)
                self.say(
                    f"run {self.run.id}: bringing up a new head failed (try {attempt} of "
                    f"{tries}): {problem}"
                )
                if attempt < tries:
                    time.sleep(min(30.0, 5.0 * attempt))
                continue
            self._recovered(replaced)
            return
        self._finish(RunState.FAILED, self._unrecoverable(open_recovery, problem))

    def _unrecoverable(self, open_recovery: Recovery, problem: str) -> str:
        storage = self.run.storage_path
        kept = f"; the run's storage is kept at {storage}" if storage else ""
        if not self.provider.traits.replaces_lost_head:
            return (
                f"the head {open_recovery.lost_head} is lost and cannot be replaced here (an "
                f"on-prem head is the one machine provider.head_ip names), nor did Ray start "
                f"there again: {problem}{kept}"
            )
        return f"the head was lost and could not be replaced: {problem}{kept}"

    def _replacement_type(self, open_recovery: Recovery) -> str:
        """The head type to bring up: its fallback after a preemption (see decide)."""
        nodes = self._list() or []
        lost = next((n for n in nodes if n.id == open_recovery.lost_head), None)
        preempted = open_recovery.why.startswith("preempted") or (
            lost is not None and lost.state is NodeState.PREEMPTED
        )
        return decide.new_head_type(
            self.config.head_node_type,
            tuple(self.config.fallbacks.get(self.config.head_node_type, ())),
            preempted,
            self.run.same_head_type,
        )

    def _phase(self, name: str) -> None:
        """Note that recovery step `name` is done (seconds after the loss was seen)."""
        current = self.run.open_recovery
        if current is None or name in current.phases:
            return
        at = time.time() - current.seen_at
        self.run = self.run.with_recovery(
            dataclasses.replace(current, phases={**current.phases, name: at})
        )
        self._update()  # saves the progress and renews the lease

    def _recovered(self, replaced: recovery.Replaced) -> None:
        current = self.run.open_recovery
        assert current is not None
        self.run = self.run.with_recovery(
            dataclasses.replace(
                current,
                new_head=replaced.head.id,
                new_head_type=replaced.head.node_type,
                adopted=replaced.adopted,
            )
        )
        kept = len(replaced.adopted)
        self.say(
            f"run {self.run.id}: new head {replaced.head.id} ({replaced.head.node_type}) "
            f"up; {kept} worker(s) kept, rejoining it"
            + (f": {', '.join(replaced.adopted)}" if kept else "")
        )
        self._rejoin_deadline = time.monotonic() + self.options.workers_timeout_s
        self._update(push=True, state=RunState.RUNNING)

    def _note_rejoined(self, nodes: list[Node]) -> None:
        """Once the kept workers of the last recovery have rejoined (the driver started
        meanwhile), note when and which; those that did not in workers_timeout_s are named."""
        last = self.run.recoveries[-1] if self.run.recoveries else None
        if last is None or last.new_head is None or "workers_rejoined" in last.phases:
            return
        if self._rejoin_deadline is None:  # a supervisor taking the run up
            self._rejoin_deadline = time.monotonic() + self.options.workers_timeout_s
        seen = recovery.rejoining(nodes, last.adopted)
        late = time.monotonic() > self._rejoin_deadline
        if seen.waiting and not late:
            return
        if seen.waiting:
            self.say(
                f"run {self.run.id}: {len(seen.waiting)} kept worker(s) have not rejoined "
                f"after {self.options.workers_timeout_s:g} s ({', '.join(seen.waiting)}); "
                "going on without them"
            )
        elif len(seen.rejoined) < len(last.adopted):
            lost = sorted(set(last.adopted) - set(seen.rejoined))
            self.say(f"run {self.run.id}: kept worker(s) {', '.join(lost)} did not rejoin")
        phases = {**last.phases, "workers_rejoined": time.time() - last.seen_at}
        done = dataclasses.replace(last, phases=phases, adopted=seen.rejoined)
        self._rejoin_deadline = None
        self._update(push=True, recoveries=(*self.run.recoveries[:-1], done))

    def _list(self) -> list[Node] | None:
        """The provider's nodes, or None when it could not list them (on-prem keeps its
        records on the head: a head that is gone takes the listing with it)."""
        try:
            nodes = self.provider.nodes()
        except LauncherError as exc:
            if not self._list_failing:  # said once per spell
                self.say(f"run {self.run.id}: could not list the cluster's nodes: {exc}")
            self._list_failing = True
            return None
        self._list_failing = False
        return nodes

    # -- cancel ---------------------------------------------------------------------------
    def cancel(self) -> bool:
        """Stop the driver (Ctrl-C of an attached supervisor); True once seen stopped."""
        self._update(cancel_requested=True)
        attempt = self.run.attempt
        stopped = True
        if attempt is not None and attempt.ended_at is None:
            try:
                session = connect(self.config, self.provider, any_status=True)
                stopped = driver.cancel(session.runner, session.env, self.run.id, attempt.number)
            except LauncherError:
                stopped = False
            if stopped:
                self._end_attempt(AttemptEnd.CANCELLED, None)
        self._finish(RunState.CANCELLED, "cancelled" if stopped else "cancelled (driver unreached)")
        return stopped

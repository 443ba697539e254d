"""Issue 6's reliability requirement on AWS: after `down`, no instance of the cluster is left,
in every one of the randomized runs that interrupt `up` at a random point (SIGINT or
SIGKILL after a random delay or at its k-th AWS call, an AWS error at its k-th call, or
throttling until the user gives up); a second `up` never creates a second head. By default
13 runs: one interrupted at each call that creates something, then one of each of those four
kinds of interruption (its point, signal and the rest at random); every session brings new
random choices (the seed), so CI's sessions together cover many more. Some runs
let AWS carry out the interrupted call after its caller is gone, or list new instances only
seconds after their launch (EC2's eventual consistency).

The launcher CLI runs as a subprocess against moto's EC2/IAM server (fakes/aws/server.py), where
each instance in a loopback VPC is a real SSH host, and the autoscaler on the head launches a
worker for min_workers (so `down` races with it). Ray itself is not started (its start
commands are `true`): what is tested is the launcher's own bookkeeping, and it keeps the runs
cheap. Some runs cache stopped nodes, with a worker whose first start fails so that the
autoscaler stops it and starts it again.

Each run has its own cluster name, so runs do not see each other. Runs are chosen by a
seeded RNG: LAUNCHER_RELIABILITY_SEED=N reproduces a session (as far as timing allows),
LAUNCHER_RELIABILITY_RUNS=N sets how many runs there are. Every failure names the seed and
the run's choices.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fakes.aws.server import LOOPBACK_NET, Call, InstanceHosts, InstanceView, MotoServer
from fakes.hosts.ssh import isolation_unavailable
from launcher.cluster.lock import ClusterLock
from launcher.errors import ClusterBusyError
from tests.cluster_helpers import wait_for

pytestmark = pytest.mark.skipif(
    isolation_unavailable() is not None, reason=str(isolation_unavailable())
)

SEED = int(
    os.environ.get("LAUNCHER_RELIABILITY_SEED") or random.SystemRandom().randrange(1_000_000)
)
RUNS = int(os.environ.get("LAUNCHER_RELIABILITY_RUNS") or 13)
LIVE = ("pending", "running", "stopping", "stopped")
COMMAND_TIMEOUT_S = 180.0  # a command taking longer than this has hung

CONFIG = """
cluster_name: NAME
max_workers: 2
idle_timeout_minutes: 5
provider:
  type: aws
  region: us-west-2
  use_internal_ips: true
  cache_stopped_nodes: CACHE
auth:
  ssh_user: root
available_node_types:
  head:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A]}
    resources: {CPU: 1}
    max_workers: 0
  worker:
    node_config: {InstanceType: m5.large, ImageId: AMI, SubnetIds: [SUBNET_A, SUBNET_B]}
    resources: {CPU: 1}
    min_workers: 1
    max_workers: 2
head_node_type: head
setup_commands:
  - echo "setup on $LAUNCHER_NODE_IP" >> ~/setup.log
head_start_ray_commands: ["true"]
worker_start_ray_commands: [WORKER_START]
"""
# A worker's first start fails (its disk remembers it): the autoscaler then removes it, which
# with cache_stopped_nodes stops it, and starts it again for min_workers.
FAILS_ONCE = '"test -e ~/started-once || { touch ~/started-once; echo first start fails; exit 1; }"'

# What each AWS service answers a caller that may not make a call, or that calls too often.
DENIED = {"ec2": ("UnauthorizedOperation", 403), "iam": ("AccessDenied", 403)}
DENIED["sts"] = DENIED["iam"]
THROTTLED = {"ec2": ("RequestLimitExceeded", 503), "iam": ("Throttling", 400)}
THROTTLED["sts"] = THROTTLED["iam"]


# -- what a run does ------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One randomized run: how `up` is interrupted, and what happens around it.

    mode: "signal-after" (`signal` after `delay_s`); "signal-at-call" (`signal` when `up`
    makes a call: the one at `at` (0..1) in the calls a whole `up` made, as "the n-th call
    of its action", or `target`; AWS acts on it `slow_s` after the signal, so its answer is
    lost); "error-at-call" (that call is refused as unauthorized); "throttled" (that call
    and every later one are throttled, then `signal` after `delay_s`)."""

    index: int
    mode: str
    signal: str
    delay_s: float
    at: float
    cache_stopped: bool
    second_up: bool
    target: tuple[str, int] | None = None  # the call, instead of the one `at` picks
    slow_s: float = 0.0  # signal-at-call: AWS acts on that call this long after the signal
    lag_s: float = 0.0  # new instances are missing from DescribeInstances this long

    @property
    def name(self) -> str:
        return f"rel{self.index}"

    def describe(self, baseline: list[str]) -> str:
        action, nth = self.call(baseline)
        call = f"{action} call #{nth + 1}"
        what = {
            "signal-after": f"{self.signal} after {self.delay_s:.2f} s",
            "signal-at-call": f"{self.signal} at its {call}"
            + (f", which AWS carries out {self.slow_s:.1f} s later" if self.slow_s else ""),
            "error-at-call": f"AWS refuses its {call}",
            "throttled": f"throttled from its {call} on, {self.signal} after {self.delay_s:.2f} s",
        }[self.mode]
        extra = [
            f"instances listed {self.lag_s:.1f} s after launch" if self.lag_s else "",
            "cache_stopped_nodes" if self.cache_stopped else "",
            "second up" if self.second_up else "",
        ]
        more = ", ".join(e for e in extra if e)
        return (
            f"seed {SEED} run {self.index} ({self.name}): {what}"
            + (f"; {more}" if more else "")
            + f" [reproduce: LAUNCHER_RELIABILITY_SEED={SEED} LAUNCHER_RELIABILITY_RUNS={RUNS}]"
        )

    def call(self, baseline: list[str]) -> tuple[str, int]:
        """The call of `up` the interruption is tied to: (action, n) for the n-th (from 0)
        call of that action, picked from `baseline`, the actions of a whole `up` in order
        (so that the number of polls, which depends on timing, does not matter)."""
        if self.target is not None:
            return self.target
        index = int(self.at * len(baseline))
        return baseline[index], baseline[:index].count(baseline[index])


# The calls by which `up` creates something: each of the first runs is interrupted at one
# of them (the answer is lost), and runs `up` again.
CREATING = (
    "ImportKeyPair",
    "CreateSecurityGroup",
    "AuthorizeSecurityGroupIngress",
    "CreateRole",
    "PutRolePolicy",
    "CreateInstanceProfile",
    "AddRoleToInstanceProfile",
    "RunInstances",
    "CreateTags",
)


MODES = ("signal-after", "signal-at-call", "error-at-call", "throttled")


def plan_run(index: int) -> Run:
    rng = random.Random(f"{SEED}-{index}")
    if index < len(CREATING):
        return Run(
            index=index,
            mode="signal-at-call",
            signal=rng.choice(("SIGINT", "SIGKILL")),
            delay_s=0.0,
            at=0.0,
            cache_stopped=rng.random() < 0.35,
            second_up=True,
            target=(CREATING[index], 0),
            slow_s=rng.choice((0.0, rng.uniform(1.0, 4.0))),
        )
    mode = rng.choices(MODES, (3, 3, 3, 1))[0]
    if index < len(CREATING) + len(MODES):  # each mode at least once in every session
        mode = MODES[index - len(CREATING)]
    return Run(
        index=index,
        mode=mode,
        signal=rng.choice(("SIGINT", "SIGKILL")),
        delay_s=rng.uniform(0.5, 3.0) if mode == "throttled" else rng.uniform(0.3, 6.0),
        at=rng.random(),
        cache_stopped=rng.random() < 0.35,
        second_up=rng.random() < 0.4,
        slow_s=rng.uniform(1.0, 4.0) if rng.random() < 0.3 else 0.0,
        lag_s=rng.uniform(1.0, 4.0) if rng.random() < 0.25 else 0.0,
    )


# -- the fake cloud and the commands --------------------------------------------------------


@dataclass
class Finished:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return (
            f"$ launcher {' '.join(self.args)} -> {self.returncode} ({self.seconds:.1f} s)\n"
            f"{self.stdout}{self.stderr}"
        )


class Launcher:
    """`launcher ARGS` as a subprocess in its own session, its output in files (a killed
    process leaves no pipe behind)."""

    def __init__(self, env: dict[str, str], tmp: Path, args: tuple[str, ...]) -> None:
        self.args = args
        self.started = time.monotonic()
        self._out = (tmp / "out").open("w+")
        self._err = (tmp / "err").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "launcher", *args],
            env=env,
            stdout=self._out,
            stderr=self._err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def send(self, name: str) -> None:
        """SIGINT as a terminal's Ctrl-C sends it (to the whole process group); SIGKILL to
        the launcher alone, as the OOM killer would."""
        with contextlib.suppress(ProcessLookupError):
            if name == "SIGINT":
                os.killpg(self.process.pid, signal.SIGINT)
            else:
                os.kill(self.process.pid, signal.SIGKILL)

    def wait(self, timeout: float = COMMAND_TIMEOUT_S) -> Finished:
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send("SIGKILL")
            self.process.wait(30)
            raise AssertionError(
                f"launcher {' '.join(self.args)} hung for {timeout:g} s\n{self.peek()}"
            ) from None
        finally:
            # Whatever the launcher left running in its session (it starts none itself).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            stdout, stderr = self._read()
            self._out.close()
            self._err.close()
        return Finished(self.args, code, stdout, stderr, time.monotonic() - self.started)

    def peek(self) -> str:
        """What it has written so far."""
        return "".join(self._read())

    def _read(self) -> tuple[str, str]:
        texts = []
        for handle in (self._out, self._err):
            handle.flush()
            handle.seek(0)
            texts.append(handle.read())
        return texts[0], texts[1]


@dataclass
class Cloud:
    server: MotoServer
    hosts: InstanceHosts
    tmp: Path
    env: dict[str, str]
    ami: str
    subnets: tuple[str, str]
    baseline: list[str] = field(default_factory=list)

    def config(self, name: str, cache_stopped: bool) -> Path:
        text = (
            CONFIG.replace("NAME", name)
            .replace("CACHE", "true" if cache_stopped else "false")
            .replace("WORKER_START", FAILS_ONCE if cache_stopped else '"true"')
            .replace("AMI", self.ami)
            .replace("SUBNET_A", self.subnets[0])
            .replace("SUBNET_B", self.subnets[1])
        )
        path = self.tmp / f"{name}.yaml"
        path.write_text(text)
        return path

    def start(self, origin: str, *args: str) -> Launcher:
        """`launcher ARGS`, its AWS calls marked with `origin` (Call.origin)."""
        env = {**self.env, "AWS_SDK_UA_APP_ID": origin}
        directory = self.tmp / "runs" / f"{origin}-{time.monotonic_ns()}"
        directory.mkdir(parents=True)
        return Launcher(env, directory, args)

    def run(self, origin: str, *args: str) -> Finished:
        return self.start(origin, *args).wait()

    def instances(self, cluster: str, states: tuple[str, ...] = LIVE) -> list[InstanceView]:
        return [
            i
            for i in self.server.instances()
            if i.tags.get("launcher-cluster") == cluster and (not states or i.state in states)
        ]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    tmp = tmp_path_factory.mktemp("reliability")
    with MotoServer() as server, InstanceHosts(server) as hosts:
        ec2 = server.client("ec2")
        subnets = own_subnets(ec2)
        ami = str(ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"])
        env = {**os.environ, **server.env(), "LAUNCHER_HOME": str(tmp / "home")}
        for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
            env.pop(name, None)
        cloud = Cloud(server, hosts, tmp, env, ami, subnets)
        yield cloud
        hosts.check()


def own_subnets(ec2: Any) -> tuple[str, str]:
    """Two subnets (zones a and b) of a VPC 127.16.0.0/16, numbered at random from
    127.16.100.0/24 on, so that this session's hosts do not take the addresses of another
    test session's on this machine (fakes/aws/server.py's loopback_vpc uses 127.16.1-3.x)."""
    vpc = ec2.create_vpc(CidrBlock=str(LOOPBACK_NET))["Vpc"]["VpcId"]
    third = random.SystemRandom().randrange(100, 250, 2)
    a, b = (
        ec2.create_subnet(
            VpcId=vpc, CidrBlock=f"127.16.{third + n}.0/24", AvailabilityZone=f"us-west-2{zone}"
        )["Subnet"]["SubnetId"]
        for n, zone in enumerate("ab")
    )
    return str(a), str(b)


def clean(finished: Finished) -> None:
    """The command failed, if at all, with one clear line: no traceback, no internal error."""
    text = finished.stdout + finished.stderr
    assert "Traceback" not in text and "internal error" not in text, finished.output


def assert_unlocked(cloud: Cloud, cluster: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAUNCHER_HOME", cloud.env["LAUNCHER_HOME"])
    try:
        with ClusterLock(cluster, "test", timeout_s=0.5):
            pass
    except ClusterBusyError as exc:
        raise AssertionError(f"cluster {cluster} is still locked: {exc}") from None


# -- the tests ------------------------------------------------------------------------------


def test_a_whole_up_and_down(cloud: Cloud) -> None:
    """The baseline: an uninterrupted `up` (whose AWS calls the runs pick theirs from), a
    second `up` that creates nothing, and `down`. With cache_stopped_nodes, the worker's
    failed first start makes the head's autoscaler stop it and start it again."""
    path = str(cloud.config("base", cache_stopped=True))
    up = cloud.run("base-up", "up", "-y", path)
    clean(up)
    assert up.returncode == 0, up.output
    cloud.baseline = [str(c.action) for c in cloud.server.calls() if c.call.origin == "base-up"]
    assert {"ImportKeyPair", "RunInstances", "CreateTags"} <= set(cloud.baseline)
    kinds = sorted(i.tags["launcher-node-kind"] for i in cloud.instances("base"))
    assert kinds == ["head", "worker"]
    by_head = {c.action for c in cloud.server.calls() if (c.call.origin or "")[:2] == "i-"}
    assert {"StopInstances", "StartInstances"} <= by_head, by_head
    again = cloud.run("base-up2", "up", "-y", path)
    assert again.returncode == 0, again.output
    assert len(cloud.instances("base", ())) == 2
    down = cloud.run("base-down", "down", "-y", path)
    assert down.returncode == 0, down.output
    assert cloud.instances("base") == []


@pytest.mark.parametrize("index", range(RUNS))
def test_interrupted_up_then_down_leaves_no_instance(
    cloud: Cloud, index: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_run(cloud, plan_run(index), monkeypatch)


def check_run(cloud: Cloud, run: Run, monkeypatch: pytest.MonkeyPatch) -> Finished:
    """Interrupt `up` as `run` says, maybe `up` again, `down`: and check that nothing is
    left. Returns how the interrupted `up` ended."""
    if not cloud.baseline:
        pytest.skip("the baseline up did not run")
    story = run.describe(cloud.baseline)
    path = str(cloud.config(run.name, run.cache_stopped))
    notes = [story]
    cloud.server.describe_lag = run.lag_s
    try:
        up, target = interrupt_up(cloud, run, path)
        notes.append(up.output)
        clean(up)
        assert up.returncode in expected_codes(run), "unexpected exit code of up"
        if run.mode == "error-at-call" and up.returncode == 1:
            assert "UnauthorizedOperation" in up.stderr or "AccessDenied" in up.stderr
        assert_unlocked(cloud, run.name, monkeypatch)
        if run.second_up:
            again = cloud.run(f"{run.name}-up2", "up", "-y", path)
            notes.append(again.output)
            clean(again)
            assert again.returncode == 0, "the second up failed"
            target.wait_carried_out(cloud.server)  # whatever it makes, it has made by now
            heads = [i for i in cloud.instances(run.name, ()) if is_head(i)]
            assert len(heads) == 1, f"heads ever launched: {heads}"
            assert heads[0].state == "running", heads
        down = cloud.run(f"{run.name}-down", "down", "-y", path)
        notes.append(down.output)
        clean(down)
        if down.returncode != 0:
            again = cloud.run(f"{run.name}-down2", "down", "-y", path)
            notes.append(again.output)
            left = cloud.instances(run.name)
            verdict = "fixed it" if again.returncode == 0 and not left else "did not fix it"
            raise AssertionError(f"down failed (BUG); a second down {verdict}; left: {left}")
        target.wait_carried_out(cloud.server)  # whatever it makes, it makes by now
        left = cloud.instances(run.name)
        assert left == [], f"instances left after down: {left}"
        times = ", ".join(n.splitlines()[0].split(" -> ")[1] for n in notes[1:])
        print(f"{story}: nothing left after down; exits and times: {times}")
        assert not cloud.hosts.outside, f"instances outside the loopback VPC: {cloud.hosts.outside}"
    except AssertionError as exc:
        raise AssertionError("\n".join([str(exc), *notes])) from None
    finally:
        cloud.server.faults.clear()
        cloud.server.describe_lag = 0.0
    return up


def is_head(instance: InstanceView) -> bool:
    return instance.tags.get("launcher-node-kind") == "head"


def expected_codes(run: Run) -> tuple[int, ...]:
    """Exit codes `up` may end with under `run` (0: it finished before the interruption;
    -SIGINT: Ctrl-C came as Python was exiting, after the command's own work)."""
    if run.mode == "error-at-call":
        return (0, 1)
    return (0, 130, -signal.SIGINT) if run.signal == "SIGINT" else (0, -signal.SIGKILL)


class Target:
    """The call of one origin that a run's interruption is tied to: its `nth` call (from 0)
    of `action`, as the server sees them. Armed first, as a fault that never fires, so that
    every call is counted before the faults armed after it ask `hit` (this is that call) or
    `reached` (that call or a later one)."""

    def __init__(self, server: MotoServer, origin: str, action: str, nth: int) -> None:
        self.origin, self.action, self.nth = origin, action, nth
        self.seq: int | None = None
        self._seen: set[int] = set()
        self._counts: dict[str | None, int] = {}
        self._lock = threading.Lock()
        server.faults.add("*", when=self._count)

    def _count(self, call: Call) -> bool:
        if call.origin == self.origin:
            with self._lock:
                if call.seq not in self._seen:
                    self._seen.add(call.seq)
                    number = self._counts.get(call.action, 0)
                    self._counts[call.action] = number + 1
                    if self.seq is None and (call.action, number) == (self.action, self.nth):
                        self.seq = call.seq
        return False

    def hit(self, call: Call) -> bool:
        return call.origin == self.origin and call.seq == self.seq

    def reached(self, call: Call) -> bool:
        return call.origin == self.origin and self.seq is not None and call.seq >= self.seq

    def wait_carried_out(self, server: MotoServer, timeout_s: float = 60.0) -> None:
        """Return once the server has answered the call (if it was made at all)."""
        deadline = time.monotonic() + timeout_s
        while self.seq is not None and not any(c.call.seq == self.seq for c in server.calls()):
            assert time.monotonic() < deadline, f"call {self.seq} never carried out"
            time.sleep(0.1)


def interrupt_up(cloud: Cloud, run: Run, path: str) -> tuple[Finished, Target]:
    """Start `up` and interrupt it as `run` says; returns how it ended, and the call the
    interruption was tied to (which AWS may still be carrying out)."""
    origin = run.name
    target = Target(cloud.server, origin, *run.call(cloud.baseline))
    started = threading.Event()
    holder: list[Launcher] = []

    def send(call: Call) -> None:
        started.wait(10)
        holder[0].send(run.signal)

    faults = cloud.server.faults
    if run.mode == "signal-at-call":
        faults.add("*", when=target.hit, effect=send)
        if run.slow_s:  # after the signal: the caller is gone when AWS acts on the call
            faults.add("*", when=target.hit, delay=run.slow_s)
    elif run.mode in ("error-at-call", "throttled"):
        errors, when = (
            (DENIED, target.hit) if run.mode == "error-at-call" else (THROTTLED, target.reached)
        )
        for service, (code, status) in errors.items():
            faults.add("*", code, status=status, service=service, when=when)
    launcher = cloud.start(origin, "up", "-y", path)
    holder.append(launcher)
    started.set()
    if run.mode in ("signal-after", "throttled"):
        try:
            launcher.process.wait(run.delay_s)
        except subprocess.TimeoutExpired:
            launcher.send(run.signal)
    finished = launcher.wait()
    faults.clear()  # a call being slowed down is slowed down still
    return finished, target


@pytest.mark.parametrize("where", ["in flight", "unlisted"])
def test_down_while_the_head_is_launching_a_worker(cloud: Cloud, where: str) -> None:
    """`down` stops the autoscaler while AWS takes 8 s to answer its RunInstances for
    min_workers ("in flight"), or just after AWS answered it while DescribeInstances lists
    the new worker only 4 s later ("unlisted"). The worker must not be left: it was, while
    `down` killed an autoscaler that had not exited within 5 s, and while the autoscaler
    exited before its new worker was listed."""
    name = "race" if where == "in flight" else "race-lag"
    path = str(cloud.config(name, cache_stopped=False))

    def by_the_head(call: Call) -> bool:  # the cluster's tag, with the head's credentials
        return (call.origin or "").startswith("i-") and name in call.params.values()

    def answered() -> bool:
        return any(by_the_head(c.call) for c in cloud.server.calls("RunInstances"))

    launching = threading.Event()
    faults = cloud.server.faults
    faults.add("RunInstances", when=by_the_head, times=1, effect=lambda c: launching.set())
    if where == "in flight":
        faults.add("RunInstances", when=by_the_head, times=1, delay=8.0)
    else:
        cloud.server.describe_lag = 4.0
    try:
        up = cloud.run(f"{name}-up", "up", "-y", "--no-wait", path)
        assert up.returncode == 0, up.output
        assert launching.wait(60), "the head's autoscaler launched no worker"
        if where == "unlisted":
            wait_for(answered, 120, "moto to answer the head's launch")
        down = cloud.run(f"{name}-down", "down", "-y", path)
        assert down.returncode == 0, down.output
        deadline = time.monotonic() + 30
        while not answered() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert answered(), "the autoscaler's launch was never answered"
        left = cloud.instances(name)
        assert left == [], f"instances left after down: {left}\n{down.output}"
    finally:
        cloud.server.faults.clear()
        cloud.server.describe_lag = 0.0


@pytest.mark.parametrize("head", ["stale tag", "unreachable"])
def test_down_stops_the_autoscaler_whatever_the_head_tag_says(cloud: Cloud, head: str) -> None:
    """A killed `up`'s CreateTags, carried out by AWS after a second `up` had brought the
    same head up, set the head's status tag back to "setting-up" (CI, seed 786672 run 8).
    `down` took the tag's word that no autoscaler ran there, terminated the worker, and the
    autoscaler launched a new one that was left running. `down` must stop the autoscaler
    of a head that answers whatever its tag says, and terminate a head it cannot reach
    before the workers (so that nothing there can launch one after them)."""
    name = "stale" if head == "stale tag" else "mute"
    path = str(cloud.config(name, cache_stopped=False))
    up = cloud.run(f"{name}-up", "up", "-y", path)
    assert up.returncode == 0, up.output
    (head_node,) = [i for i in cloud.instances(name) if is_head(i)]
    ec2 = cloud.server.client("ec2")
    ec2.create_tags(
        Resources=[head_node.id], Tags=[{"Key": "launcher-node-status", "Value": "setting-up"}]
    )
    if head == "unreachable":  # its sshd turns every key away; the autoscaler runs on
        (cloud.hosts.host(head_node.id).root / "authorized_keys").write_text("")
    down = cloud.run(f"{name}-down", "down", "-y", path)
    clean(down)
    assert down.returncode == 0, down.output
    if head == "stale tag":
        assert "autoscaler stopped on the head" in down.stderr, down.output
    else:
        assert "could not reach the head to stop its autoscaler" in down.stderr, down.output
        lines = down.stderr.splitlines()
        terminating = [line for line in lines if line.endswith("terminating")]
        assert head_node.id in terminating[0], down.output  # the head went first
    assert cloud.instances(name) == [], down.output


@pytest.mark.parametrize(
    ("then", "where"),
    [("down", "in flight"), ("up", "in flight"), ("down", "unlisted"), ("up", "unlisted")],
)
def test_up_killed_around_its_head_launch(
    cloud: Cloud, then: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`up` is killed while AWS takes 3 s to carry out its RunInstances for the head ("in
    flight"), or just after AWS answered it while DescribeInstances does not list the new
    head for 4 s ("unlisted", EC2's eventual consistency); the user runs `down` (or `up`)
    at once, before any listing shows that head. `down` said "Nothing to take down" and left
    the head running; `up` made a second head."""
    run = Run(
        index=100 + 2 * (where == "unlisted") + (then == "up"),
        mode="signal-at-call",
        signal="SIGKILL",
        delay_s=0.0,
        at=0.0,
        cache_stopped=False,
        second_up=then == "up",
        target=("RunInstances", 0) if where == "in flight" else ("CreateTags", 0),
        slow_s=3.0 if where == "in flight" else 0.0,
        lag_s=0.0 if where == "in flight" else 4.0,
    )
    up = check_run(cloud, run, monkeypatch)
    assert up.returncode == -signal.SIGKILL, up.output
    heads = [i for i in cloud.instances(run.name, ()) if is_head(i)]
    assert len(heads) == 1, heads


def test_down_waits_for_a_running_up_and_goes_on_when_it_is_killed(cloud: Cloud) -> None:
    """The cluster lock: `down` waits while `up` holds it (up is stuck on a slow AWS call
    after launching its head), and takes over as soon as `up` is killed."""
    name = "locked"
    path = str(cloud.config(name, cache_stopped=False))
    origin = f"{name}-up"
    stuck = threading.Event()
    faults = cloud.server.faults
    slow = {"when": lambda c: c.origin == origin, "times": 1}
    faults.add("CreateTags", effect=lambda c: stuck.set(), **slow)
    faults.add("CreateTags", delay=30.0, **slow)
    try:
        up = cloud.start(origin, "up", "-y", path)
        assert stuck.wait(60), "up never tagged its head"
        down = cloud.start(f"{name}-down", "down", "-y", path)
        deadline = time.monotonic() + 60
        while "busy" not in down.peek():
            assert down.process.poll() is None, down.peek()
            assert time.monotonic() < deadline, f"down did not wait for up: {down.peek()}"
            time.sleep(0.1)
        assert f"launcher up by pid {up.process.pid}" in down.peek()
        up.send("SIGKILL")
        assert up.wait().returncode == -signal.SIGKILL
        finished = down.wait()
        assert finished.returncode == 0, finished.output
        assert "Terminated 1 node(s)" in finished.stdout, finished.output
        assert cloud.instances(name) == []
    finally:
        faults.clear()


# -- every call refused, at the provider's level ----------------------------------------------


def provider_flow(cloud: Cloud, name: str, clients: Any) -> None:
    """What `up`, the head's autoscaler (stopping a worker, starting it again) and
    `down --purge` ask of the provider, in-process, through `clients` (made once: making
    boto3 clients takes longer than the flow otherwise)."""
    from launcher.config.loader import Overrides, parse_config
    from launcher.providers.aws.provider import AwsProvider
    from launcher.providers.base import TAG_STATUS, NodeKind

    path = cloud.config(name, cache_stopped=True)
    # One key pair name for every flow: its key is made once, and imported again after
    # each flow's purge (making a key is most of a flow's time otherwise).
    text = path.read_text().replace(
        "  cache_stopped_nodes:", "  key_pair: {key_name: flow}\n  cache_stopped_nodes:"
    )
    config = parse_config(text, str(path), Overrides())
    test_ec2 = cloud.server.client("ec2", user_agent_appid="the-test")  # not a "flow" call
    test_ec2.delete_key_pair(KeyName="flow")  # left by a flow that failed
    new = {TAG_STATUS: "uninitialized"}
    laptop = AwsProvider(config)
    on_head = AwsProvider(config, on_head=True)
    laptop.clients = on_head.clients = clients
    laptop.bootstrap()
    (head,) = laptop.create_nodes(config.head_type, NodeKind.HEAD, 1, new)
    laptop.set_tags(head.id, {TAG_STATUS: "up-to-date"})
    on_head.bootstrap()
    worker_type = config.node_types["worker"]
    (worker,) = on_head.create_nodes(worker_type, NodeKind.WORKER, 1, new)
    on_head.stop_nodes([worker.id])  # stopped: cache_stopped_nodes
    on_head.create_nodes(worker_type, NodeKind.WORKER, 1, new)  # started again
    on_head.stop_nodes([worker.id])
    assert {n.id for n in laptop.nodes()} == {head.id}
    laptop.terminate_nodes([head.id])
    laptop.cleanup(purge=True)


def test_every_refused_call_is_one_clear_error(
    cloud: Cloud, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each AWS call the provider makes, refused (UnauthorizedOperation, AccessDenied):
    a LauncherError (one line for the user), never another exception (an "internal error"
    with a traceback). DescribeVpcs, and DescribeSecurityGroups on the head, raised
    botocore's ClientError."""
    from launcher.errors import LauncherError
    from launcher.providers.aws.clients import AwsClients

    for name, value in cloud.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SDK_UA_APP_ID", "flow")
    clients = AwsClients(cloud.server.region)
    first = len(cloud.server.calls())
    provider_flow(cloud, "flow", clients)
    calls = [str(c.action) for c in cloud.server.calls()[first:] if c.call.origin == "flow"]
    wanted = sorted({(action, calls[:n].count(action)) for n, action in enumerate(calls)})
    escaped = []
    for number, (action, nth) in enumerate(wanted):
        target = Target(cloud.server, "flow", action, nth)  # counts from now on
        for service, (code, status) in DENIED.items():
            cloud.server.faults.add("*", code, status=status, service=service, when=target.hit)
        try:
            provider_flow(cloud, f"flow{number}", clients)
        except LauncherError:
            pass
        except Exception as exc:
            escaped.append(f"{action} #{nth + 1}: {type(exc).__name__}: {exc}")
        finally:
            cloud.server.faults.clear()
        assert target.seq is not None, f"{action} #{nth + 1} was never made"
    assert len(wanted) > 30
    assert not escaped, "\n".join(escaped)

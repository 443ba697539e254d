"""fakes/faults.py, the fault injector the wire fakes share: counting, order and firing."""

from __future__ import annotations

from dataclasses import dataclass

from fakes import faults


@dataclass(frozen=True)
class _Call:
    name: str


@dataclass(eq=False)
class _Fault(faults.Fault[_Call]):
    name: str = "*"
    error: str | None = None

    @property
    def fails(self) -> bool:
        return self.error is not None

    def selects(self, call: _Call) -> bool:
        return self.name in ("*", call.name)


def _registry() -> faults.Faults[_Fault]:
    return faults.Faults(_Fault)


def test_a_fault_lets_skip_calls_pass_then_fires_times_times() -> None:
    registry = _registry()
    fault = registry.add("get", "boom", skip=1, times=2)
    picked = [registry.pick(_Call("get")) for _ in range(4)]
    assert picked == [[], [fault], [fault], []]
    assert (fault.seen, fault.fired, fault.exhausted) == (3, 2, True)
    assert registry.pick(_Call("put")) == [] and fault.seen == 3  # not one it names


def test_every_fault_without_an_error_fires_and_the_first_with_one_answers() -> None:
    registry = _registry()
    effects: list[str] = []
    watch = registry.add("*", effect=lambda call: effects.append(call.name))
    first = registry.add("get", "first")
    second = registry.add("get", "second")
    picked = registry.pick(_Call("get"))
    assert picked == [watch, first] and second.seen == 0
    assert faults.fire(picked, _Call("get")) is first and effects == ["get"]
    assert faults.fire(registry.pick(_Call("put")), _Call("put")) is None
    assert registry.add("get", when=lambda call: False).matches(_Call("get")) is False


def test_faults_are_removed_and_cleared() -> None:
    registry = _registry()
    fault = registry.add("get", "boom")
    registry.remove(fault)
    registry.remove(fault)  # already gone: no error
    registry.add("get", "again")
    assert len(list(registry)) == 1
    registry.clear()
    assert list(registry) == [] and registry.pick(_Call("get")) == []


def test_the_call_log_keeps_order_and_copies() -> None:
    log = faults.CallLog[str]()
    log.append("a")
    log.append("b")
    entries = log.entries()
    entries.append("c")
    assert log.entries() == ["a", "b"]
    log.clear()
    assert log.entries() == []

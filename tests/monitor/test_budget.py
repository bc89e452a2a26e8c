"""The overhead budget's logic with synthetic samples (monitor/budget.py): when the profiler has stayed
over the budget long enough, which metric is named, what resets the wait; what a budget, an action and a
hold time may be, in the headless arguments too; each metric's sampling mode (the registry's
`sampling`); and the keeper (monitor/budget_keeper.py) turning a verdict into a note record and a stop or
a restart, against a stand-in controller."""

from __future__ import annotations

import pytest
from fakes import BURNER

import config
from monitor import headless
from monitor.budget import BudgetError, BudgetWatch, parse_action, parse_budget, parse_hold
from monitor.budget_keeper import BudgetKeeper, machine_shares


# --- parsing ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "value"), [("5", 5.0), ("0.01", 0.01), ("100", 100.0), (" 2.5 % ", 2.5), (7, 7.0)])
def test_a_budget_above_0_and_at_most_100_is_taken(text, value):
    assert parse_budget(text) == value


@pytest.mark.parametrize(("text", "says"), [
    ("0", "must be above 0 and at most 100"), ("-1", "must be above 0"), ("100.5", "at most 100"),
    ("nan", "must be above 0"), ("inf", "must be above 0"), ("five", "is not a number"), ("", "is not a number"),
])
def test_a_budget_of_0_negative_over_100_or_not_a_number_is_refused_in_one_line(text, says):
    with pytest.raises(BudgetError) as refused:
        parse_budget(text)
    assert says in str(refused.value) and "\n" not in str(refused.value)


def test_actions_and_hold_times():
    assert [parse_action(a) for a in ("warn", " Sample", "STOP")] == ["warn", "sample", "stop"]
    assert parse_hold("0.5") == 0.5
    for bad in ("restart", ""):
        with pytest.raises(BudgetError, match="must be one of warn, sample, stop"):
            parse_action(bad)
    for bad in ("0", "-2", "soon", "inf"):
        with pytest.raises(BudgetError):
            parse_hold(bad)
    with pytest.raises(BudgetError):
        BudgetWatch(0)


@pytest.mark.parametrize(("args", "message"), [
    (["--budget", "0"], "argument --budget: overhead budget 0: must be above 0 and at most 100"),
    (["--budget", "-5"], "argument --budget: overhead budget -5: must be above 0"),
    (["--budget", "101"], "argument --budget: overhead budget 101: must be above 0 and at most 100"),
    (["--budget", "lots"], "argument --budget: overhead budget 'lots' is not a number"),
    (["--over-budget", "restart"], "argument --over-budget: invalid choice: 'restart'"),
    (["--budget", "5", "--over-budget-for", "0"], "argument --over-budget-for: over-budget time 0"),
])
def test_headless_refuses_a_bad_budget_with_one_line_and_status_2(args, message, capsys):
    with pytest.raises(SystemExit) as ended:
        headless.parse_args(["--metric", "sysnest", *args])
    err = capsys.readouterr().err
    assert ended.value.code == 2
    assert err.startswith(f"{headless.PROG}: error: {message}") and err.count("\n") == 1, err


def test_headless_budget_defaults():
    args, _ = headless.parse_args(["--metric", "sysnest"])
    assert args.budget is None                                   # not watched unless asked
    args, _ = headless.parse_args(["--metric", "sysnest", "--over-budget", "stop"])
    assert (args.budget, args.over_budget, args.over_budget_for) == (5.0, "stop", 10.0)
    args, _ = headless.parse_args(["--metric", "sysnest", "--budget", "0.01", "--over-budget-for", "2"])
    assert (args.budget, args.over_budget, args.over_budget_for) == (0.01, "warn", 2.0)


# --- the watch ----------------------------------------------------------------------------------------
def feed(watch: BudgetWatch, samples: list[tuple[float, dict, float]]) -> list:
    return [watch.add(now, costs, other) for now, costs, other in samples]


def test_over_the_budget_for_the_hold_names_the_costliest_metric_once():
    watch = BudgetWatch(5, "stop", hold_s=10)
    costs = {"sysnest": 3.0, "offcpu": 1.5}
    verdicts = feed(watch, [(t, costs, 1.0) for t in range(0, 12)])
    assert verdicts[:10] == [None] * 10                    # 0 .. 9 s over: not yet
    verdict = verdicts[10]
    assert (verdict.metric, verdict.action, verdict.cost_pct, verdict.total_pct, verdict.budget_pct,
            verdict.over_s) == ("sysnest", "stop", 3.0, 5.5, 5.0, 10)
    assert verdicts[11] is None                           # the next needs as long over again
    later = feed(watch, [(t, costs, 1.0) for t in range(12, 21)])
    assert later[:-1] == [None] * 8 and later[-1].metric == "offcpu"    # sysnest was acted on: the next one
    assert feed(watch, [(t, costs, 1.0) for t in range(21, 40)]) == [None] * 19   # every metric acted on


def test_a_dip_to_the_budget_starts_the_wait_again():
    watch = BudgetWatch(5, hold_s=10)
    over, under = {"a": 6.0}, {"a": 4.0}
    assert feed(watch, [(t, over, 0) for t in range(9)]) == [None] * 9
    assert watch.over_s(8) == 8
    assert watch.add(9, {"a": 5.0}, 0) is None            # exactly at the budget is within it
    assert watch.over_since is None and watch.over_s(9) == 0
    assert feed(watch, [(t, over, 0) for t in range(10, 20)]) == [None] * 10
    assert watch.add(20, over, 0).metric == "a"
    assert watch.add(21, under, 0) is None and watch.acted == set()     # a dip forgets what was acted on


def test_a_dip_while_a_cost_is_unknown_forgets_nothing_acted_on():
    """A switched metric's new process has no cost in its first sample: the total looks within the
    budget, but the switch is not forgotten, so the same metric is not named again at once."""
    watch = BudgetWatch(1, "sample", hold_s=1)
    assert feed(watch, [(0, {"a": 3.0}, 0.0), (1, {"a": 3.0}, 0.0)])[-1].metric == "a"
    assert watch.add(2, {"a": None}, 0.0) is None and watch.over_since is None and watch.acted == {"a"}
    assert feed(watch, [(t, {"a": 0.5, "b": 0.6}, 0.0) for t in range(3, 10)])[-1] is None   # "b" waits its hold
    assert watch.acted == {"a", "b"}
    assert watch.add(10, {"a": 0.2, "b": 0.2}, 0.0) is None and watch.acted == set()


def test_equal_costs_name_the_first_by_name_and_unknown_or_free_metrics_are_never_named():
    watch = BudgetWatch(1, hold_s=1)
    samples = [(0, {"zeta": 2.0, "alpha": 2.0, "new": None, "idle": 0.0}, 0), (1, {"zeta": 2.0, "alpha": 2.0}, 0)]
    assert feed(watch, samples)[-1].metric == "alpha"
    watch = BudgetWatch(1, hold_s=1)
    # the app alone is over the budget: no metric costs anything to act on
    assert feed(watch, [(t, {"new": None, "idle": 0.0}, 3.0) for t in range(5)]) == [None] * 5
    assert watch.total_pct == 3.0


def test_a_metric_that_stopped_is_not_named():
    watch = BudgetWatch(2, hold_s=2)
    assert feed(watch, [(0, {"gone": 5.0, "left": 1.0}, 0.5), (1, {"gone": 5.0, "left": 1.0}, 0.5)]) == [None, None]
    verdict = watch.add(2, {"left": 2.0}, 0.5)             # "gone" ended by itself; the total stays over
    assert verdict.metric == "left" and verdict.total_pct == 2.5


def test_a_new_budget_starts_the_wait_again():
    watch = BudgetWatch(5, hold_s=3)
    feed(watch, [(t, {"a": 9.0}, 0) for t in range(3)])
    watch.set_budget(8)
    assert feed(watch, [(t, {"a": 9.0}, 0) for t in range(3, 6)]) == [None] * 3
    assert watch.add(6, {"a": 9.0}, 0).budget_pct == 8
    with pytest.raises(BudgetError):
        watch.set_budget(-1)


# --- sampling modes -------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [s for s in config.METRICS if s.sampling] + [BURNER], ids=lambda s: s.name)
def test_every_sampling_mode_names_real_arguments_and_makes_a_valid_command(spec):
    declared = {a.name: a for a in spec.args}
    defaults = {a.name: a.default for a in spec.args if a.default is not None}
    for name, op, value in spec.sampling:
        assert name in declared and op in ("=", "<=", ">="), (name, op)
        assert declared[name].convert(value) == value
    changes = spec.sampling_changes(defaults)
    assert changes, f"{spec.name}'s defaults are not its sampling mode"
    spec.command({**defaults, **changes})
    assert spec.sampling_changes({**defaults, **changes}) == {}        # in it already: nothing cheaper


def test_sampling_modes_never_make_a_chosen_value_dearer():
    sysnest, cpuprofile = config.get("sysnest"), config.get("cpuprofile")
    assert sysnest.sampling_changes({"sample": "1"}) == {"sample": 8}
    assert sysnest.sampling_changes({"sample": "100"}) == {}
    assert cpuprofile.sampling_changes({"frequency": "99"}) == {"frequency": 19, "user_stacks": "fp"}
    assert cpuprofile.sampling_changes({"frequency": 10, "user_stacks": "fp"}) == {}
    assert config.get("offcpu").sampling_changes({}) == {"stack_every": 64}
    assert config.get("offcpu").sampling_changes({"stack_every": "1"}) == {"stack_every": 64}
    assert config.get("offcpu").sampling_changes({"stack_every": "256"}) == {}
    assert config.get("tcpconnlat").sampling_changes({}) == {}
    assert {s.name for s in config.METRICS if s.sampling} == {"sysnest", "cpuprofile", "offcpu", "compmem"}


# --- the keeper -----------------------------------------------------------------------------------------
class Controller:
    """What the keeper asks of the controller, recorded."""

    def __init__(self, values: dict[str, dict]) -> None:
        self.values = values
        self.registry = {s.name: s for s in config.METRICS}
        self.calls: list[tuple] = []

    def running(self) -> list[str]:
        return list(self.values)

    def values_of(self, name: str) -> dict | None:
        return self.values.get(name)

    def note(self, name: str, fields: dict) -> dict:
        self.calls.append(("note", name, fields))
        return fields

    def stop_metric(self, name: str) -> None:
        self.calls.append(("stop", name))

    def restart_metric(self, name: str, values: dict) -> None:
        self.calls.append(("restart", name, values))


def rows(**one_cpu_pct: float | None) -> list[dict]:
    """A sample's subtotal rows, each metric's total in % of one CPU; `app` the app's row."""
    found = [{"metric": m, "type": "subtotal", "total_cpu_pct": v} for m, v in one_cpu_pct.items() if m != "app"]
    return [*found, {"metric": "(this app)", "type": "app", "proc_cpu_pct": one_cpu_pct.get("app", 0.0)}]


def test_machine_shares_divide_one_cpu_figures_by_the_cpus():
    costs, app = machine_shares([*rows(sysnest=8.0, offcpu=None, app=2.0), {"metric": "sysnest", "id": 7}], 4)
    assert costs == {"sysnest": 2.0, "offcpu": None} and app == 0.5


def keeper_over(action: str, values: dict[str, dict], **sample: float) -> tuple[Controller, BudgetKeeper, list]:
    controller = Controller(values)
    logged: list = []
    keeper = BudgetKeeper(controller, BudgetWatch(1, action, hold_s=1), lambda m, line: logged.append((m, line)), cpus=2)
    assert keeper.sample(0.0, rows(**sample)) is None
    keeper.sample(1.0, rows(**sample))
    return controller, keeper, logged


def test_stop_writes_the_note_first_then_stops_the_costliest():
    controller, keeper, logged = keeper_over("stop", {"sysnest": {}, "offcpu": {}}, sysnest=6.0, offcpu=2.0, app=1.0)
    (kind, name, fields), stop = controller.calls
    assert (kind, name, stop) == ("note", "sysnest", ("stop", "sysnest"))
    assert fields == {**fields, "source": "overhead budget", "action": "stop", "asked": "stop", "budget_pct": 1.0,
                      "total_pct": 4.5, "cost_pct": 3.0, "over_s": 1.0}
    assert fields["text"].endswith("sysnest costs most (3.00 %): stopped") and "budget 1 %" in fields["text"]
    assert logged == [("sysnest", fields["text"])] and keeper.actions == [{"metric": "sysnest", **fields}]


def test_sample_restarts_with_the_sampling_mode_or_warns_when_there_is_none():
    controller, _, _ = keeper_over("sample", {"sysnest": {"interval": "2", "sample": "1"}}, sysnest=6.0)
    (_, _, fields), restart = controller.calls
    assert fields["action"] == "sample" and fields["args"] == {"sample": 8}
    assert "switched to its sampling mode (sample 8)" in fields["text"]
    assert restart == ("restart", "sysnest", {"interval": "2", "sample": 8})

    controller, _, _ = keeper_over("sample", {"tcpconnlat": {}}, tcpconnlat=6.0)
    [(_, _, fields)] = controller.calls                     # a note, nothing stopped or restarted
    assert (fields["action"], fields["asked"], fields["reason"]) == ("warn", "sample", "tcpconnlat has no cheaper mode")
    assert "args" not in fields

    controller, _, _ = keeper_over("sample", {"sysnest": {"sample": 8}}, sysnest=6.0)
    [(_, _, fields)] = controller.calls
    assert fields["reason"] == "sysnest runs in its sampling mode already" and fields["action"] == "warn"


def test_only_running_metrics_are_named():
    controller, keeper, _ = keeper_over("warn", {"offcpu": {}}, sysnest=9.0, offcpu=1.0)
    [(_, name, fields)] = controller.calls
    assert name == "offcpu" and fields["action"] == "warn" and fields["total_pct"] == 5.0
    assert keeper.costs == {"sysnest": 4.5, "offcpu": 0.5}

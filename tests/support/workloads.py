"""Workload programs that more than one test runs (through helpers.run_workload), each measuring its own
ground truth."""

SLEEPER_CHILD = """
import json, sys, threading, time
sys.stdin.readline()
truth = {}
def own_accounting():
    # the kernel's own books for this thread: time on CPU, time waiting for one, blocking switches
    run_ns, wait_ns, _ = map(int, open("/proc/thread-self/schedstat").read().split())
    status = open("/proc/thread-self/status").read()
    voluntary = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
    return time.monotonic_ns(), run_ns, wait_ns, voluntary
def sleeper():
    before = own_accounting()
    for _ in range(20):
        time.sleep(0.05)
    after = own_accounting()
    wall, run, wait, blocks = (a - b for a, b in zip(after, before))
    truth.update(blocked_ms=(wall - run - wait) / 1e6, blocks=blocks)
t = threading.Thread(target=sleeper)
t.start()
print(t.native_id, flush=True)
t.join()
print("done", json.dumps(truth), flush=True)
sys.stdin.readline()
"""

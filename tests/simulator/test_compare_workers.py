"""`compare`'s worker processes: a worker that fails or dies fails the comparison at once,
with an error that says what happened, and leaves no process behind; never a hang.

The failing policies live in small caller scripts run in a subprocess: a spawned worker
runs its caller's main module again, so an order the script adds to the registry at import
time exists in the workers too, as it would for any user's script.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import subprocess
import sys
import textwrap

import pytest

from attentived.simulator import compare as cmp
from attentived.simulator.samples import sample_path
from attentived.simulator.trace import load_trace
from attentived.topology import uniform

#: Far above the few seconds these take; a hang fails the test instead of the whole run.
TIMEOUT = 90


def run_script(tmp_path, source: str, *args: str) -> subprocess.CompletedProcess:
    script = tmp_path / "caller.py"
    script.write_text(textwrap.dedent(source))
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=TIMEOUT,
                          cwd=tmp_path)


def test_a_script_without_a_main_guard_fails_with_the_guard_in_the_message(tmp_path):
    """Each spawned worker runs the script again and dies starting its own pool. 2,000
    Philly jobs pickle to ~140 KB, past the 64 KiB pipe that used to hang the parent."""
    r = run_script(tmp_path, """
        import multiprocessing
        from attentived.simulator import compare as cmp
        from attentived.simulator.samples import sample_path
        from attentived.simulator.trace import load_trace
        from attentived.topology import uniform

        trace = load_trace(sample_path("philly"), max_jobs=2000)
        try:
            cmp.compare([cmp.Workload("philly-2000", trace)], uniform(8, 8), ["fifo", "sjf"], [0], workers=2)
        except cmp.RunError:
            print("processes left:", len(multiprocessing.active_children()))
            raise
    """)
    assert r.returncode == 1, r.stderr
    assert r.stdout.splitlines()[-1] == "processes left: 0"
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("attentived.simulator.compare.RunError: a worker process exited while starting (exit code 1)")
    assert 'if __name__ == "__main__":' in last


def failing_order(how: str) -> str:
    """Script text that adds the order ``failing``, whose ranking does ``how``, at import
    time (so that the spawned workers, which run the script again, have it too)."""
    return f"""
    import os
    import signal
    import sys

    from attentived.agents.catalog import ORDERS
    from attentived.agents.order import Fifo


    class Failing(Fifo):
        def rank(self, state):
            {how}


    ORDERS["failing"] = lambda seed: Failing()
    """


CLI = """
    if __name__ == "__main__":
        from attentived.cli import app

        app(["compare", "--sample", "tiresias-60", "--nodes", "2", "-p", "fifo", "-p", "failing", "--seeds", "2",
             "--workers", sys.argv[1]], prog_name="attentived")
"""


@pytest.mark.parametrize(
    "how, workers, message",
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "2",
         r"the worker process running tiresias-60 / failing / seed \d died \(killed by SIGKILL\) \(out of memory\?"),
        ("os._exit(3)", "2", r"the worker process running tiresias-60 / failing / seed \d died \(exit code 3\)$"),
        ("raise ValueError('boom')", "2",
         r"run tiresias-60 / failing / seed \d failed in a worker process: ValueError: boom$"),
        ("raise ValueError('boom')", "1", r"run tiresias-60 / failing / seed \d failed: ValueError: boom$"),
    ],
)
def test_the_command_fails_with_what_happened_to_the_run(tmp_path, how, workers, message):
    r = run_script(tmp_path, failing_order(how) + CLI, workers)
    assert r.returncode == 1, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("attentived: error: ")
    assert re.search(message, last), last


def test_the_error_of_a_policy_that_raises_in_a_worker_carries_its_traceback(tmp_path):
    """The CLI prints the message; a caller of the API also gets the worker's traceback."""
    r = run_script(tmp_path, failing_order("raise ValueError('boom')") + """
    if __name__ == "__main__":
        from attentived.simulator import compare as cmp
        from attentived.simulator.samples import sample_path
        from attentived.simulator.trace import load_trace
        from attentived.topology import uniform

        workloads = [cmp.Workload("t", load_trace(sample_path("tiresias-60"), max_jobs=10))]
        try:
            cmp.compare(workloads, uniform(2, 8), ["fifo", "failing"], [0], workers=2)
        except cmp.RunError as e:
            print(e, *e.__notes__, sep="\\n")
    """)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "run t / failing / seed 0 failed in a worker process: ValueError: boom"
    assert lines[1] == "the worker's traceback:" and "in rank" in r.stdout and lines[-1] == "ValueError: boom"


@pytest.fixture(scope="module")
def tiny():
    trace = load_trace(sample_path("tiresias-60"), max_jobs=40)
    return [cmp.Workload("tiresias-40", trace)], uniform(2, 8, nodes_per_switch=2)


def test_a_worker_killed_from_outside_fails_the_comparison_at_once(tiny):
    """As the kernel's OOM killer would: SIGKILL to a worker while runs remain."""
    workloads, topo = tiny
    killed: list[int] = []

    def kill_a_worker(_):
        if not killed:
            victim = next(p for p in multiprocessing.active_children() if p.name == "attentived-compare")
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    # the victim may still be starting (a worker can answer before the other has started)
    died = (r"^(the worker process running tiresias-40 / \S+ / seed \d died \(killed by SIGKILL\)"
            r"|a worker process exited while starting \(killed by SIGKILL\), before running anything) \(out of memory\?")
    with pytest.raises(cmp.RunError, match=died):
        cmp.compare(workloads, topo, ["fifo", "sjf"], [0, 1, 2, 3], workers=2, on_done=kill_a_worker)
    assert killed
    assert not [p for p in multiprocessing.active_children() if p.name == "attentived-compare"]

"""Threads: GPU statements of several connections are serialized by the lease queue, not the GIL."""

import _thread
import signal
import threading
import time

import pytest

import accelsql


def overlapping(spans):
    spans = sorted(spans)
    return any(a_end > b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


def slow_gpu_udf(conn, spans, seconds=0.3, accelerator="GpuNvidia"):
    def slow(x):
        start = time.monotonic()
        time.sleep(seconds)
        spans.append((start, time.monotonic()))
        return x

    conn.register_udf(slow, inputs=["BIGINT"], returns="BIGINT", accelerator=accelerator)


def test_gpu_statements_of_two_connections_are_serialized():
    spans = []
    conns = [accelsql.connect(simulated_gpus=2, lower_ident=True) for _ in range(2)]
    for c in conns:
        slow_gpu_udf(c, spans)
    threads = [threading.Thread(target=c.execute, args=("SELECT slow(1)",)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(spans) == 2
    assert not overlapping(spans), spans
    for c in conns:
        c.close()


def test_cpu_statements_of_two_connections_run_at_once():
    spans = []
    conns = [accelsql.connect(simulated_gpus=2, lower_ident=True) for _ in range(2)]
    for c in conns:
        slow_gpu_udf(c, spans, accelerator="None")
    threads = [threading.Thread(target=c.execute, args=("SELECT slow(1)",)) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # time.sleep releases the GIL; with the GIL released while statements run, they overlap.
    assert overlapping(spans), spans
    for c in conns:
        c.close()


def test_the_script_notebook_scenario_is_serialized(unique):
    name = unique("long_running_gpu")
    conns = [accelsql.connect(simulated_gpus=2, lower_ident=True) for _ in range(2)]
    conns[0].execute(
        f"CREATE OR REPLACE PYTHON3 SCALAR SCRIPT {name}(seconds DOUBLE)\n"
        "EMITS (device VARCHAR(200), start_time TIMESTAMP, end_time TIMESTAMP) AS\n"
        "%perInstanceRequiredAcceleratorDevices GpuNvidia;\n"
        "import datetime, os, time\n"
        "def run(ctx):\n"
        "    start = datetime.datetime.now()\n"
        "    time.sleep(ctx.seconds)\n"
        "    ctx.emit(os.environ.get('CUDA_VISIBLE_DEVICES', ''), start, datetime.datetime.now())\n/"
    )
    results = [None, None]

    def run(i):
        results[i] = conns[i].export_to_pandas(f"SELECT {name}(0.5)")

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = [(r["start_time"].iloc[0], r["end_time"].iloc[0]) for r in results]
    assert not overlapping(spans), spans
    for c in conns:
        c.close()


def test_the_gil_is_released_while_a_statement_runs(conn):
    done = threading.Event()
    ticks = 0

    def query():
        conn.execute(
            "SELECT COUNT(DISTINCT value % 1000003), SUM(value * 2) FROM generate_series(1, 5000000)"
        )
        done.set()

    t = threading.Thread(target=query)
    started = time.monotonic()
    t.start()
    while not done.is_set():
        ticks += 1
    t.join()
    elapsed = time.monotonic() - started
    # The main thread kept running Python while the statement ran (with the GIL held it would
    # get a tick only every switch interval).
    assert elapsed > 0.05
    assert ticks > 10000, (ticks, elapsed)


def _ctrl_c_while_waiting(holder, waiter, observer):
    """One try: the holder takes the lease for 2.5 s, the waiter queues behind it and gets
    Ctrl-C once `observer` sees it waiting. Returns what happened to the waiter, how long it
    took from the interrupt, and what was seen (for the failure message)."""
    seen = {"holder_error": None, "leases": []}

    def hold():
        try:
            holder.execute("SELECT slow(1)")
        except Exception as e:  # reported in the failure message, not lost in a thread
            seen["holder_error"] = repr(e)

    def leases():
        return observer.execute("SELECT session, state FROM accelsql.gpu_leases").fetchall()

    busy = threading.Thread(target=hold)
    busy.start()
    # Wait until the holder has the lease: only then does the waiter queue behind it.
    deadline = time.monotonic() + 10
    while not any(state == "holding" for _, state in leases()):
        assert time.monotonic() < deadline, ("the holder never took the lease", seen)
        time.sleep(0.02)
    interrupted_at = []
    returned = threading.Event()

    def interrupt_once_waiting():
        # Ctrl-C once the waiter's statement is in the queue (or give up when it returns).
        stop = time.monotonic() + 10
        while not returned.is_set() and time.monotonic() < stop:
            rows = leases()
            seen["leases"].append(rows)
            if any(state == "waiting" for _, state in rows):
                interrupted_at.append(time.monotonic())
                _thread.interrupt_main()
                return
            time.sleep(0.02)

    watcher = threading.Thread(target=interrupt_once_waiting)
    watcher.start()
    try:
        waiter.execute("SELECT slow(1)")
        outcome = "returned"
    except KeyboardInterrupt:
        outcome = "interrupted"
    ended = time.monotonic()
    returned.set()
    try:
        busy.join()
        watcher.join()
    except KeyboardInterrupt:
        # The interrupt came after the statement had returned.
        pass
    took = ended - interrupted_at[0] if interrupted_at else float("inf")
    return outcome, took, seen


def test_ctrl_c_cancels_a_waiting_statement():
    # Ctrl-C reaches Python through its SIGINT handler. A process started in the background by a
    # non-interactive shell (as CI runs are) inherits SIGINT ignored, and then Python installs no
    # handler and `_thread.interrupt_main` does nothing: install the handler an interactive
    # Python has, for this test only.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _ctrl_c_cancels_a_waiting_statement()
    finally:
        signal.signal(signal.SIGINT, previous)


def _ctrl_c_cancels_a_waiting_statement():
    spans = []
    with (
        accelsql.connect(simulated_gpus=1) as holder,
        accelsql.connect(simulated_gpus=1) as waiter,
        accelsql.connect(simulated_gpus=1) as observer,
    ):
        slow_gpu_udf(holder, spans, seconds=2.5)
        slow_gpu_udf(waiter, spans, seconds=0.0)
        # Up to three tries, each recording what it saw: the interrupt must reach a waiting
        # statement within 1 s in one of them.
        tries = []
        for _ in range(3):
            outcome, took, seen = _ctrl_c_while_waiting(holder, waiter, observer)
            tries.append((outcome, round(took, 2), seen))
            if outcome == "interrupted" and took < 1.0:
                break
        assert tries[-1][0] == "interrupted" and tries[-1][1] < 1.0, tries
        # The cancelled statement left the queue: the next one runs.
        assert waiter.execute("SELECT slow(2)").fetchval() == 2

"""Port allocation never hands one port to two launches at once: threads, processes, real servers."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor

import pytest
from launch_helpers import MODEL, group_gone

from servetune.errors import LaunchError
from servetune.launch import PortReservation, port_is_free, reserve_free_port, start_server


def test_threads_reserving_at_once_get_distinct_ports():
    """64 reservations held at once from 16 threads are all different and all bindable."""
    with ThreadPoolExecutor(16) as pool:
        held = list(pool.map(lambda _: reserve_free_port("127.0.0.1"), range(64)))
    try:
        assert len({r.port for r in held}) == 64
        assert all(port_is_free("127.0.0.1", r.port) for r in held)
    finally:
        for r in held:
            r.release()


def _reserve_many(args):
    barrier, n = args
    held = [reserve_free_port("127.0.0.1") for _ in range(n)]
    barrier.wait(30)
    return [r.port for r in held]


def test_processes_reserving_at_once_get_distinct_ports():
    """4 processes x 32 reservations, all held at the same moment, never collide."""
    ctx = multiprocessing.get_context("fork")
    with ctx.Manager() as manager:
        barrier = manager.Barrier(4)
        with ctx.Pool(4) as pool:
            results = pool.map_async(_reserve_many, [(barrier, 32)] * 4).get(timeout=60)
    ports = [p for r in results for p in r]
    assert len(ports) == len(set(ports)) == 128


def test_a_reserved_port_is_refused_to_a_second_launch(make_options):
    """An explicit port that another launch in progress holds is `port_in_use`, before anything starts."""
    res = reserve_free_port("127.0.0.1")
    try:
        assert PortReservation.try_acquire(res.port) is None
        with pytest.raises(LaunchError) as info:
            start_server(["--model-path", MODEL], {}, {}, make_options(port=res.port))
        assert info.value.failure == "port_in_use" and "reserved by another servetune launch" in info.value.message
    finally:
        res.release()
    again = PortReservation.try_acquire(res.port)
    assert again is not None
    again.release()


def test_parallel_launches_each_get_their_own_server(make_options):
    """Four stand-ins launched from four threads at once: four ports, four pids, each answering as itself."""
    opts = [make_options() for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        servers = list(pool.map(lambda o: start_server(["--model-path", MODEL], {}, {"model_path": MODEL}, o), opts))
    try:
        assert len({s.port for s in servers}) == 4
        assert all(s.server_info["pid"] == s.pid and s.server_info["port"] == s.port for s in servers)
    finally:
        for s in servers:
            s.stop()
    assert all(group_gone(s.pgid) for s in servers)
    assert all(PortReservation.try_acquire(s.port) is not None for s in servers)


def _child_signal_state(_):
    import signal

    from servetune.launch import _registry

    return (
        signal.getsignal(signal.SIGTERM) is signal.SIG_DFL,
        signal.getsignal(signal.SIGHUP) is signal.SIG_DFL,
        _registry._LIVE_LOCK.acquire(timeout=1),
    )


def test_a_forked_worker_gets_the_default_signal_actions_and_a_free_lock():
    """A pool worker forked from a process that installed servetune's SIGTERM/SIGHUP handlers gets the
    default actions back (a Python handler cannot run while the worker blocks in C, so
    `Pool.terminate()` could hang joining it), and the server registry's lock free even if another
    thread held it at the fork."""
    import threading

    from servetune.launch import _registry

    _registry.install_signal_handlers()
    held = threading.Event()
    release = threading.Event()

    def hold_the_lock():
        with _registry._LIVE_LOCK:
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_lock)
    holder.start()
    try:
        assert held.wait(5)
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.map(_child_signal_state, [0]) == [(True, True, True)]
    finally:
        release.set()
        holder.join()

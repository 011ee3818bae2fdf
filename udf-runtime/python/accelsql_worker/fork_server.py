"""The fork server: warm worker starts."""

import os
import sys
from array import array

from . import state, values
from .wire import _I32

# The fork server: warm worker starts
#
# Started by the engine as `python3 -c <bootstrap> <dir> --accelsql-fork-server` with the workers'
# own environment, a SOCK_SEQPACKET control socket as fd 0 and stdout, stderr on /dev/null (a
# worker's stderr is its own pipe, passed with its fork request). It imports what a
# worker needs (and numpy, when importable), says READY (b"R" + description), then forks one
# fresh worker per request. Requests on the control socket:
#   b"F" with three fds (SCM_RIGHTS): the worker's protocol socket, its stderr and a status pipe.
#        On the status pipe the server writes b"P" + i32 pid once forked (or b"E" + reason),
#        and b"X" + i32 wait status once the worker has exited, its process group has been
#        killed and it has been reaped.
#   b"K" + i32 pid: kill that worker's process group now (only while it is still unreaped).
#   b"Q": which spare is waiting; the server answers on the control socket b"S" + i32 pid (0:
#        none).
# A spare: the server keeps one worker forked ahead of requests, waiting on a socket of its own
# for a request's protocol socket and stderr, its environment restored and numpy reseeded
# already. A fork request is handed to the spare when there is one (so no fork() is on the
# request's path), else served by a fork as before. A spare has run no script code: it is what a
# fork at request time would be, forked earlier. The first spare is forked once the server is
# ready; the next one as soon as a spare has been handed a request (it gets ready while that
# worker starts), and one whenever a worker or a spare has ended and none waits.
# End of file on the control socket (the engine is gone or done with the server): the workers'
# process groups are killed and reaped, and the server exits. The server and each worker die
# with their parent (PR_SET_PDEATHSIG): the engine's death ends the server and so its workers.
#
# A forked worker is the same as a freshly started one to the script: a new process in a process
# group of its own, the same environment (the server is started with it), module-level code run
# once, its own random state (random reseeds itself after fork; numpy's global RandomState is
# reseeded here), its own cleanup().

FORK_SERVER_ARG = "--accelsql-fork-server"
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _warm_up():
    """Imports what workers would import anyway: the worker's lazily used standard modules, and
    numpy (run_batch columns) when it imports cleanly; a failed import leaves no trace, so that a
    worker importing it gets the same error as a fresh process would."""
    import decimal, keyword, linecache, traceback, types  # noqa: F401

    before = set(sys.modules)
    try:
        import numpy

        values._NUMPY = numpy
    except Exception:
        for name in set(sys.modules) - before:
            del sys.modules[name]


def _ignore_signal(signum, frame):
    pass


def _close_quietly(fd):
    try:
        os.close(fd)
    except OSError:
        pass


def _write_quietly(fd, data):
    try:
        os.write(fd, data)
    except OSError:
        pass


def _serve_forks():
    """Runs the fork server; returns only in a forked worker, ready to run main()."""
    import select
    import signal
    import socket

    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        prctl.restype = ctypes.c_int
    except Exception as e:
        sys.stderr.write("accelsql fork server: prctl is not available (%s)\n" % (e,))
        sys.stderr.flush()
        os._exit(71)
    ctl = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    state.forget_worker_dir()
    environ = dict(os.environ)
    _warm_up()
    # What the server holds now outlives every worker: keep the collector of a worker from
    # walking it (which would write to, and so copy, every page of it after the fork).
    import gc

    gc.collect()
    gc.freeze()
    server = os.getpid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    # A handler (not SIG_IGN, which would reap children unasked): SIGCHLD wakes up select().
    signal.signal(signal.SIGCHLD, _ignore_signal)
    children = {}  # pid -> status pipe

    def reap():
        for pid in list(children):
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
                children.pop(pid, None)
            if info is None or not info.si_pid:
                continue
            try:
                os.killpg(pid, signal.SIGKILL)  # what it started; its group id is still reserved
            except OSError:
                pass
            _, status = os.waitpid(pid, 0)
            fd = children.pop(pid)
            _write_quietly(fd, b"X" + _I32.pack(status))
            _close_quietly(fd)

    def leave_server(extra_fds):
        """In a new child: drops what belongs to the server, in a process group of its own that
        dies with the server."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in [wake_r, wake_w] + extra_fds + list(children.values()):
            _close_quietly(fd)
        ctl.close()
        try:
            os.setpgid(0, 0)
        except OSError:
            pass
        if prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != server:
            os._exit(71)
        # Orphans of the worker's children stay its descendants (counted, and killed with it).
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def become_worker(sock, err, status):
        leave_server([status])
        adopt(sock, err)

    def own_state():
        """What a new worker makes its own: the server's environment (as it was started) and
        numpy's global random state, reseeded. A spare does this while it waits: both first
        write to pages shared with the server since the fork (about 2 ms of copying in all), so
        that a statement's start does not wait for it."""
        if os.environ != environ:
            os.environ.clear()
            os.environ.update(environ)
        nprandom = sys.modules.get("numpy.random")
        if nprandom is not None:
            try:
                nprandom.seed()
            except Exception:
                pass

    def adopt(sock, err, owned=False):
        """Makes `sock` the worker's protocol socket (fd 0) and `err` its stdout and stderr (and
        the process's state its own, unless `owned` says it is already)."""
        os.dup2(sock, 0)
        os.dup2(err, 2)
        os.dup2(err, 1)
        for fd in (sock, err):
            if fd > 2:
                os.close(fd)
        if not owned:
            own_state()

    spare = []  # [pid, the server's end of its socket] while a spare waits

    def flush_quietly():
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except Exception:
            pass

    def fork_spare():
        """Forks the spare; returns True in the spare once a request made it a worker."""
        try:
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        except OSError:
            return False
        flush_quietly()
        try:
            pid = os.fork()
        except OSError:
            ours.close()
            theirs.close()
            return False
        if pid == 0:
            try:
                ours.close()
                leave_server([])
                own_state()
                space = socket.CMSG_SPACE(2 * _I32.size)
                msg, anc, _flags, _addr = theirs.recvmsg(16, space)
                got = array("i")
                for level, kind, data in anc:
                    if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                        got.frombytes(data[: len(data) - len(data) % got.itemsize])
                theirs.close()
                if msg[:1] != b"F" or len(got) != 2:
                    os._exit(0)  # let go unused (the server ended, or killed it)
                adopt(got[0], got[1], owned=True)
            except BaseException:
                os._exit(71)
            return True
        theirs.close()
        try:
            os.setpgid(pid, pid)  # as the child does: whoever runs first
        except OSError:
            pass
        spare[:] = [pid, ours]
        return False

    def end_spare():
        """Kills and reaps the spare, if any."""
        if spare:
            pid, ours = spare
            del spare[:]
            ours.close()
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass

    def reap_spare():
        """Reaps the spare if it died (the caller forks the next one)."""
        if spare:
            try:
                done, _ = os.waitpid(spare[0], os.WNOHANG)
            except ChildProcessError:
                done = spare[0]
            if done:
                spare[1].close()
                try:
                    os.killpg(spare[0], signal.SIGKILL)
                except OSError:
                    pass
                del spare[:]

    def hand_to_spare(sock, err):
        """Gives a request's socket and stderr to the spare; its pid, or None if it is gone."""
        if not spare:
            return None
        pid, ours = spare
        try:
            ours.sendmsg([b"F"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array("i", [sock, err]))])
        except OSError:
            end_spare()
            return None
        del spare[:]
        ours.close()
        return pid

    desc = "%s %s (%s)" % (sys.implementation.name, sys.version.split()[0], sys.executable)
    ctl.sendall(b"R" + desc.encode("utf-8", "replace"))
    if fork_spare():
        return
    fd_space = socket.CMSG_SPACE(3 * _I32.size)
    while True:
        try:
            ready = select.select([ctl, wake_r], [], [])[0]
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                while os.read(wake_r, 512):
                    pass
            except (BlockingIOError, InterruptedError):
                pass
            reap()
            reap_spare()
            if not spare and fork_spare():
                return
        if ctl not in ready:
            continue
        try:
            msg, anc, _flags, _addr = ctl.recvmsg(64, fd_space)
        except InterruptedError:
            continue
        except OSError:
            break
        fds = array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        fds = fds.tolist()
        if not msg:
            for fd in fds:
                _close_quietly(fd)
            break
        if msg[:1] == b"F" and len(fds) == 3:
            sock, err, status = fds
            pid = hand_to_spare(sock, err)
            if pid is not None:
                _close_quietly(sock)
                _close_quietly(err)
                children[pid] = status
                _write_quietly(status, b"P" + _I32.pack(pid))
                # The next spare at once: it gets ready beside the worker that just started
                # (which mostly waits for the engine), so that the next request finds it ready.
                if fork_spare():
                    return
                continue
            flush_quietly()
            try:
                pid = os.fork()
            except OSError as e:
                _write_quietly(status, b"E" + str(e).encode("utf-8", "replace")[:200])
                for fd in fds:
                    _close_quietly(fd)
                continue
            if pid == 0:
                try:
                    become_worker(sock, err, status)
                except BaseException:
                    os._exit(71)
                return
            try:
                os.setpgid(pid, pid)  # as the child does: whoever runs first
            except OSError:
                pass
            _close_quietly(sock)
            _close_quietly(err)
            children[pid] = status
            _write_quietly(status, b"P" + _I32.pack(pid))
        elif msg[:1] == b"Q":
            try:
                ctl.send(b"S" + _I32.pack(spare[0] if spare else 0), socket.MSG_DONTWAIT)
            except OSError:
                pass
            for fd in fds:
                _close_quietly(fd)
        elif msg[:1] == b"K" and len(msg) == 5:
            pid = _I32.unpack_from(msg, 1)[0]
            if pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            for fd in fds:
                _close_quietly(fd)
        else:
            for fd in fds:
                _close_quietly(fd)
    # The engine is done with this server: end its spare and workers, then itself.
    end_spare()
    for pid in list(children):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in list(children):
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            continue
        _write_quietly(children[pid], b"X" + _I32.pack(status))
    os._exit(0)


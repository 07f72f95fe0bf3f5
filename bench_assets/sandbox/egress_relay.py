"""Loopback relay run *inside* the sandbox in front of an agent (stdlib only; never imported).

Usage: ``python -I -S egress_relay.py --socket PATH [--export NAME]... -- ARGV...``

The sandbox has its own network namespace with nothing but loopback, so the agent cannot open a
connection to any host. This relay listens on ``127.0.0.1:<ephemeral port>`` inside that
namespace and pipes every accepted connection, byte for byte, to the Unix socket ``PATH``: the
harness's egress proxy, which lives outside the sandbox and forwards only to the model API. It
then runs ``ARGV`` with each ``--export`` variable set to ``http://127.0.0.1:<port>``, passes
standard input/output through, and exits with the agent's exit status.
"""

import argparse
import os
import signal
import socket
import subprocess
import sys
import threading


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _bridge(client: socket.socket, path: str) -> None:
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        client.close()
        upstream.close()
        return
    back = threading.Thread(target=_pump, args=(upstream, client), daemon=True)
    back.start()
    _pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=_bridge, args=(client, path), daemon=True).start()


def main(args: list[str]) -> int:
    """Start the relay, run the agent under it, return the agent's exit status."""
    if "--" not in args:
        sys.stderr.write("egress_relay: usage: --socket PATH [--export NAME]... -- ARGV...\n")
        return 2
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="egress_relay")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--export", action="append", default=[])
    opts = parser.parse_args(args[:split])
    argv = args[split + 1 :]
    if not argv:
        sys.stderr.write("egress_relay: no command to run\n")
        return 2
    listener = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    threading.Thread(target=_serve, args=(listener, opts.socket), daemon=True).start()
    env = dict(os.environ)
    for name in opts.export:
        env[name] = url
    try:
        child = subprocess.Popen(argv, env=env)
    except OSError as e:
        sys.stderr.write(f"egress_relay: cannot start {argv[0]!r}: {e}\n")
        return 127
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, frame: child.send_signal(signum))
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

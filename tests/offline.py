"""Run code in a fresh Python process that cannot reach the network: what "offline after install" means, tested.

    result = run_offline("from mha_lib.llm.smollm2 import load_smollm2; load_smollm2()", env)

Every socket connection and name lookup raises ``OSError("network disabled")`` and is counted; the code can print
``len(attempts)`` to show that none was tried (a library that catches the error and goes on would hide it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

NO_NETWORK = textwrap.dedent("""
    import socket
    attempts = []
    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network disabled")
    class NoNetwork(socket.socket):  # still a class (ssl subclasses it), but it cannot connect
        connect = connect_ex = refuse
    socket.socket = NoNetwork
    socket.create_connection = refuse
    socket.getaddrinfo = refuse
""")


def run_offline(code: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """``code`` (dedented) after ``NO_NETWORK``, in ``sys.executable`` with ``env``; stdout and stderr as text."""
    return subprocess.run([sys.executable, "-c", NO_NETWORK + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=timeout)

"""redis-server processes for the tests and the benchmark: each on a free loopback port (and a
unix socket), with no persistence (``--save '' --appendonly no``), its files in a private
temporary folder; every wait bounded, and stopped (SIGKILL, after a SIGCONT) by ``stop()``,
which the fixtures call in a ``finally``. Debian's package (``apt-get install redis-server``)
provides it; ci/check.d/20-python.sh installs it when it is missing."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

#: The longest a start, a restart or a command waits.
WAIT_S = 10.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process: ``url``, ``unix_url``, ``cli(...)``, and the faults the
    tests inject (``pause``/``resume``: SIGSTOP/SIGCONT; ``kill``; ``restart``). With
    ``tls=True`` it also serves TLS on ``tls_url``, with a certificate for 127.0.0.1 signed by
    a certificate authority of its own, ``ca`` (made with the openssl command)."""

    def __init__(self, *extra: str, tls: bool = False) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.exe = exe
        self.extra = extra
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sluicegate-redis-"))
        self.socket = self.dir / "redis.sock"
        self.ca = self.dir / "ca.pem"
        self.tls_port = free_port() if tls else None
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            if tls:
                self.make_certificates()
            self.start()
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    @property
    def unix_url(self) -> str:
        return f"redis+unix://{self.socket}"

    @property
    def tls_url(self) -> str:
        return f"rediss://127.0.0.1:{self.tls_port}"

    def make_certificates(self) -> None:
        """A certificate authority (ca.pem) and the server's certificate for 127.0.0.1."""
        d = self.dir

        def openssl(*args: str) -> None:
            subprocess.run(["openssl", *args], cwd=d, capture_output=True, check=True, timeout=WAIT_S * 3)

        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sluicegate test CA",
                "-keyout", "ca.key", "-out", "ca.pem")  # fmt: skip
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
                "-out", "server.csr")  # fmt: skip
        (d / "ext").write_text("subjectAltName=IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-days", "2", "-extfile", "ext", "-out", "server.pem")  # fmt: skip

    def start(self) -> None:
        """Starts the process (on the same port and socket after a kill) and waits, at most
        WAIT_S seconds, until it answers PING."""
        command = [
            self.exe,
            "--port", str(self.port), "--bind", "127.0.0.1",
            "--unixsocket", str(self.socket), "--unixsocketperm", "700",
            "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--dir", str(self.dir), "--loglevel", "warning", "--logfile", "",
            *self.extra,
        ]  # fmt: skip
        if self.tls_port is not None:
            command += [
                "--tls-port", str(self.tls_port), "--tls-cert-file", str(self.dir / "server.pem"),
                "--tls-key-file", str(self.dir / "server.key"), "--tls-ca-cert-file", str(self.ca),
                "--tls-auth-clients", "no",
            ]  # fmt: skip
        self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + WAIT_S
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}")
            try:
                if self.cli("PING", timeout=1.0) == "PONG":
                    return
            except (subprocess.SubprocessError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server on port {self.port} did not answer in {WAIT_S} s")
            time.sleep(0.02)

    def cli(self, *args: str, timeout: float = WAIT_S) -> str:
        """A command's reply, through redis-cli (bounded by `timeout`)."""
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), *args],
            capture_output=True, text=True, timeout=timeout, check=True,
        )  # fmt: skip
        return out.stdout.strip()

    def keys(self, pattern: str = "*") -> list[str]:
        return sorted(k for k in self.cli("--scan", "--pattern", pattern).splitlines() if k)

    def dbsize(self) -> int:
        return int(self.cli("DBSIZE"))

    def pause(self) -> None:
        """SIGSTOP: the server keeps its connections but answers nothing. Returns once the
        process is stopped (a signal is delivered asynchronously)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        stat = Path(f"/proc/{self.proc.pid}/stat")
        deadline = time.monotonic() + WAIT_S
        # The state is the field after the command's closing parenthesis: T when stopped.
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
            if time.monotonic() > deadline:
                raise RuntimeError(f"redis-server {self.proc.pid} did not stop in {WAIT_S} s")
            time.sleep(0.001)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL, and waits for the process (its keys are gone: no persistence)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(timeout=WAIT_S)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

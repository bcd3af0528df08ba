"""What the S3 tests share: a real moto_server on a free 127.0.0.1 port (KVSTREAM_MOTO_SERVER, else
moto_server on PATH; the tests skip without one), with authentication on or off, the fault proxy
tools/harness/s3fault.py in front of it, and boto3 clients without retries (each fault is seen)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
S3FAULT = os.path.join(ROOT, "tools", "harness", "s3fault.py")
S3CLI = os.path.join(ROOT, "tools", "harness", "s3cli.py")
TEST_KEY = ("kvstream-test", "kvstream-test-secret")


def moto_server_path():
    return os.environ.get("KVSTREAM_MOTO_SERVER") or shutil.which("moto_server")


def wait_for_line(proc, path, pattern, seconds=30):
    """The first match of PATTERN in the file PATH that PROC writes, within SECONDS."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    with open(path, errors="replace") as f:
        raise RuntimeError(f"{pattern!r} never appeared in {path}:\n{f.read()[-2000:]}")


class Moto:
    """moto_server -p 0; with auth, every request after start needs a valid SigV4 signature by an
    IAM user allowed the action (an admin is made first, while authentication is still off)."""

    def __init__(self, workdir, auth=False):
        binary = moto_server_path()
        if not binary:
            pytest.skip("no moto_server (KVSTREAM_MOTO_SERVER, or deploy/python-env.sh --s3)")
        self.log = os.path.join(workdir, f"moto-{os.getpid()}-{time.monotonic_ns()}.log")
        env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", "0"], stdout=out, stderr=out, env=env)
        port = int(wait_for_line(self.proc, self.log, r"Running on http://127\.0\.0\.1:(\d+)").group(1))
        self.endpoint = f"http://127.0.0.1:{port}"
        self.key = TEST_KEY
        for _ in range(100):
            try:
                urllib.request.urlopen(self.endpoint + "/", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                time.sleep(0.05)
        if auth:
            out = subprocess.run([sys.executable, S3CLI, "--endpoint", self.endpoint, "iam-key", "admin", "--all"],
                                 check=True, capture_output=True, text=True, env=self.cli_env()).stdout.split()
            self.key = (out[0], out[1])
            subprocess.run([sys.executable, S3CLI, "--endpoint", self.endpoint, "auth-on"], check=True)

    def cli_env(self):
        return dict(os.environ, S3_ACCESS_KEY_ID=self.key[0], S3_SECRET_ACCESS_KEY=self.key[1])

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Proxy:
    """s3fault.py in front of UPSTREAM: endpoint (the proxied port), control(CMD...) and stats()."""

    def __init__(self, workdir, upstream, *args):
        self.log = os.path.join(workdir, f"s3fault-{time.monotonic_ns()}.log")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([sys.executable, S3FAULT, "--upstream", upstream, *args],
                                         stdout=out, stderr=out)
        m = wait_for_line(self.proc, self.log, r"s3fault: listening 127\.0\.0\.1:(\d+) control 127\.0\.0\.1:(\d+)")
        self.port, self.control_port = int(m.group(1)), int(m.group(2))
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def control(self, path, port=None, method="POST"):
        """The state after /__fault__/PATH (a dict); raises urllib.error.HTTPError on a refusal."""
        url = f"http://127.0.0.1:{port or self.control_port}/__fault__/{path}"
        req = urllib.request.Request(url, data=b"" if method == "POST" else None, method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def stats(self):
        return self.control("stats", method="GET")

    def counters(self):
        return self.stats()["counters"]

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def s3_client(endpoint, key=TEST_KEY, read_timeout=10, **config):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key[0], aws_secret_access_key=key[1],
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}, connect_timeout=2,
                      read_timeout=read_timeout, s3={"addressing_style": "path"}, **config))


@pytest.fixture(scope="session")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("s3"))


@pytest.fixture(scope="session")
def moto(workdir):
    server = Moto(workdir)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def moto_auth(workdir):
    server = Moto(workdir, auth=True)
    yield server
    server.stop()


@pytest.fixture
def proxy(workdir, moto):
    p = Proxy(workdir, moto.endpoint, "--seed", "11")
    yield p
    p.stop()

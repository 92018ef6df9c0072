#!/usr/bin/python3
"""What a user installs, installed as a user would, offline, into clean
places, and used against a real `sqlq serve` (SQLQ_BIN):

- python: the sdist and the wheel of clients/python (scripts/dist.sh
  python), each `pip install --no-index`ed into a fresh virtual environment
  of Debian's python3; a program run there, outside the source tree, sends,
  claims and acks, and a Worker handles messages.
- node: the `npm pack` tarball of clients/node (scripts/dist.sh node),
  `npm install --offline`ed with an empty npm cache into an empty project;
  a program there does the same with the client and its Worker.

Both check the checksums scripts/dist.sh wrote (sha256sum -c SHA256SUMS)
and that the program loaded the installed package, not the source tree.
The release tarball of sqlq itself is tested by scripts/package-test.sh
(it needs the `package` preset's build).

    artifacts_test.py python|node
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from serve import Serve  # noqa: E402

SOURCE_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON = "/usr/bin/python3"  # Debian's, whose venv and pip the user has


def run(cmd, **kw):
    """Runs cmd; its stdout. Fails the test with its output on an error."""
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)}: exit {p.returncode}\n"
                             f"{p.stdout}\n{p.stderr}")
    return p.stdout


def offline_env(home):
    """The environment of a user with no network configuration of ours:
    nothing of the test's PYTHON*, PIP_*, npm_* or SQLQ_* settings, and a
    home of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTHON", "PIP_", "npm_", "NPM_", "SQLQ_",
                                "NODE_"))}
    env["HOME"] = home
    # No proxy either: whatever reaches for the network fails at once.
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(k, None)
    return env


class Artifacts(unittest.TestCase):
    """The artifacts of one kind, built once by scripts/dist.sh; for each
    test a temporary directory and a server."""

    kind = None

    @classmethod
    def setUpClass(cls):
        cls.dist_dir = tempfile.mkdtemp(prefix=f"sqlq-{cls.kind}-dist.")
        cls.dist = os.path.join(cls.dist_dir, "dist")
        run([os.path.join(SOURCE_DIR, "scripts", "dist.sh"), cls.kind,
             "--out", cls.dist])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dist_dir)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=f"sqlq-{self.kind}-artifacts.")
        self.addCleanup(shutil.rmtree, self.tmp)
        # What a user does after a download: check the checksums.
        run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=self.dist)
        self.home = os.path.join(self.tmp, "home")
        os.mkdir(self.home)
        self.env = offline_env(self.home)
        self.server = Serve(os.environ["SQLQ_BIN"],
                            "sqlite:" + os.path.join(self.tmp, "sqlq.db"),
                            self.tmp)
        self.addCleanup(self.server.stop)

    def artifact(self, suffix):
        found = [os.path.join(d, f) for d, _, files in os.walk(self.dist)
                 for f in files if f.endswith(suffix)]
        self.assertEqual(len(found), 1, f"one *{suffix} in {self.dist}: {found}")
        return found[0]


PY_PROGRAM = textwrap.dedent("""\
    import sys, threading
    import sqlq
    from sqlq import Client, Worker, AlreadyExists

    print("module", sqlq.__file__)
    client = Client(sys.argv[1])
    q = client.queue("installed")
    try:
        q.create(max_attempts=3)
    except AlreadyExists:
        pass
    q.send("one")
    got = q.claim(max=1)
    assert [m.payload for m in got] == ["one"], got
    q.ack(got[0].receipt)
    for i in range(3):
        q.send({"n": i})
    seen, done = [], threading.Event()
    def handle(m):
        seen.append(m.payload["n"])
        if len(seen) == 3:
            done.set()
    w = Worker(client, "installed", handle, concurrency=2)
    w.start()
    assert done.wait(60), seen
    w.stop()
    assert w.join(60)
    print("handled", sorted(seen))
""")


class Python(Artifacts):
    kind = "python"

    def install(self, what, venv_name):
        venv = os.path.join(self.tmp, venv_name)
        # A clean environment: Debian's python3 -m venv, no system packages.
        run([PYTHON, "-m", "venv", venv], env=self.env)
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index",
             "--no-cache-dir", "--disable-pip-version-check", what],
            env=self.env, cwd=self.home)
        return venv

    def check(self, venv):
        program = os.path.join(self.home, "app.py")
        with open(program, "w") as f:
            f.write(PY_PROGRAM)
        out = run([os.path.join(venv, "bin", "python"), program,
                   self.server.url], env=self.env, cwd=self.home)
        module = out.split("module ", 1)[1].split("\n", 1)[0]
        self.assertTrue(module.startswith(venv + "/"),
                        f"sqlq was loaded from {module}, not {venv}")
        self.assertIn("handled [0, 1, 2]", out)

    def test_wheel(self):
        wheel = self.artifact("-py3-none-any.whl")
        self.check(self.install(wheel, "venv-wheel"))

    def test_sdist(self):
        sdist = self.artifact(".tar.gz")
        # What the sdist holds: the package, its metadata, no tests or caches.
        names = run(["tar", "-tzf", sdist]).split()
        top = os.path.basename(sdist)[:-len(".tar.gz")]
        for want in ("PKG-INFO", "pyproject.toml", "README.md",
                     "sqlq/__init__.py", "sqlq/client.py", "sqlq/aio.py",
                     "sqlq/py.typed"):
            self.assertIn(f"{top}/{want}", names)
        self.assertFalse([n for n in names if "__pycache__" in n or "/tests/" in n],
                         names)
        # pip builds it with the setuptools of the environment: Debian's
        # (python3-setuptools, python3-wheel), seen through a venv made with
        # --system-site-packages, as nothing may be fetched.
        venv = os.path.join(self.tmp, "venv-sdist")
        run([PYTHON, "-m", "venv", "--system-site-packages", venv], env=self.env)
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index",
             "--no-cache-dir", "--disable-pip-version-check",
             "--no-build-isolation", sdist], env=self.env, cwd=self.home)
        self.check(venv)


NODE_PROGRAM = textwrap.dedent("""\
    import { Client, Worker } from "sqlq";
    const client = new Client(process.argv[2]);
    const q = client.queue("installed");
    await q.create({ maxAttempts: 3 }).catch((e) => { if (e.code !== "already_exists") throw e; });
    await q.send("one");
    const got = await q.claim({ max: 1 });
    if (got.length !== 1 || got[0].payload !== "one") throw new Error(JSON.stringify(got));
    await q.ack(got[0].receipt);
    for (let n = 0; n < 3; n++) await q.send({ n });
    const seen = [];
    let done;
    const all = new Promise((resolve) => { done = resolve; });
    const worker = new Worker(client, "installed", async (m) => {
      seen.push(m.payload.n);
      if (seen.length === 3) done();
    }, { concurrency: 2, logger: { info() {}, warn() {}, error() {} } });
    const running = worker.run();
    const timer = setTimeout(() => { throw new Error("handled " + seen); }, 60000);
    await all;
    clearTimeout(timer);
    worker.stop();
    await running;
    console.log("handled", JSON.stringify(seen.sort()));
""")


class Node(Artifacts):
    kind = "node"

    def test_tarball(self):
        tgz = self.artifact(".tgz")
        names = sorted(run(["tar", "-tzf", tgz]).split())
        for want in ("package/package.json", "package/index.js",
                     "package/index.d.ts", "package/README.md",
                     "package/src/client.js", "package/src/worker.js"):
            self.assertIn(want, names)
        self.assertFalse([n for n in names if n.startswith(
            ("package/test/", "package/node_modules/"))], names)
        app = os.path.join(self.tmp, "app")
        os.mkdir(app)
        with open(os.path.join(app, "package.json"), "w") as f:
            f.write('{"name":"app","private":true,"type":"module"}\n')
        # Offline, with an empty cache: the package must need nothing else.
        run(["npm", "install", "--offline", "--no-audit", "--no-fund",
             "--cache", os.path.join(self.tmp, "npm-cache"), tgz],
            env=self.env, cwd=app)
        # The package alone, unpacked (a directory install would be a
        # symbolic link to the source).
        modules = os.path.join(app, "node_modules")
        self.assertEqual([n for n in os.listdir(modules) if not n.startswith(".")],
                         ["sqlq"])
        self.assertFalse(os.path.islink(os.path.join(modules, "sqlq")))
        with open(os.path.join(app, "main.mjs"), "w") as f:
            f.write(NODE_PROGRAM)
        out = run(["node", "main.mjs", self.server.url], env=self.env, cwd=app)
        self.assertIn("handled [0,1,2]", out)


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in ("python", "node"):
        sys.exit(__doc__)
    kind = sys.argv.pop(1)
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(
        Python if kind == "python" else Node)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)

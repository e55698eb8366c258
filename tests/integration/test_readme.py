"""The README's quick start, run as written: its first shell block is taken from README.md
(not copied here), pointed at a test daemon that reaches no registry, and run by bash with
errexit; every curl in it fails the run on an HTTP error. What a new user types first keeps
working (issue 14)."""
import os
import re
import subprocess

import httpx

from conftest import ROOT

PRELUDE = r"""set -euo pipefail
# every HTTP error fails the script (a -f the block asks for itself is kept as it is)
curl() {
    local rc=0
    case " $* " in
    *" -f "*|*" -sf "*) command curl --max-time 600 "$@" || rc=$? ;;
    *) command curl --fail-with-body --max-time 600 "$@" || rc=$? ;;
    esac
    echo
    return $rc
}
"""


def quick_start_block():
    text = open(os.path.join(ROOT, "README.md")).read()
    section = text[text.index("\n## Quick start\n"):]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, "no ```sh block under ## Quick start"
    return m.group(1)


def test_readme_quick_start_runs_as_written(tpl_daemon, tmp_path):
    d = tpl_daemon
    block = quick_start_block()
    lines = block.split("\n")
    # the two lines a user types by hand: starting the daemon, pasting its token
    assert lines[0].startswith("make run"), lines[0]
    assert lines[1].startswith("export TOKEN=sbx_"), lines[1]
    body = "\n".join(lines[2:]).replace("localhost:8000", f"127.0.0.1:{d.port}")
    assert "localhost:" not in body
    script = tmp_path / "quick-start.sh"
    script.write_text(PRELUDE + body)
    admin = httpx.Client(base_url=d.url, timeout=120,
                         headers={"Authorization": f"Bearer {d.admin_token}"})
    before = {s["id"] for s in admin.get("/sandboxes").json()["sandboxes"]}
    try:
        p = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900,
                           env={"PATH": os.environ["PATH"], "TOKEN": d.admin_token,
                                "HOME": str(tmp_path)})
        out = p.stdout
        print(out)  # the transcript, shown when the test fails
        assert p.returncode == 0, (p.returncode, out[-4000:], p.stderr[-4000:])
        # what the comments in the block promise
        assert "42\\n2\\ngit version" in out and "root ok" in out, out[:2000]
        assert out.count("remember me") >= 2          # read back, and in the fork
        assert '"tag": "counter"' in out or '"tag":"counter"' in out
        assert '"memory_preserved": true' in out or '"memory_preserved":true' in out
        assert re.search(r'"text":\s*"42"', out), out[-3000:]   # the kernel's answer
        assert "dev\\n1\\n" in out                    # ENV and COPY of the Dockerfile
        made = [s for s in admin.get("/sandboxes").json()["sandboxes"] if s["id"] not in before]
        assert len(made) >= 5, [s["id"] for s in made]
        # the block cleaned up after itself: the rows stay, terminated
        assert {s["status"] for s in made} == {"terminated"}, [(s["id"], s["status"])
                                                               for s in made]
    finally:
        for s in admin.get("/sandboxes").json()["sandboxes"]:
            if s["id"] not in before and s["status"] != "terminated":
                admin.delete(f"/sandboxes/{s['id']}")
        admin.delete("/templates/myenv")
        admin.delete("/snapshots/warm")
        admin.close()

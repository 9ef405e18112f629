"""Load test of `argus serve`: concurrent HTTP clients committing state.

Starts `argus serve` as a real process on 127.0.0.1 over a fresh workspace with
one state, ``{"counters": {"c0": 0, ...}}``. Each client (a thread with its own
HTTP connection) loops for the duration: GET the state (its ETag), PATCH its
own counter + 1 with ``If-Match``; on 412 (another client committed first) it
reads again and retries. Every few rounds it also reads a session's events.
At the end the served counters must equal the commits each client saw
succeed, and the version must be 1 + their sum: nothing lost, nothing doubled.

Usage::

    .venv/bin/python benchmarks/bench_server.py                  # 20 clients, 30 s
    .venv/bin/python benchmarks/bench_server.py --write          # and results_server.md
    .venv/bin/python benchmarks/bench_server.py --clients 5 --seconds 5
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import httpx

import argus_lab as al

HERE = Path(__file__).parent
PATCH = "application/json-patch+json"


@al.tool
def add(a: int, b: int) -> int:
    """A tool for the session whose events the clients read."""
    return a + b


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def client(
    url: str, token: str, me: int, end: float, lat: dict[str, list[float]]
) -> tuple[int, int]:
    """Returns (commits, conflicts)."""
    done = conflicts = rounds = 0
    key = f"c{me}"
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    ) as http:
        while time.monotonic() < end:
            t0 = time.perf_counter()
            r = http.get("/states/load")
            lat["GET state"].append(time.perf_counter() - t0)
            r.raise_for_status()
            n = r.json()["counters"][key]
            ops = [{"op": "replace", "path": f"/counters/{key}", "value": n + 1}]
            t0 = time.perf_counter()
            r = http.patch(
                "/states/load",
                content=json.dumps(ops),
                headers={"Content-Type": PATCH, "If-Match": r.headers["etag"]},
            )
            lat["PATCH state"].append(time.perf_counter() - t0)
            if r.status_code == 412:
                conflicts += 1
            else:
                r.raise_for_status()
                done += 1
            rounds += 1
            if rounds % 5 == 0:
                t0 = time.perf_counter()
                http.get("/sessions/load-session/events", params={"limit": 50})
                lat["GET events"].append(time.perf_counter() - t0)
    return done, conflicts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws = al.Workspace(root)
        plan = {
            "goal": "g",
            "tasks": [{"id": "a", "tool": "add", "args": {"a": 1, "b": 2}}],
        }
        s = ws.new_session(plan=plan, tools=[add], name="load-session")
        s.run()
        s.close()
        ws.close()
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "argus_lab.cli",
                "-w",
                str(root),
                "serve",
                "--port",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/health").status_code == 200:
                        break
                except httpx.TransportError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.1)
            token = (root / "server-token").read_text().strip()
            h = {"Authorization": f"Bearer {token}"}
            doc = {"counters": {f"c{i}": 0 for i in range(args.clients)}}
            httpx.post(url + "/states/load", json=doc, headers=h).raise_for_status()
            lat: dict[str, list[float]] = defaultdict(list)
            results: dict[int, tuple[int, int]] = {}
            end = time.monotonic() + args.seconds

            def run(i: int) -> None:
                results[i] = client(url, token, i, end, lat)

            threads = [
                threading.Thread(target=run, args=(i,)) for i in range(args.clients)
            ]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.monotonic() - t0
            r = httpx.get(url + "/states/load", headers=h)
            final, version = r.json()["counters"], int(r.headers["x-argus-version"])
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    commits = sum(d for d, _ in results.values())
    conflicts = sum(c for _, c in results.values())
    lost = sum(abs(final[f"c{i}"] - results[i][0]) for i in range(args.clients))
    ok = lost == 0 and version == 1 + commits
    n_req = sum(len(v) for v in lat.values())
    lines = [
        f"{args.clients} clients for {args.seconds:.0f} s against `argus serve` on "
        f"127.0.0.1 (one uvicorn worker), load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"- requests: {n_req:,} ({n_req / wall:.0f}/s); commits: {commits:,} "
        f"({commits / wall:.1f}/s); 412 conflicts (retried): {conflicts:,}",
        f"- lost or doubled updates: {lost}; final version {version} = 1 + commits: "
        f"{'yes' if version == 1 + commits else 'NO'}",
        "",
        "| request | n | p50 ms | p99 ms |",
        "|---|---|---|---|",
    ]
    for name, v in sorted(lat.items()):
        q = statistics.quantiles(v, n=100)
        lines.append(
            f"| {name} | {len(v):,} | {q[49] * 1000:.1f} | {q[98] * 1000:.1f} |"
        )
    text = "\n".join(lines)
    print(text)
    if args.write:
        (HERE / "results_server.md").write_text(
            "# `argus serve` under load\n\n"
            "`.venv/bin/python benchmarks/bench_server.py --write`\n\n" + text + "\n"
        )
    if not ok:
        raise SystemExit("updates were lost or doubled")


if __name__ == "__main__":
    main()

"""The checks, step summaries and report of scripts/gpu-check.sh (standard library only: it runs
under the development machine's Python and under the GPU machine's).

Each subcommand that judges something writes one check, a JSON object
{"name", "status": passed|failed|skipped|incomplete, "detail", "data"}, to --write and prints one
line; `summarize` folds a step's checks into its summary.json; `report` turns the summaries that
GPU calls returned into the markdown of docs/benchmarks-gpu.md; `validate` checks that a report
has every section.

  gpu_check.py gtest NAME --json J --log L --rc RC --write OUT
  gpu_check.py curve NAME --a A/metrics.jsonl --b B/metrics.jsonl --label-a cuda --label-b cpu
      --steps 50 --tol 1e-2 [--min-drop 0.5] [--log-a L --rc-a RC --device-a TEXT] [...-b]
      --write OUT
  gpu_check.py sanitizer NAME --tool memcheck --log SANITIZER_LOG --app-log L --rc RC --write OUT
  gpu_check.py bench-run MODEL.SIDE.json --write OUT
  gpu_check.py record NAME STATUS DETAIL [--data key=value]... --write OUT
  gpu_check.py summarize STEP DIR --device D --seconds S [--note TEXT]...
  gpu_check.py report RESULTS... (--output FILE | --into docs/benchmarks-gpu.md) [--peer P]
  gpu_check.py validate FILE
  gpu_check.py gpu-tests ROOT       the targets of every `gpu`-labelled ax_test under ROOT/tests
  gpu_check.py manifest FILE --bytes N --build DIR --tests [TEST...]   the bundle's MANIFEST.json
  gpu_check.py manifest-line FILE
"""

import argparse
import datetime
import glob
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile

STATUSES = ("passed", "failed", "skipped", "incomplete")

# The steps in the report's order: (step, heading, what it shows).
STEPS = (
    ("env", "Environment", "the GPU machine, its driver and the libraries ax found there"),
    ("tests", "GPU tests", "every `gpu`-labelled test binary (cuda_parity_test, "
     "nccl_communicator_test, ...)"),
    ("sanitize", "compute-sanitizer", "memcheck of short tiny-gpt, tiny-llama and tiny-t5 "
     "ax-train runs and a sampling run; racecheck and synccheck of a parity subset"),
    ("curves", "Loss curves", "GPU bf16 against `--device cpu-bf16` and GPU f32 "
     "(`train.precision=float32`) against `--device cpu`, tiny-gpt, tiny-llama and tiny-t5 "
     "(span corruption)"),
    ("parallel", "FSDP and tensor parallelism", "ax-launch over every GPU that answers (NCCL), "
     "against one process"),
    ("bench", "Benchmark", "bench/gpu_bench.sh: ax against PyTorch eager and torch.compile"),
)
BEGIN = "<!-- gpu-check report: begin (scripts/gpu-check.sh report writes what follows) -->"
END = "<!-- gpu-check report: end -->"


def write_check(path, name, status, detail, data=None):
    assert status in STATUSES, status
    check = {"name": name, "status": status, "detail": detail, "data": data or {}}
    if path:
        with open(path, "w") as f:
            json.dump(check, f, indent=1)
    print(f"  {status.upper():10} {name}: {detail}")
    return check


def last_line(path, pattern=None):
    """The last non-empty line of a log (matching pattern when given), or ''."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.rstrip() for line in f if line.strip()]
    except OSError:
        return ""
    if pattern:
        lines = [line for line in lines if re.search(pattern, line)]
    return lines[-1] if lines else ""


# ---- gtest -------------------------------------------------------------------------------------


def skip_reasons(log):
    """The distinct reasons gtest printed after 'Skipped' lines, in order."""
    reasons = []
    try:
        with open(log, errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return reasons
    for i, line in enumerate(lines[:-1]):
        if line.rstrip().endswith(": Skipped") and lines[i + 1].strip():
            reason = lines[i + 1].strip()
            if reason not in reasons:
                reasons.append(reason)
    return reasons


def gtest_check(name, json_path, log, rc):
    try:
        with open(json_path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        why = "timed out" if rc == 124 else f"exit {rc}"
        return "failed", f"{why}, no gtest result (crashed?): {last_line(log)}", {"rc": rc}
    passed, failed, skipped = [], [], []
    for suite in result.get("testsuites", []):
        for t in suite.get("testsuite", []):
            full = f"{suite['name']}.{t['name']}"
            if t.get("failures"):
                first = t["failures"][0].get("failure", "").strip().splitlines()
                failed.append(f"{full} ({' '.join(first[:2])[:300]})")
            elif t.get("result") == "SKIPPED":
                skipped.append(full)
            elif t.get("result") == "COMPLETED" and t.get("status") == "RUN":
                passed.append(full)
    data = {"passed": passed, "failed": failed, "skipped": skipped, "rc": rc,
            "skip_reasons": skip_reasons(log)}
    counts = f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped"
    if failed or rc != 0:
        detail = f"{counts}; exit {rc}" + (f"; failed: {'; '.join(failed)}" if failed else "")
        return "failed", detail, data
    if skipped:
        counts += f" ({'; '.join(data['skip_reasons']) or 'no reason printed'})"
    if not passed:
        return ("skipped" if skipped else "failed"), counts if skipped else "no test ran", data
    return "passed", counts, data


# ---- loss curves -------------------------------------------------------------------------------


def load_losses(path):
    """{step: loss} from a run's metrics.jsonl (training lines only)."""
    losses = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                r = json.loads(line)
                if "loss" in r:
                    losses[int(r["step"])] = float(r["loss"])
    return losses


def run_problem(label, metrics, log, rc, device):
    """Why a run cannot be compared, or ''."""
    if rc is not None and rc != 0:
        # The error line of ax-train or ax-launch, or gpu-check's own (a run that did not exit in
        # time: it names the file of what every thread was doing, launch() in gpu-check.sh).
        why = last_line(log, r"^(\[r\d+\] )?(ax-(train|launch)|gpu-check):") or last_line(log)
        return f"{label} run failed (exit {rc}): {why}"
    if device and log:
        try:
            with open(log, errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        if not re.search(r"^(\[r\d+\] )?device: " + re.escape(device) + r"(?![\w-])", text,
                         re.M):
            seen = re.findall(r"^(?:\[r\d+\] )?(device: .*)$", text, re.M)
            return f"{label} did not run on '{device}' ({seen[0] if seen else 'no device line'})"
    if not os.path.exists(metrics):
        return f"{label}: no {metrics}"
    return ""


def compare_curves(a, b, steps, tol, min_drop=None, label_a="a", label_b="b"):
    """(status, detail, data) for two {step: loss} maps: every step 1..steps present and finite
    in both, |a - b| <= tol * |b| at every step, and a's loss falling by min_drop (the mean of the
    first five steps against the last five) when given."""
    missing = [s for s in range(1, steps + 1) if s not in a or s not in b]
    if missing:
        return "failed", (f"steps missing: {label_a} has {len(a)}, {label_b} has {len(b)} of "
                          f"{steps} (first missing: {missing[0]})"), {}
    worst, worst_step = 0.0, 0
    for s in range(1, steps + 1):
        x, y = a[s], b[s]
        if not (math.isfinite(x) and math.isfinite(y)):
            return "failed", f"step {s}: loss {label_a} {x}, {label_b} {y}", {}
        rel = abs(x - y) / abs(y) if y != 0 else abs(x - y)
        if rel > worst:
            worst, worst_step = rel, s
    data = {"steps": steps, "tolerance": tol, "worst": worst, "worst_step": worst_step,
            label_a: [a[s] for s in range(1, steps + 1)],
            label_b: [b[s] for s in range(1, steps + 1)]}
    largest = (f"largest relative difference {worst:.2e} at step {worst_step}" if worst else
               "the same losses at every step")
    detail = (f"{steps} steps, {largest} (bound {tol:.0e}); {label_a} {a[1]:.4f} -> "
              f"{a[steps]:.4f}, {label_b} {b[1]:.4f} -> {b[steps]:.4f}")
    status = "passed" if worst <= tol else "failed"
    if min_drop is not None and steps >= 10:
        k = 5
        drop = sum(a[s] for s in range(1, k + 1)) / k - sum(
            a[s] for s in range(steps - k + 1, steps + 1)) / k
        data["drop"] = drop
        detail += f"; {label_a} fell {drop:.3f} (at least {min_drop})"
        if drop < min_drop:
            status = "failed"
    return status, detail, data


# ---- compute-sanitizer -------------------------------------------------------------------------


def sanitizer_check(tool, log, app_log, rc):
    """compute-sanitizer's verdict: its ERROR SUMMARY (or racecheck's RACECHECK SUMMARY) line and
    the program's exit status; the first few reports as evidence."""
    try:
        with open(log, errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    errors = None
    m = re.findall(r"=+ ERROR SUMMARY: (\d+) errors?", text)
    if m:
        errors = int(m[-1])
    race = re.findall(r"=+ RACECHECK SUMMARY: (\d+) hazards? displayed \((\d+) errors?, "
                      r"(\d+) warnings?\)", text)
    warnings = 0
    if race:
        errors = int(race[-1][1]) + (errors or 0)
        warnings = int(race[-1][2])
    reports = [line.strip("= ").strip() for line in text.splitlines()
               if re.match(r"=+ +(Invalid|Program hit|Error|Race|Barrier|Uninitialized|"
                           r"Warning|Leaked|Potential|Divergent)", line)]
    data = {"tool": tool, "errors": errors, "warnings": warnings, "rc": rc,
            "reports": reports[:10]}
    if rc == 124:
        return "incomplete", f"{tool}: timed out before the program ended", data
    if errors is None:
        return "failed", (f"{tool}: no summary line (exit {rc}): "
                          f"{last_line(log) or last_line(app_log)}"), data
    detail = f"{tool}: {errors} error(s)" + (f", {warnings} warning(s)" if warnings else "")
    if reports:
        detail += f"; first: {reports[0]}"
    if errors or rc != 0:
        if rc != 0 and not errors:
            detail += f"; the program exited {rc}: {last_line(app_log)}"
        return "failed", detail, data
    return "passed", detail + f"; program exit {rc}", data


# ---- benchmark runs ----------------------------------------------------------------------------


def bench_run_check(path):
    """One side of one model as bench/gpu_bench.sh left it (MODEL.SIDE.json): measured, failed,
    or skipped where this PyTorch has no torch.compile."""
    model, side = os.path.basename(path).rsplit(".", 2)[:2]
    try:
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if line.startswith("{")]
        r = json.loads(lines[-1]) if lines else {"error": "no result"}
    except (OSError, ValueError) as e:
        r = {"error": f"unreadable result ({e})"}
    name = f"{model} {side}"
    if "error" in r:
        return name, ("skipped" if "has no torch.compile" in r["error"] else "failed"), r["error"]
    s = statistics.median(r["step_seconds"])
    rows = f"{r['batch'] / s:,.1f} sequences/s, " if r.get("encoder_seq") else ""  # T5
    return name, "passed", (f"batch {r['batch']}: {1e3 * s:.0f} ms/step, {rows}"
                            f"{r['batch'] * r['seq'] / s:,.0f} tokens/s, loss "
                            f"{r['losses'][0]:.3f} -> {r['losses'][-1]:.3f}")


# ---- summaries ---------------------------------------------------------------------------------


def step_status(checks):
    statuses = [c["status"] for c in checks]
    if not statuses:
        return "failed"
    for s in ("failed", "incomplete"):
        if s in statuses:
            return s
    return "skipped" if all(s == "skipped" for s in statuses) else "passed"


def summarize(step, directory, device, seconds, notes, machine):
    checks = []
    for path in sorted(glob.glob(os.path.join(directory, "checks", "*.json"))):
        with open(path) as f:
            checks.append(json.load(f))
    summary = {"step": step, "status": step_status(checks), "device": device,
               "seconds": seconds, "machine": machine, "notes": notes, "checks": checks,
               "finished": datetime.datetime.now(datetime.timezone.utc).isoformat(
                   timespec="seconds")}
    with open(os.path.join(directory, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"gpu-check: step {step}: {summary['status'].upper()} ({len(checks)} checks, "
          f"{seconds} s on {machine or device})")
    for n in notes:
        print(f"  note: {n}")
    return summary


# ---- report ------------------------------------------------------------------------------------


def load_results(paths, root):
    """{step: (summary, extracted directory)}: the newest summary of each step among the .tgz
    files under paths (files or directories, searched recursively), extracted under root. The
    bench step is the exception: calls that each measured some models (--bench-models) add up,
    the newer result of a model and side replacing the older (merge_bench)."""
    tgzs = []
    for p in paths:
        if os.path.isdir(p):
            tgzs += sorted(glob.glob(os.path.join(p, "**", "*.tgz"), recursive=True))
        else:
            tgzs.append(p)
    found = []
    for i, t in enumerate(tgzs):
        dest = os.path.join(root, str(i))
        with tarfile.open(t) as tar:
            members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]
            for m in members:
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    raise SystemExit(f"gpu_check.py: {t}: unsafe member {m.name}")
            tar.extractall(dest, members=members)
        for s in glob.glob(os.path.join(dest, "*", "summary.json")):
            with open(s) as f:
                found.append((json.load(f), os.path.dirname(s)))
    found.sort(key=lambda r: r[0]["finished"])
    results = {summary["step"]: (summary, d) for summary, d in found}  # the newest wins
    benches = [r for r in found if r[0]["step"] == "bench"]
    if len(benches) > 1:
        results["bench"] = merge_bench(benches, os.path.join(root, "bench-merged"))
    return results


def merge_bench(benches, dest):
    """One bench result from several, oldest first: every check and every result file, a newer
    one of the same name replacing the older."""
    checks, notes = {}, []
    os.makedirs(os.path.join(dest, "bench"))
    for summary, d in benches:
        checks.update({c["name"]: c for c in summary["checks"]})
        notes += [n for n in summary.get("notes", []) if n not in notes]
        for f in glob.glob(os.path.join(d, "bench", "*.json")):
            shutil.copy(f, os.path.join(dest, "bench"))
        attention = os.path.join(d, "bench", "attention.md")  # ax-attention-bench's table
        if os.path.exists(attention):
            shutil.copy(attention, os.path.join(dest, "bench"))
    merged = dict(benches[-1][0], checks=list(checks.values()), notes=notes,
                  seconds=sum(s["seconds"] for s, _ in benches))
    merged["status"] = step_status(merged["checks"])
    merged["notes"].append(f"merged from {len(benches)} bench calls (the newer result of a model "
                           "and side kept)")
    return merged, dest


def cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def checks_table(summary):
    lines = ["| check | status | evidence |", "|---|---|---|"]
    for c in summary["checks"]:
        lines.append(f"| {cell(c['name'])} | {c['status']} | {cell(c['detail'])} |")
    return lines


def bench_table(directory, peer):
    """The peer's own table (bench/torch_gpu_peer.py report) over the step's results."""
    results = os.path.join(directory, "bench")
    if not glob.glob(os.path.join(results, "*.json")):
        return ["No benchmark results in this step (see its checks)."]
    out = subprocess.run([sys.executable, peer, "report", results], capture_output=True,
                         text=True, check=False)
    if out.returncode != 0:
        return [f"`torch_gpu_peer.py report` failed: {cell(out.stderr.strip()[-300:])}"]
    # Its table stays a table; its other lines become a list.
    lines, table = [], False
    for line in out.stdout.strip().splitlines():
        if not line.strip():
            continue
        is_row = line.startswith("|")
        if lines and is_row != table:
            lines.append("")
        lines.append(line if is_row else f"- {line}")
        table = is_row
    return lines


def report_markdown(results, peer, generated):
    md = [BEGIN, "## Results", ""]
    machines = sorted({s["machine"] for s, _ in results.values() if s.get("machine")})
    if results:
        md.append(f"Written by `scripts/gpu-check.sh report` on {generated} from the results of "
                  f"{len(results)} step(s); measured on: {', '.join(machines)}. Each step below "
                  "names its evidence; a step that was not run says so.")
    else:
        md.append("**Not measured yet**: no GPU has run `scripts/gpu-check.sh` (written by "
                  f"`scripts/gpu-check.sh report` on {generated} from no results).")
    md += ["", "### Acceptance", "", "| step | status | what | time |", "|---|---|---|---|"]
    for step, heading, what in STEPS:
        if step in results:
            s = results[step][0]
            md.append(f"| {heading} | **{s['status']}** | {what} | {s['seconds']} s on "
                      f"{cell(s.get('machine') or s['device'])} |")
        else:
            md.append(f"| {heading} | **not run** | {what} | — |")
    for step, heading, what in STEPS:
        md += ["", f"### {heading}", ""]
        if step not in results:
            md.append(f"Not run: no result of the `{step}` step was given to the report.")
            continue
        summary, directory = results[step]
        md.append(f"Status: **{summary['status']}** ({summary['seconds']} s, "
                  f"{summary['finished']}, device {summary['device']}).")
        for n in summary.get("notes", []):
            md += ["", f"Note: {n}"]
        md.append("")
        md += checks_table(summary)
        if step == "bench":
            md += ["", "The table as `bench/torch_gpu_peer.py report` prints it from this step's "
                   "results (tokens/s, MFU, peak memory, ratios measured in the same call):", ""]
            md += bench_table(directory, peer)
    md += ["", "### T5", "",
           "The sanitize and curves steps train tiny-t5 (span corruption on the bundle's "
           "tokenizer with 100 sentinels). " + t5_throughput(results),
           "", END]
    return "\n".join(md) + "\n"


T5_MODELS = ("t5-small", "t5-base", "t5-large")


def t5_throughput(results):
    """What the report says of T5 training throughput: where its rows are, or that no call
    measured them; T5x's published figure beside it either way."""
    anchor = ("T5x's published anchor, not measured here: t5-large 174.1 seq/s/GPU on H100 with "
              "TE FP8 (64 GPUs, batch 32/GPU, ENC_SL 512 / DEC_SL 128; JAX-Toolbox's T5x table), "
              "not like for like: ax and PyTorch run bf16 on one GPU.")
    measured = []
    if "bench" in results:
        names = {os.path.basename(p).rsplit(".", 2)[0] for p in
                 glob.glob(os.path.join(results["bench"][1], "bench", "*.*.json"))}
        measured = [m for m in T5_MODELS if m in names]
    if measured:
        return (f"T5 training throughput ({', '.join(measured)}; sequences/s per GPU, ENC_SL 512 "
                "/ DEC_SL 128, span-corruption-shaped rows, the same on both sides) is in the "
                "benchmark table above, ax beside PyTorch's T5 of the same config. " + anchor)
    return ("T5 training throughput on the GPU is not measured yet: no call ran `gpu-check.sh run "
            "bench --bench-models t5-small,t5-base,t5-large` (ax against bench/torch_t5_peer.py's "
            "T5, eager and torch.compile, in the same call). " + anchor)


REQUIRED = ["## Results", "### Acceptance"] + [f"### {h}" for _, h, _ in STEPS] + ["### T5"]


def validate(text):
    """The problems of a report: a missing section or marker, a step without a status."""
    problems = [f"missing '{r}'" for r in REQUIRED + [BEGIN, END] if r not in text]
    acceptance = text.split("### Acceptance", 1)[-1].split("\n### ", 1)[0]
    for _, heading, _ in STEPS:
        if not re.search(r"^\| " + re.escape(heading) + r" \| \*\*(passed|failed|skipped|"
                         r"incomplete|not run)\*\* \|", acceptance, re.M):
            problems.append(f"no status for '{heading}' in the acceptance table")
    return problems


def not_from_a_gpu(results):
    """The steps whose results came from --check (the CPU standing in): never for docs/."""
    return sorted(step for step, (summary, _) in results.items() if summary["device"] != "cuda")


def replace_block(doc, block):
    if BEGIN not in doc or END not in doc:
        raise SystemExit("gpu_check.py: the document has no gpu-check report markers")
    head = doc.split(BEGIN, 1)[0]
    tail = doc.split(END, 1)[1]
    return head + block.rstrip("\n") + tail


# ---- the bundle's manifest ----------------------------------------------------------------------


def output(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def cmake_cache(build):
    cache = {}
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                key, sep, value = line.rstrip("\n").partition("=")
                if sep and ":" in key and not key.startswith(("//", "#")):
                    cache[key.split(":")[0]] = value
    except OSError:
        pass
    return cache


def manifest(path, size, build, tests):
    """What a bundle holds and how it was built (the env step and the report print it)."""
    cache = cmake_cache(build)
    nvcc = cache.get("CMAKE_CUDA_COMPILER", "")
    cuda = "none (CPU build)"
    if nvcc and not nvcc.endswith("NOTFOUND"):
        cuda = (output(nvcc, "--version").rsplit("release ", 1)[-1] + "\n").splitlines()[0]
    commit = output("git", "-C", build, "rev-parse", "--short=12", "HEAD")
    changed = output("git", "-C", build, "status", "--porcelain", "--untracked-files=no")
    m = {"commit": commit + ("+changes" if changed else ""),
         "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "cuda": cuda, "architectures": cache.get("CMAKE_CUDA_ARCHITECTURES", ""),
         "build_type": cache.get("CMAKE_BUILD_TYPE", ""), "bytes": size,
         "gpu_tests": [os.path.basename(t) for t in tests]}
    with open(path, "w") as f:
        json.dump(m, f, indent=1)


def manifest_line(path):
    with open(path) as f:
        m = json.load(f)
    arch = f" for sm {m['architectures']}" if m["architectures"] else ""
    return (f"commit {m['commit']}, built {m['built']}, CUDA {m['cuda']}{arch}, "
            f"{m['build_type']}, {m['bytes'] / 1048576:.1f} MiB; gpu tests: "
            f"{' '.join(m['gpu_tests']) or 'none'}")


# ---- the gpu-labelled tests --------------------------------------------------------------------


def gpu_tests(root):
    """The targets of every ax_test(... LABELS gpu ...) under root/tests."""
    names = []
    for path in sorted(glob.glob(os.path.join(root, "tests", "**", "CMakeLists.txt"),
                                 recursive=True)):
        with open(path) as f:
            text = re.sub(r"#[^\n]*", "", f.read())
        for m in re.finditer(r"\bax_test\(\s*(\w+)([^)]*)\)", text):
            if re.search(r"\bLABELS\b[^)]*\bgpu\b", m.group(2)):
                names.append(m.group(1))
    return names


# ---- command line ------------------------------------------------------------------------------


def parser():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    g = sub.add_parser("gtest")
    g.add_argument("name")
    g.add_argument("--json", required=True)
    g.add_argument("--log", required=True)
    g.add_argument("--rc", type=int, required=True)
    c = sub.add_parser("curve")
    c.add_argument("name")
    for side in ("a", "b"):
        c.add_argument(f"--{side}", required=True, help="metrics.jsonl")
        c.add_argument(f"--label-{side}", default=side)
        c.add_argument(f"--log-{side}")
        c.add_argument(f"--rc-{side}", type=int)
        c.add_argument(f"--device-{side}", help="the log must say 'device: <this>'")
    c.add_argument("--steps", type=int, required=True)
    c.add_argument("--tol", type=float, required=True)
    c.add_argument("--min-drop", type=float)
    s = sub.add_parser("sanitizer")
    s.add_argument("name")
    s.add_argument("--tool", required=True)
    s.add_argument("--log", required=True)
    s.add_argument("--app-log", required=True)
    s.add_argument("--rc", type=int, required=True)
    b = sub.add_parser("bench-run")
    b.add_argument("file", help="MODEL.SIDE.json of bench/gpu_bench.sh")
    r = sub.add_parser("record")
    r.add_argument("name")
    r.add_argument("status", choices=STATUSES)
    r.add_argument("detail")
    r.add_argument("--data", action="append", default=[], help="key=value")
    for p in (g, c, s, b, r):
        p.add_argument("--write", required=True, help="the check's JSON file")
    m = sub.add_parser("summarize")
    m.add_argument("step")
    m.add_argument("directory")
    m.add_argument("--device", required=True)
    m.add_argument("--seconds", type=int, required=True)
    m.add_argument("--machine", default="")
    m.add_argument("--note", action="append", default=[])
    p = sub.add_parser("report")
    p.add_argument("results", nargs="+", help=".tgz files or directories holding them")
    p.add_argument("--output", help="write the report block here")
    p.add_argument("--into", help="replace the marked block of this document")
    p.add_argument("--peer", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "bench", "torch_gpu_peer.py"))
    p.add_argument("--generated", help="the date to print (default: today)")
    v = sub.add_parser("validate")
    v.add_argument("file")
    t = sub.add_parser("gpu-tests")
    t.add_argument("root")
    f = sub.add_parser("manifest")
    f.add_argument("file")
    f.add_argument("--bytes", type=int, required=True)
    f.add_argument("--build", required=True)
    f.add_argument("--tests", nargs="*", default=[])
    n = sub.add_parser("manifest-line")
    n.add_argument("file")
    return ap


def main(argv=None):
    ap = parser()
    a = ap.parse_args(argv)

    if a.command == "gtest":
        write_check(a.write, a.name, *gtest_check(a.name, a.json, a.log, a.rc))
    elif a.command == "curve":
        problem = (run_problem(a.label_a, a.a, a.log_a, a.rc_a, a.device_a) or
                   run_problem(a.label_b, a.b, a.log_b, a.rc_b, a.device_b))
        if problem:
            write_check(a.write, a.name, "failed", problem)
        else:
            write_check(a.write, a.name, *compare_curves(
                load_losses(a.a), load_losses(a.b), a.steps, a.tol, a.min_drop, a.label_a,
                a.label_b))
    elif a.command == "sanitizer":
        write_check(a.write, a.name, *sanitizer_check(a.tool, a.log, a.app_log, a.rc))
    elif a.command == "bench-run":
        write_check(a.write, *bench_run_check(a.file))
    elif a.command == "record":
        write_check(a.write, a.name, a.status, a.detail,
                    dict(kv.split("=", 1) for kv in a.data))
    elif a.command == "summarize":
        summarize(a.step, a.directory, a.device, a.seconds, a.note, a.machine)
    elif a.command == "report":
        if bool(a.output) == bool(a.into):
            ap.error("report: give exactly one of --output and --into")
        generated = a.generated or datetime.date.today().isoformat()
        with tempfile.TemporaryDirectory(prefix="gpu-check-report.") as root:
            results = load_results(a.results, root)
            if a.into and not_from_a_gpu(results):
                raise SystemExit("gpu_check.py: results of --check (the CPU standing in for the "
                                 f"GPU) go to --output, not into {a.into}: "
                                 f"{', '.join(not_from_a_gpu(results))}")
            block = report_markdown(results, a.peer, generated)
        target = a.output or a.into
        text = block
        if a.into:
            with open(a.into) as f:
                text = replace_block(f.read(), block)
        problems = validate(text)
        if problems:
            raise SystemExit("gpu_check.py: the report is incomplete: " + "; ".join(problems))
        with open(target, "w") as f:
            f.write(text)
        print(f"gpu-check: report of {len(results)} step(s) written to {target}")
    elif a.command == "validate":
        with open(a.file) as f:
            problems = validate(f.read())
        if problems:
            print("gpu_check.py: " + "; ".join(problems), file=sys.stderr)
            return 1
        print(f"gpu-check: {a.file} has every section")
    elif a.command == "gpu-tests":
        print(" ".join(gpu_tests(a.root)))
    elif a.command == "manifest":
        manifest(a.file, a.bytes, a.build, a.tests)
    elif a.command == "manifest-line":
        print(manifest_line(a.file))
    return 0


if __name__ == "__main__":
    sys.exit(main())

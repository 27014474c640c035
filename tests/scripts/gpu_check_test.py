"""Unit tests of scripts/gpu_check.py: the checks scripts/gpu-check.sh records on the GPU machine
and the report it writes from them. The report test turns a fixture of fake step results into
markdown and compares it with gpu_check_report_expected.md (after a deliberate change of the
report: GPU_CHECK_UPDATE=1 python3 tests/scripts/gpu_check_test.py rewrites that file).
"""

import json
import os
import sys
import tarfile
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gpu_check  # noqa: E402

PEER = os.path.join(ROOT, "bench", "torch_gpu_peer.py")
EXPECTED = os.path.join(HERE, "gpu_check_report_expected.md")


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def metrics(path, losses):
    return write(path, "".join(json.dumps({"step": i + 1, "loss": v, "lr": 1e-3}) + "\n"
                                for i, v in enumerate(losses)))


class Curves(unittest.TestCase):
    def test_within_the_bound_passes_and_names_the_worst_step(self):
        a = {1: 6.0, 2: 5.5, 3: 5.0}
        b = {1: 6.0, 2: 5.5 * (1 + 4e-3), 3: 5.0 * (1 - 1e-3)}
        status, detail, data = gpu_check.compare_curves(a, b, 3, 1e-2, None, "cuda", "cpu-bf16")
        self.assertEqual(status, "passed", detail)
        self.assertEqual(data["worst_step"], 2)
        self.assertAlmostEqual(data["worst"], 4e-3 / (1 + 4e-3), places=9)
        self.assertIn("at step 2 (bound 1e-02)", detail)

    def test_one_step_past_the_bound_fails(self):
        a = {s: 6.0 - 0.01 * s for s in range(1, 51)}
        b = dict(a)
        b[37] = a[37] * (1 + 2e-4)
        status, detail, _ = gpu_check.compare_curves(a, b, 50, 1e-4)
        self.assertEqual(status, "failed")
        self.assertIn("at step 37", detail)

    def test_identical_curves_say_so(self):
        a = {1: 6.0, 2: 5.0}
        status, detail, _ = gpu_check.compare_curves(a, dict(a), 2, 1e-4)
        self.assertEqual(status, "passed")
        self.assertIn("the same losses at every step", detail)

    def test_missing_steps_and_nan_fail(self):
        status, detail, _ = gpu_check.compare_curves({1: 6.0}, {1: 6.0, 2: 5.9}, 2, 1e-2)
        self.assertEqual(status, "failed")
        self.assertIn("first missing: 2", detail)
        status, detail, _ = gpu_check.compare_curves({1: float("nan")}, {1: 6.0}, 1, 1e-2)
        self.assertEqual(status, "failed")
        self.assertIn("step 1", detail)

    def test_a_curve_that_does_not_fall_fails_the_drop(self):
        flat = {s: 6.2 for s in range(1, 51)}
        status, detail, data = gpu_check.compare_curves(flat, dict(flat), 50, 1e-2, 0.5)
        self.assertEqual(status, "failed", detail)
        self.assertEqual(data["drop"], 0)
        falling = {s: 6.2 - 0.02 * s for s in range(1, 51)}
        status, _, _ = gpu_check.compare_curves(falling, dict(falling), 50, 1e-2, 0.5)
        self.assertEqual(status, "passed")

    def test_load_losses_skips_evaluation_lines(self):
        with tempfile.TemporaryDirectory() as d:
            p = write(os.path.join(d, "metrics.jsonl"),
                      '{"step":1,"loss":6.5}\n{"step":2,"val_loss":6.1,"val_ppl":446}\n'
                      '{"step":2,"loss":6.25}\n')
            self.assertEqual(gpu_check.load_losses(p), {1: 6.5, 2: 6.25})


class RunProblems(unittest.TestCase):
    def test_a_failed_run_is_named_by_its_error_line(self):
        with tempfile.TemporaryDirectory() as d:
            log = write(os.path.join(d, "gpu.log"),
                        "device: cuda:0 NVIDIA H100\nax-train: Unimplemented: CUDA backend with "
                        "f32 activations\n")
            problem = gpu_check.run_problem("cuda", os.path.join(d, "none"), log, 1, "cuda")
            self.assertEqual(problem, "cuda run failed (exit 1): ax-train: Unimplemented: CUDA "
                             "backend with f32 activations")

    def test_a_run_that_did_not_exit_is_named_by_gpu_checks_line(self):
        with tempfile.TemporaryDirectory() as d:
            log = write(os.path.join(d, "launch.log"),
                        "[r0] done: step 10, 5120 tokens\n"
                        "ax-launch: rank 0 on host h was killed by signal 15 (SIGTERM)\n"
                        "gpu-check: no exit after 120 s; then SIGTERM: what every thread was "
                        "doing is in one.hang.txt beside this log (ax-launch[7] S)\n")
            problem = gpu_check.run_problem("one", os.path.join(d, "none"), log, 124, "cuda")
            self.assertIn("one run failed (exit 124): gpu-check: no exit after 120 s", problem)
            self.assertIn("one.hang.txt beside this log", problem)

    def test_the_device_line_must_name_the_device_not_a_longer_one(self):
        with tempfile.TemporaryDirectory() as d:
            m = metrics(os.path.join(d, "m.jsonl"), [6.0])
            bf16 = write(os.path.join(d, "a.log"), "device: cpu-bf16\n")
            self.assertIn("did not run on 'cpu'", gpu_check.run_problem("x", m, bf16, 0, "cpu"))
            self.assertEqual(gpu_check.run_problem("x", m, bf16, 0, "cpu-bf16"), "")
            ranks = write(os.path.join(d, "b.log"), "[r0] device: cuda:0 NVIDIA H100 (132 SMs)\n")
            self.assertEqual(gpu_check.run_problem("x", m, ranks, 0, "cuda"), "")
            fell_back = write(os.path.join(d, "c.log"), "device: cpu (no GPU answered: ...)\n")
            self.assertIn("device: cpu (no GPU", gpu_check.run_problem("x", m, fell_back, 0,
                                                                        "cuda"))


GTEST_JSON = {
    "tests": 4, "failures": 1,
    "testsuites": [{"name": "CudaParityTest", "testsuite": [
        {"name": "Matmul", "status": "RUN", "result": "COMPLETED"},
        {"name": "Rope", "status": "RUN", "result": "COMPLETED", "failures": [
            {"failure": "cuda_parity_test.cc:412\nValue of: max_err <= tol\n  Actual: false",
             "type": ""}]},
        {"name": "AdamW", "status": "RUN", "result": "COMPLETED"}]},
        {"name": "NcclCommunicator", "testsuite": [
            {"name": "TwoGpus", "status": "RUN", "result": "SKIPPED"}]}],
}


class Gtest(unittest.TestCase):
    def run_check(self, result, log_text, rc):
        with tempfile.TemporaryDirectory() as d:
            j = os.path.join(d, "t.json")
            if result is not None:
                write(j, json.dumps(result))
            log = write(os.path.join(d, "t.log"), log_text)
            return gpu_check.gtest_check("t", j, log, rc)

    def test_a_failure_fails_and_is_named_with_its_message(self):
        status, detail, data = self.run_check(GTEST_JSON, "", 1)
        self.assertEqual(status, "failed")
        self.assertEqual(data["passed"], ["CudaParityTest.Matmul", "CudaParityTest.AdamW"])
        self.assertIn("CudaParityTest.Rope (cuda_parity_test.cc:412 Value of: max_err <= tol)",
                      detail)
        self.assertIn("2 passed, 1 failed, 1 skipped", detail)

    def test_skips_pass_with_their_reasons_and_all_skipped_is_skipped(self):
        ok = json.loads(json.dumps(GTEST_JSON))
        del ok["testsuites"][0]["testsuite"][1]["failures"]
        log = ("x.cc:90: Skipped\nneeds 2 GPUs that answer, found 1\n"
               "x.cc:90: Skipped\nneeds 2 GPUs that answer, found 1\n")
        status, detail, _ = self.run_check(ok, log, 0)
        self.assertEqual(status, "passed")
        self.assertEqual(detail, "3 passed, 0 failed, 1 skipped (needs 2 GPUs that answer, "
                         "found 1)")
        skipped = {"testsuites": [{"name": "S", "testsuite": [
            {"name": "A", "status": "RUN", "result": "SKIPPED"}]}]}
        self.assertEqual(self.run_check(skipped, log, 0)[0], "skipped")

    def test_a_crash_without_a_result_fails(self):
        status, detail, _ = self.run_check(None, "[ RUN      ] CudaParityTest.Attention\n"
                                           "Segmentation fault\n", 139)
        self.assertEqual(status, "failed")
        self.assertEqual(detail, "exit 139, no gtest result (crashed?): Segmentation fault")


MEMCHECK_CLEAN = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n"
MEMCHECK_ERRORS = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at rope_kernel(float *, const float *, int, int)+0x1a0
=========     by thread (3,0,0) in block (7,0,0)
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call
=========
========= ERROR SUMMARY: 2 errors
"""
RACECHECK = ("========= COMPUTE-SANITIZER\n========= Error: Race reported between Write access "
             "at attention_fwd+0x90\n========= RACECHECK SUMMARY: 3 hazards displayed (1 error, "
             "2 warnings)\n")


class Sanitizer(unittest.TestCase):
    def check(self, text, rc, tool="memcheck"):
        with tempfile.TemporaryDirectory() as d:
            log = write(os.path.join(d, "s.log"), text)
            app = write(os.path.join(d, "a.log"), "ax-train: loss is NaN at step 3\n")
            return gpu_check.sanitizer_check(tool, log, app, rc)

    def test_no_error_passes(self):
        status, detail, _ = self.check(MEMCHECK_CLEAN, 0)
        self.assertEqual((status, detail), ("passed", "memcheck: 0 error(s); program exit 0"))

    def test_errors_fail_with_the_first_report(self):
        status, detail, data = self.check(MEMCHECK_ERRORS, 0)
        self.assertEqual(status, "failed")
        self.assertEqual(data["errors"], 2)
        self.assertIn("first: Invalid __global__ write of size 4 bytes", detail)
        self.assertEqual(len(data["reports"]), 2)

    def test_racecheck_counts_its_errors_and_warnings(self):
        status, detail, data = self.check(RACECHECK, 0, "racecheck")
        self.assertEqual(status, "failed")
        self.assertEqual((data["errors"], data["warnings"]), (1, 2))
        self.assertIn("racecheck: 1 error(s), 2 warning(s)", detail)

    def test_a_failing_program_without_errors_fails_and_no_summary_fails(self):
        status, detail, _ = self.check(MEMCHECK_CLEAN, 1)
        self.assertEqual(status, "failed")
        self.assertIn("the program exited 1: ax-train: loss is NaN at step 3", detail)
        status, detail, _ = self.check("========= COMPUTE-SANITIZER\n", 1)
        self.assertEqual(status, "failed")
        self.assertIn("no summary line", detail)

    def test_a_timeout_is_incomplete(self):
        self.assertEqual(self.check("========= COMPUTE-SANITIZER\n", 124)[0], "incomplete")


class BenchRuns(unittest.TestCase):
    def test_measured_failed_and_missing_compile(self):
        with tempfile.TemporaryDirectory() as d:
            bench_results(d)
            b = os.path.join(d, "bench")
            self.assertEqual(gpu_check.bench_run_check(os.path.join(b, "Pile126M.ax.json")), (
                "Pile126M ax", "passed",
                "batch 64: 410 ms/step, 319,688 tokens/s, loss 10.830 -> 10.500"))
            self.assertEqual(gpu_check.bench_run_check(os.path.join(b, "Pile126M.compile.json")),
                             ("Pile126M compile", "failed", "timed out after 300s"))
            old = write(os.path.join(b, "tiny-gpt.compile.json"),
                        '{"error": "torch 1.13.0a0 has no torch.compile"}\n')
            self.assertEqual(gpu_check.bench_run_check(old)[1], "skipped")
            empty = write(os.path.join(b, "tiny-gpt.ax.json"), "")
            self.assertEqual(gpu_check.bench_run_check(empty),
                             ("tiny-gpt ax", "failed", "no result"))


class Steps(unittest.TestCase):
    def test_the_worst_check_decides(self):
        c = lambda s: {"status": s}  # noqa: E731
        self.assertEqual(gpu_check.step_status([c("passed"), c("skipped")]), "passed")
        self.assertEqual(gpu_check.step_status([c("skipped"), c("skipped")]), "skipped")
        self.assertEqual(gpu_check.step_status([c("passed"), c("incomplete")]), "incomplete")
        self.assertEqual(gpu_check.step_status([c("incomplete"), c("failed")]), "failed")
        self.assertEqual(gpu_check.step_status([]), "failed")

    def test_the_manifest_reads_the_build(self):
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "CMakeCache.txt"),
                  "// the build type\nCMAKE_BUILD_TYPE:STRING=Release\n"
                  "CMAKE_CUDA_ARCHITECTURES:STRING=80;90\n"
                  "CMAKE_CUDA_COMPILER:STRING=CMAKE_CUDA_COMPILER-NOTFOUND\n")
            path = os.path.join(d, "MANIFEST.json")
            gpu_check.manifest(path, 3 * 2**20, d, ["/b/tests/cuda_parity_test"])
            line = gpu_check.manifest_line(path)
        self.assertIn("CUDA none (CPU build) for sm 80;90, Release, 3.0 MiB; gpu tests: "
                      "cuda_parity_test", line)

    def test_gpu_tests_are_found_by_their_label(self):
        self.assertEqual(gpu_check.gpu_tests(ROOT),
                         ["cuda_parity_test", "nccl_communicator_test", "cuda_decoding_test"])
        with tempfile.TemporaryDirectory() as d:
            write(os.path.join(d, "tests", "a", "CMakeLists.txt"),
                  "# ax_test(in_a_comment LABELS gpu)\nax_test(unit_one SOURCES a.cc)\n"
                  "ax_test(gpu_two\n  SOURCES b.cc\n  DEPS x\n  LABELS slurm gpu)\n")
            self.assertEqual(gpu_check.gpu_tests(d), ["gpu_two"])


# ---- the report --------------------------------------------------------------------------------


def check(name, status, detail):
    return {"name": name, "status": status, "detail": detail, "data": {}}


def step(directory, name, status, seconds, checks, notes=(), finished="2026-12-01T10:00:00+00:00",
         machine="1 x NVIDIA H100 80GB HBM3, 81559 MiB, driver 580.159.04"):
    d = os.path.join(directory, name)
    os.makedirs(d)
    write(os.path.join(d, "summary.json"), json.dumps({
        "step": name, "status": status, "device": "cuda", "seconds": seconds, "machine": machine,
        "notes": list(notes), "checks": checks, "finished": finished}))
    return d


def bench_results(d):
    """What gpu_bench.sh leaves for one model: ax's, eager's and torch.compile's JSON lines."""
    common = {"seq": 2048, "flops_per_token": 854654976.0, "params": 125262336,
              "peak_flops": 989.4e12}
    write(os.path.join(d, "bench", "Pile126M.ax.json"), json.dumps(dict(
        common, batch=64, step_seconds=[0.40, 0.41, 0.42], losses=[10.83, 10.5],
        backend="cuda:0 NVIDIA H100 80GB HBM3", backend_peak_bytes=50 * 2**30,
        device_used_bytes=52 * 2**30, init_seconds=1.5)) + "\n")
    write(os.path.join(d, "bench", "Pile126M.eager.json"), json.dumps(dict(
        common, batch=32, step_seconds=[0.25, 0.25, 0.26], losses=[10.83, 10.6],
        peak_allocated_bytes=40 * 2**30, device_used_bytes=45 * 2**30, torch="2.11.0",
        cuda="13.0", optimizer="AdamW(fused)", attention="sdpa", first_step_seconds=2.0)) + "\n")
    write(os.path.join(d, "bench", "Pile126M.compile.json"),
          json.dumps({"error": "timed out after 300s"}) + "\n")


def fixture(directory):
    """Fake results of two device calls: call 1 ran env, tests, curves, parallel (sanitize did
    not finish), call 2 ran env again and bench; parallel never ran on two GPUs."""
    call1, call2 = os.path.join(directory, "call1"), os.path.join(directory, "call2")
    steps = {
        call1: [
            ("env", "passed", 9, [check("gpu", "passed", "1 GPU(s) answered: 1 x NVIDIA H100 80GB "
                                        "HBM3, 81559 MiB"),
                                  check("torch", "passed", "PyTorch 2.11.0+cu130 (CUDA 13.0)")],
             [], "2026-12-01T10:00:00+00:00"),
            ("tests", "failed", 95, [
                check("cuda_parity_test", "failed", "11 passed, 1 failed, 0 skipped; exit 1; "
                      "failed: CudaParityTest.Rope (x.cc:412 max_err | tol)"),
                check("nccl_communicator_test", "passed", "3 passed, 0 failed, 5 skipped (needs "
                      "2 GPUs that answer, found 1)")],
             ["one GPU: nccl_communicator_test's cases of two or more ranks skip themselves"],
             "2026-12-01T10:02:00+00:00"),
            ("sanitize", "incomplete", 300, [
                check("memcheck: ax-train tiny-gpt", "passed", "memcheck: 0 error(s); program "
                      "exit 0"),
                check("racecheck: cuda_parity_test", "incomplete", "racecheck: timed out before "
                      "the program ended")], [], "2026-12-01T10:08:00+00:00"),
            ("curves", "failed", 40, [
                check("tiny-gpt bf16: cuda vs cpu-bf16", "passed", "50 steps, largest relative "
                      "difference 2.10e-03 at step 31 (bound 1e-02)"),
                check("tiny-gpt f32: cuda (train.precision=float32) vs cpu", "failed",
                      "cuda run failed (exit 1): ax-train: Unimplemented: CUDA backend with f32 "
                      "activations")], [], "2026-12-01T10:03:00+00:00"),
        ],
        call2: [
            ("env", "passed", 8, [check("gpu", "passed", "1 GPU(s) answered")], [],
             "2026-12-01T10:20:00+00:00"),
            ("bench", "passed", 520, [check("Pile126M ax", "passed", "batch 64: 410 ms/step"),
                                      check("Pile126M compile", "failed",
                                            "timed out after 300s")],
             [], "2026-12-01T10:29:00+00:00"),
        ],
    }
    for call, entries in steps.items():
        work = os.path.join(call, "work")
        os.makedirs(work)
        for name, status, seconds, checks, notes, finished in entries:
            d = step(work, name, status, seconds, checks, notes, finished)
            if name == "bench":
                bench_results(d)
            with tarfile.open(os.path.join(call, f"{name}.tgz"), "w:gz") as t:
                t.add(d, arcname=name)
    return [call1, call2]


class Report(unittest.TestCase):
    def make(self, d):
        with tempfile.TemporaryDirectory() as root:
            results = gpu_check.load_results(fixture(d), root)
            self.assertEqual(sorted(results), ["bench", "curves", "env", "sanitize", "tests"])
            # Two env results: the newer (call 2) wins.
            self.assertEqual(results["env"][0]["seconds"], 8)
            return gpu_check.report_markdown(results, PEER, "2026-12-01")

    def test_fixture_gives_the_expected_markdown(self):
        with tempfile.TemporaryDirectory() as d:
            md = self.make(d)
        if os.environ.get("GPU_CHECK_UPDATE") == "1":
            write(EXPECTED, md)
        with open(EXPECTED) as f:
            self.assertEqual(md, f.read())
        self.assertEqual(gpu_check.validate(md), [])

    def test_the_report_says_what_did_not_run_and_keeps_the_evidence(self):
        with tempfile.TemporaryDirectory() as d:
            md = self.make(d)
        self.assertIn("| FSDP and tensor parallelism | **not run** |", md)
        self.assertIn("| compute-sanitizer | **incomplete** |", md)
        self.assertIn("ax-train: Unimplemented: CUDA backend with f32 activations", md)
        self.assertIn("max_err \\| tol", md)  # a | in evidence does not break the table
        self.assertIn("| Pile126M | PyTorch eager | 32 | 2048 | 65536 | 250 |", md)
        self.assertIn("Pile126M: ax/PyTorch eager = 1.22x", md)

    def test_bench_results_of_several_calls_add_up(self):
        with tempfile.TemporaryDirectory() as d:
            calls = fixture(d)
            call3 = os.path.join(d, "call3")
            work = os.path.join(call3, "work")
            os.makedirs(work)
            s = step(work, "bench", "passed", 300, [
                check("fuji-1B-v2 ax", "passed", "batch 8: 900 ms/step"),
                check("Pile126M compile", "passed", "batch 64: 380 ms/step")],
                finished="2026-12-01T11:00:00+00:00")
            write(os.path.join(s, "bench", "fuji-1B-v2.ax.json"), json.dumps({
                "seq": 4096, "flops_per_token": 7046430720.0, "params": 1040254976,
                "peak_flops": 989.4e12, "batch": 8, "step_seconds": [0.9, 0.9, 0.9],
                "losses": [10.4, 10.3], "backend": "cuda:0"}) + "\n")
            write(os.path.join(s, "bench", "Pile126M.compile.json"), json.dumps({
                "seq": 2048, "flops_per_token": 854654976.0, "params": 125262336, "batch": 64,
                "step_seconds": [0.38] * 3, "losses": [10.83, 10.4]}) + "\n")
            with tarfile.open(os.path.join(call3, "bench.tgz"), "w:gz") as t:
                t.add(s, arcname="bench")
            with tempfile.TemporaryDirectory() as root:
                results = gpu_check.load_results(calls + [call3], root)
                summary, _ = results["bench"]
                md = gpu_check.report_markdown(results, PEER, "2026-12-01")
        self.assertEqual([c["name"] for c in summary["checks"]],
                         ["Pile126M ax", "Pile126M compile", "fuji-1B-v2 ax"])
        self.assertEqual(summary["status"], "passed")  # the newer compile result replaced
        self.assertEqual(summary["seconds"], 820)
        self.assertIn("| fuji-1B-v2 | ax | 8 | 4096 | 32768 | 900 |", md)
        self.assertIn("| Pile126M | torch.compile | 64 | 2048 | 131072 | 380 |", md)
        self.assertIn("| Pile126M | PyTorch eager | 32 |", md)

    def test_t5_rows_give_sequences_per_second_beside_t5x(self):
        """A call with --bench-models t5-large: its rows count encoder + decoder tokens and give
        sequences/s; the T5 section points at them and states T5x's published figure."""
        with tempfile.TemporaryDirectory() as d:
            calls = fixture(d)
            call3 = os.path.join(d, "call3")
            work = os.path.join(call3, "work")
            os.makedirs(work)
            s = step(work, "bench", "passed", 400, [check("t5-large ax", "passed", "batch 64")],
                     finished="2026-12-01T11:00:00+00:00")
            common = {"seq": 640, "encoder_seq": 512, "targets_per_row": 114,
                      "flops_per_token": 2164732723.2, "params": 783150080, "batch": 64,
                      "losses": [10.9, 10.5]}
            write(os.path.join(s, "bench", "t5-large.ax.json"), json.dumps(dict(
                common, step_seconds=[0.4] * 3, peak_flops=989.4e12, backend="cuda:0")) + "\n")
            write(os.path.join(s, "bench", "t5-large.eager.json"), json.dumps(dict(
                common, step_seconds=[0.8] * 3, targets_per_row=113)) + "\n")
            with tarfile.open(os.path.join(call3, "bench.tgz"), "w:gz") as t:
                t.add(s, arcname="bench")
            with tempfile.TemporaryDirectory() as root:
                results = gpu_check.load_results(calls + [call3], root)
                md = gpu_check.report_markdown(results, PEER, "2026-12-01")
        # 64 rows of 512 + 128 tokens in 0.4 s: 160 sequences/s, 102,400 tokens/s.
        self.assertIn("| t5-large | ax | 64 | 512+128 | 40960 | 400 | 160.0 | 102,400 |", md)
        self.assertIn("| t5-large | PyTorch eager | 64 | 512+128 | 40960 | 800 | 80.0 |", md)
        self.assertIn("t5-large: ax/PyTorch eager = 2.00x", md)
        self.assertIn("disagree on the real targets a row", md)  # 114 against 113
        self.assertIn("174.1 seq/s/GPU on H100, TE FP8", md)
        t5 = md[md.index("### T5"):]
        self.assertIn("(t5-large; sequences/s per GPU", t5)
        self.assertIn("174.1 seq/s/GPU on H100 with TE FP8", t5)

    def test_without_t5_rows_the_t5_section_says_not_measured(self):
        with tempfile.TemporaryDirectory() as d:
            md = self.make(d)
        t5 = md[md.index("### T5"):]
        self.assertIn("T5 training throughput on the GPU is not measured yet", t5)
        self.assertIn("--bench-models t5-small,t5-base,t5-large", t5)
        self.assertIn("t5-large 174.1 seq/s/GPU on H100 with TE FP8", t5)

    def test_validate_names_a_missing_section_and_status(self):
        with tempfile.TemporaryDirectory() as d:
            md = self.make(d)
        broken = md.replace("### Loss curves", "### Curves").replace(
            "| Benchmark | **passed** |", "| Benchmark | passed |")
        problems = gpu_check.validate(broken)
        self.assertIn("missing '### Loss curves'", problems)
        self.assertIn("no status for 'Benchmark' in the acceptance table", problems)

    def test_report_into_a_document_keeps_the_text_around_the_block(self):
        with tempfile.TemporaryDirectory() as d:
            calls = fixture(d)
            doc = write(os.path.join(d, "doc.md"),
                        f"# GPU\n\nmethod\n\n{gpu_check.BEGIN}\nold\n{gpu_check.END}\n\n## More\n")
            self.assertEqual(gpu_check.main(["report"] + calls + ["--into", doc,
                                                                   "--generated", "2026-12-01"]),
                             0)
            with open(doc) as f:
                text = f.read()
            with open(EXPECTED) as f:
                self.assertEqual(text, "# GPU\n\nmethod\n\n" + f.read() + "\n## More\n")

    def test_check_results_never_reach_the_document(self):
        with tempfile.TemporaryDirectory() as d:
            calls = fixture(d)
            with tempfile.TemporaryDirectory() as root:
                self.assertEqual(gpu_check.not_from_a_gpu(gpu_check.load_results(calls, root)),
                                 [])
            work = os.path.join(d, "check", "work")
            os.makedirs(work)
            s = step(work, "curves", "passed", 5, [], finished="2026-12-02T00:00:00+00:00")
            summary = json.load(open(os.path.join(s, "summary.json")))
            write(os.path.join(s, "summary.json"), json.dumps(dict(summary, device="cpu")))
            with tarfile.open(os.path.join(d, "check", "curves.tgz"), "w:gz") as t:
                t.add(s, arcname="curves")
            doc = write(os.path.join(d, "doc.md"), f"{gpu_check.BEGIN}\n{gpu_check.END}\n")
            with self.assertRaises(SystemExit) as e:
                gpu_check.main(["report", d, "--into", doc])
            self.assertIn("results of --check", str(e.exception))
            self.assertIn(": curves", str(e.exception))
            with open(doc) as f:
                self.assertEqual(f.read(), f"{gpu_check.BEGIN}\n{gpu_check.END}\n")

    def test_into_replaces_only_the_marked_block(self):
        doc = f"# Title\n\nmethod\n\n{gpu_check.BEGIN}\nold\n{gpu_check.END}\n\n## After\n"
        new = gpu_check.replace_block(doc, f"{gpu_check.BEGIN}\nnew\n{gpu_check.END}\n")
        self.assertEqual(new, f"# Title\n\nmethod\n\n{gpu_check.BEGIN}\nnew\n{gpu_check.END}"
                         "\n\n## After\n")
        with self.assertRaises(SystemExit):
            gpu_check.replace_block("# no markers\n", "x")

    def test_the_document_in_the_tree_holds_a_whole_report(self):
        with open(os.path.join(ROOT, "docs", "benchmarks-gpu.md")) as f:
            self.assertEqual(gpu_check.validate(f.read()), [])

    def test_no_results_is_a_report_of_steps_not_run(self):
        md = gpu_check.report_markdown({}, PEER, "2026-12-01")
        self.assertIn("**Not measured yet**", md)
        self.assertEqual(md.count("| **not run** |"), len(gpu_check.STEPS))
        self.assertEqual(gpu_check.validate(md), [])


if __name__ == "__main__":
    unittest.main()

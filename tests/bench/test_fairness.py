"""The fairness rules of the benchmark scripts (bench/fairness.py): the refusals and the ceilings."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import fairness  # noqa: E402


class JudgeRatio(unittest.TestCase):
    def test_a_peer_at_its_best_gets_a_ratio(self):
        ratio, why = fairness.judge_ratio("fp32", 258.0, 187.0, 300.0, 310.0, "openblas", "fp32")
        self.assertAlmostEqual(ratio, 258.0 / 187.0)
        self.assertEqual(why, "")

    def test_a_peer_on_a_generic_core_gets_none(self):
        # The run that printed ratio=6.215: PyTorch on OpenBLAS's Prescott kernels.
        ratio, why = fairness.judge_ratio("fp32", 272.0, 43.7, 40.0, 310.0, "openblas core SkylakeX", "fp32")
        self.assertIsNone(ratio)
        self.assertIn("40.0 GFLOP/s", why)
        self.assertIn("310.0", why)

    def test_the_floor_is_half(self):
        self.assertIsNotNone(fairness.judge_ratio("r", 1.0, 1.0, 50.0, 100.0, "x", "bf16")[0])
        self.assertIsNone(fairness.judge_ratio("r", 1.0, 1.0, 49.9, 100.0, "x", "bf16")[0])

    def test_unmeasured_rates_give_none(self):
        self.assertIsNone(fairness.judge_ratio("r", 1.0, 1.0, None, 100.0, "x", "fp32")[0])
        self.assertIsNone(fairness.judge_ratio("r", 1.0, 1.0, 80.0, 0.0, "x", "fp32")[0])
        self.assertIsNone(fairness.judge_ratio("r", 1.0, 0.0, 80.0, 100.0, "x", "fp32")[0])


class JudgeMfu(unittest.TestCase):
    def test_mfu_is_model_flops_over_the_ceiling(self):
        mfu, why = fairness.judge_mfu("mfu", 150e9, 300.0, "onednn", "fp32")
        self.assertAlmostEqual(mfu, 0.5)
        self.assertEqual(why, "")

    def test_mfu_above_one_is_not_printed(self):
        mfu, why = fairness.judge_mfu("mfu", 2.943 * 100e9, 100.0, "openblas core Prescott", "fp32")
        self.assertIsNone(mfu)
        self.assertIn("2.943", why)
        self.assertIn("not this machine's real one", why)

    def test_exactly_one_is_printed(self):
        self.assertEqual(fairness.judge_mfu("mfu", 100e9, 100.0, "x", "fp32")[0], 1.0)


class ResultLine(unittest.TestCase):
    def test_refused_fields_are_left_out(self):
        line = fairness.result_line("gpt2-124M", [("ratio", None), ("mfu", 0.61234), ("peer_core", "SkylakeX")])
        self.assertEqual(line, "RESULT gpt2-124M mfu=0.612 peer_core=SkylakeX")


class Ceilings(unittest.TestCase):
    rows = [
        {"bench": "sgemm_ceiling", "openblas_core": "SkylakeX",
         "by_shape": {"openblas-sgemm 1024x1024x1024": 240.0, "onednn-sgemm 1024x1024x1024": 180.0,
                      "openblas-sgemm 1024x3072x768": 200.0, "bf16-matmul 1024x1024x1024": 900.0,
                      "bf16-matmul 1024x3072x768": 400.0}},
        {"impl": "pytorch", "gemm_precision": "fp32", "gemm_shape": "1024x3072x768", "gemm_gflops": 210.0,
         "gemm_library": "OpenBLAS core SkylakeX"},
        {"impl": "tessera", "precision": "bf16", "gemm_shape": "1024x3072x768", "gemm_gflops": 420.0,
         "gemm_library": "onednn-bf16"},
        {"impl": "tessera", "precision": "fp16", "gemm_shape": "1024x3072x768", "gemm_gflops": 999.0},
        {"impl": "pytorch", "gemm_precision": "fp32", "gemm_shape": "64x64x64", "gemm_gflops": 5000.0},
    ]

    def test_best_overall_and_at_the_models_shape(self):
        c = fairness.ceilings(self.rows, "1024x3072x768")
        self.assertEqual(c["fp32"]["overall"][1], 240.0)
        self.assertIn("SkylakeX", c["fp32"]["overall"][0])
        self.assertEqual(c["fp32"]["at_shape"][1], 210.0)
        self.assertEqual(c["bf16"]["overall"][1], 900.0)
        self.assertEqual(c["bf16"]["at_shape"][1], 420.0)

    def test_nothing_measured(self):
        self.assertEqual(fairness.ceilings([], "1x1x1")["fp32"]["overall"], (None, 0.0))


if __name__ == "__main__":
    unittest.main()

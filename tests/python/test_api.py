"""Tests python/memplan/__init__.py: the package answers as the command line does, in process.

Run by ctest (tests/CMakeLists.txt, test "python") with PYTHONPATH=build/python and MEMPLAN_BIN
pointing at the memplan binary, whose output the package must reproduce.
"""

import json
import os
import subprocess
import unittest

import memplan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SFT_LORA = os.path.join(ROOT, "configs", "examples", "hf-trl-sft-lora.yaml")
BIN = os.environ.get("MEMPLAN_BIN", os.path.join(ROOT, "build", "src", "memplan"))


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


class PlanTest(unittest.TestCase):
    def test_plan_prints_what_the_cli_prints(self):
        p = memplan.plan(config=SFT_LORA, gpu="h100-sxm")
        text = cli("plan", "--config", SFT_LORA, "--gpu", "h100-sxm")
        self.assertEqual(text.returncode, 0)
        self.assertEqual(str(p), text.stdout)
        self.assertIn("recommended: micro-batch", str(p))
        as_json = cli("plan", "--config", SFT_LORA, "--gpu", "h100-sxm", "--format", "json")
        self.assertEqual(p, json.loads(as_json.stdout))
        self.assertEqual(p.exit_code, 0)

    def test_keywords_a_dict_and_flags_are_the_same_inputs(self):
        by_kwargs = memplan.estimate(model="llama-3.2-1b", batch=2, seq_len=1024, bf16=True,
                                     gradient_checkpointing=True)
        by_dict = memplan.estimate(args={"model": "llama-3.2-1b", "batch": 2, "seq-len": 1024, "bf16": True,
                                         "gradient_checkpointing": True})
        flags = cli("estimate", "--model", "llama-3.2-1b", "--batch", "2", "--seq-len", "1024", "--bf16",
                    "--gradient-checkpointing", "--format", "json")
        self.assertEqual(by_kwargs, by_dict)
        self.assertEqual(by_kwargs, json.loads(flags.stdout))
        self.assertGreater(by_kwargs["estimate"]["peak_bytes"], 0)

    def test_does_not_fit_is_an_answer_not_an_exception(self):
        # Llama-3.1-8B full fine-tuning: 8.03e9 parameters x 16 bytes (bf16 weights and gradients,
        # fp32 AdamW states and master weights) is 120 GiB before any activation: over a T4's 15 GB.
        r = memplan.estimate(model="llama-3.1-8b", gpu="t4")
        self.assertEqual(r.exit_code, 1)
        self.assertFalse(r["fit"]["fits"])
        self.assertGreater(r["estimate"]["peak_bytes"], 8.03e9 * 16 * 0.99)

    def test_check_takes_files(self):
        r = memplan.check(SFT_LORA, gpu="h100-sxm")
        self.assertEqual(len(r["results"]), 1)
        self.assertEqual(r["results"][0]["status"], "fits")
        self.assertEqual(r["results"][0]["file"], SFT_LORA)

    def test_models_and_gpus(self):
        self.assertEqual(len(memplan.models()["models"]), 153)  # configs/models holds 153 files
        self.assertEqual(memplan.models("llama-3.1-8b")["models"][0]["id"], "meta-llama/Llama-3.1-8B")
        names = [g["name"] for g in memplan.gpus()["gpus"]]
        self.assertIn("h100-sxm", names)
        self.assertEqual(len(names), 39)  # 39 profiles in configs/gpus.yaml

    def test_schema_and_version(self):
        self.assertEqual(memplan.schema("plan")["properties"]["batch"]["type"], "integer")
        self.assertTrue(memplan.version().startswith("memplan 0.1.0 (commit "))
        self.assertEqual(memplan.version(), cli("--version").stdout)


class ErrorTest(unittest.TestCase):
    def test_a_bad_value_in_a_config_carries_file_line_and_suggestion(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "train.yaml")
            with open(path, "w") as f:
                f.write("model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 4\n"
                        "lora_r: zero\n")
            with self.assertRaises(memplan.MemplanError) as e:
                memplan.estimate(config=path)
            expected = cli("estimate", "--config", path)
        err = e.exception
        self.assertEqual(err.file, path)
        self.assertEqual(err.line, 3)
        self.assertEqual(err.message, 'lora_r must be an integer, got "zero"')
        self.assertEqual(err.exit_code, expected.returncode)
        self.assertEqual("memplan: error: " + str(err) + "\n", expected.stderr)

    def test_an_unknown_keyword_is_named(self):
        with self.assertRaises(memplan.MemplanError) as e:
            memplan.plan(config=SFT_LORA, gpuu="h100-sxm")
        self.assertEqual(e.exception.kind, "arguments")
        self.assertEqual(e.exception.message, "plan: unknown argument 'gpuu'")
        self.assertEqual(e.exception.suggestion, "did you mean 'gpu'?")

    def test_a_missing_file(self):
        with self.assertRaises(memplan.MemplanError) as e:
            memplan.plan(config="/nonexistent/train.yaml", gpu="h100-sxm")
        self.assertEqual(e.exception.file, "/nonexistent/train.yaml")
        self.assertIsNone(e.exception.line)
        self.assertEqual(e.exception.exit_code, 3)


if __name__ == "__main__":
    unittest.main()

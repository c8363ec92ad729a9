"""Tests python/memplan/integrations: the transformers and Lightning callbacks on stand-in objects
with the attributes of the real ones (TrainingArguments, a PEFT model, Lightning's Trainer), and
with Debian's python3-torch on the CPU when it is installed. Tests that need a library that is
not installed are skipped, and say so (unittest prints "skipped '...'"; they never count as passed).
"""

import json
import os
import tempfile
import unittest
import warnings
from types import SimpleNamespace

import memplan
from memplan.integrations import _common
from memplan.integrations.lightning import MemplanLightningCallback, trainer_arguments
from memplan.integrations.transformers import MemplanCallback, MemplanWontFit, training_arguments

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

try:
    import torch
except ImportError:
    torch = None


def llama_8b_config():
    # config.json of meta-llama/Llama-3.1-8B, as the catalog keeps it (configs/models/llama-3.1-8b.json).
    with open(os.path.join(ROOT, "configs", "models", "llama-3.1-8b.json")) as f:
        return json.load(f)["config"]


class StandInConfig:
    """transformers.PretrainedConfig's part the callback reads: to_dict()."""

    def __init__(self, d):
        self._d = d

    def to_dict(self):
        return dict(self._d)


class StandInModel:
    def __init__(self, config, dtype="torch.bfloat16"):
        self.config = StandInConfig(config)
        self.dtype = dtype


class StandInPeftModel:
    """peft.PeftModel's part the callback reads: peft_config and get_base_model()."""

    def __init__(self, base, r=16, alpha=32, targets=("q_proj", "v_proj")):
        self._base = base
        self.peft_config = {"default": SimpleNamespace(r=r, lora_alpha=alpha, lora_dropout=0.05,
                                                       target_modules=set(targets))}

    def get_base_model(self):
        return self._base


def hf_args(**kw):
    """transformers.TrainingArguments' attributes (TRL's SFTConfig adds max_length)."""
    base = dict(per_device_train_batch_size=4, gradient_accumulation_steps=8, bf16=True, fp16=False,
                gradient_checkpointing=True, gradient_checkpointing_kwargs={"use_reentrant": False},
                optim=SimpleNamespace(value="adamw_torch_fused"), world_size=1, deepspeed=None, fsdp=[],
                fsdp_config={}, max_length=2048)
    base.update(kw)
    return SimpleNamespace(**base)


def run_trainer(callback, args, model, steps=3):
    """What transformers.Trainer does with a callback around its loop: on_train_begin, then
    steps until control.should_training_stop."""
    control = SimpleNamespace(should_training_stop=False)
    state = SimpleNamespace(global_step=0)
    ran = 0
    callback.on_train_begin(args, state, control, model=model)
    while ran < steps and not control.should_training_stop:
        ran += 1
        state.global_step = ran
        callback.on_step_end(args, state, control, model=model)
    return ran


class ReadTest(unittest.TestCase):
    def test_training_arguments_become_memplan_flags(self):
        with tempfile.TemporaryDirectory() as d:
            got = training_arguments(hf_args(), d)
        self.assertEqual(got, {"batch": 4, "grad_accum": 8, "seq_len": 2048, "bf16": True,
                               "gradient_checkpointing": True, "use_reentrant": "false",
                               "optim": "adamw_torch_fused"})

    def test_deepspeed_fsdp_and_world_size(self):
        with tempfile.TemporaryDirectory() as d:
            ds = training_arguments(hf_args(deepspeed={"zero_optimization": {"stage": 3}}, world_size=8), d)
            self.assertEqual(ds["num_gpus"], 8)
            with open(ds["config"][0]) as f:
                self.assertEqual(json.load(f), {"zero_optimization": {"stage": 3}})
            fsdp = training_arguments(hf_args(fsdp="full_shard auto_wrap offload", world_size=4), d)
        self.assertEqual((fsdp["fsdp"], fsdp["offload_params"], fsdp["num_gpus"]), ("full_shard", True, 4))

    def test_a_peft_model_with_4bit_base(self):
        cfg = dict(llama_8b_config(), quantization_config={"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                                                          "bnb_4bit_use_double_quant": True})
        model = StandInPeftModel(StandInModel(cfg))
        with tempfile.TemporaryDirectory() as d:
            got = _common.model_arguments(model, d)
            with open(got.pop("model")) as f:
                self.assertEqual(json.load(f)["hidden_size"], 4096)
        self.assertEqual(got, {"torch_dtype": "bfloat16", "use_peft": True, "lora_r": 16, "lora_alpha": 32,
                               "lora_dropout": 0.05, "lora_target_modules": ["q_proj", "v_proj"],
                               "load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True})

    def test_lightning_trainer(self):
        trainer = SimpleNamespace(precision="bf16-mixed", accumulate_grad_batches=4, world_size=2, strategy=None,
                                  datamodule=SimpleNamespace(batch_size=8))
        self.assertEqual(trainer_arguments(trainer, SimpleNamespace()),
                         {"bf16": True, "grad_accum": 4, "num_gpus": 2, "batch": 8})


class PredictTest(unittest.TestCase):
    def test_a_run_that_cannot_fit_stops_before_its_first_step_with_the_fix(self):
        # Llama-3.1-8B full fine-tuning with AdamW: 8.03e9 parameters x 16 bytes (bf16 weights and
        # gradients... fp32 states) is over 100 GiB before activations, more than an H100's 80 GB.
        callback = MemplanCallback(gpu="h100-sxm")
        with self.assertRaises(MemplanWontFit) as e:
            run_trainer(callback, hf_args(), StandInModel(llama_8b_config()))
        self.assertEqual(callback.monitor.records, [])
        message = str(e.exception)
        self.assertTrue(message.startswith("memplan: this run will not fit: predicted peak "), message)
        self.assertIn("fix: ", message)
        self.assertIn("flags: ", message)

    def test_the_fix_keeps_the_global_batch(self):
        # LoRA at micro-batch 64 x 2048 tokens without checkpointing: the fp32 logits alone are
        # 64 x 2048 x 128256 x 4 bytes = 67.3 GB; the fix is a smaller micro-batch, same global batch.
        callback = MemplanCallback(gpu="h100-sxm")
        args = hf_args(per_device_train_batch_size=64, gradient_accumulation_steps=1, gradient_checkpointing=False)
        with self.assertRaises(MemplanWontFit):
            run_trainer(callback, args, StandInPeftModel(StandInModel(llama_8b_config())))
        rec = callback.monitor.fix["recommendation"]
        self.assertTrue(rec["fits"])
        self.assertEqual(rec["micro_batch"] * rec["grad_accum"], 64)
        self.assertIn(f"per_device_train_batch_size={rec['micro_batch']}, gradient_accumulation_steps="
                      f"{rec['grad_accum']} keeps the global batch 64", callback.monitor.message)

    def test_stop_instead_of_raise(self):
        callback = MemplanCallback(gpu="h100-sxm", on_fail="stop")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            ran = run_trainer(callback, hf_args(), StandInModel(llama_8b_config()))
        self.assertEqual(ran, 0)

    def test_a_run_that_fits_trains_and_one_near_the_limit_warns(self):
        model = StandInPeftModel(StandInModel(llama_8b_config()))
        callback = MemplanCallback(gpu="h100-sxm")
        self.assertEqual(run_trainer(callback, hf_args(), model), 3)
        self.assertTrue(callback.monitor.message.startswith("memplan: fits: predicted peak "))
        peak = callback.monitor.prediction["estimate"]["peak_bytes"]
        budget = callback.monitor.prediction["fit"]["budget_bytes"]
        near = MemplanCallback(gpu="h100-sxm", warn_at=0.5 * peak / budget)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            self.assertEqual(run_trainer(near, hf_args(), model), 3)
        self.assertEqual(len(w), 1)
        self.assertIn("little room left", str(w[0].message))

    def test_lightning_callback_stops_before_fit(self):
        trainer = SimpleNamespace(precision="bf16-mixed", accumulate_grad_batches=1, world_size=1, strategy=None,
                                  datamodule=SimpleNamespace(batch_size=4), should_stop=False)
        module = SimpleNamespace(model=StandInModel(llama_8b_config()))
        with self.assertRaises(MemplanWontFit):
            MemplanLightningCallback(gpu="h100-sxm", seq_len=2048).on_fit_start(trainer, module)
        stopper = MemplanLightningCallback(gpu="h100-sxm", seq_len=2048, on_fail="stop")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            stopper.on_fit_start(trainer, module)
        self.assertTrue(trainer.should_stop)


class SaveTest(unittest.TestCase):
    def test_save_appends_to_the_calibration_store(self):
        with tempfile.TemporaryDirectory() as d:
            old = os.environ.get("MEMPLAN_DATA_DIR")
            os.environ["MEMPLAN_DATA_DIR"] = d
            try:
                callback = MemplanCallback(gpu="h100-sxm", save=True)
                run_trainer(callback, hf_args(), StandInPeftModel(StandInModel(llama_8b_config())))
                # No CUDA here: stand in for the first steps' torch.cuda.max_memory_allocated().
                callback.monitor.records = [{"step": 1, "max_memory_allocated": 31 << 30, "max_memory_reserved": 33 << 30}]
                callback.monitor.save_records()
                with open(os.path.join(d, "measurements.jsonl")) as f:
                    line = json.loads(f.readline())
            finally:
                if old is None:
                    del os.environ["MEMPLAN_DATA_DIR"]
                else:
                    os.environ["MEMPLAN_DATA_DIR"] = old
        self.assertEqual(line["gpu"], "h100-sxm")
        self.assertEqual(line["measured_bytes"], 31 << 30)
        self.assertEqual(line["predicted_bytes"], callback.monitor.prediction["estimate"]["peak_bytes"])
        self.assertEqual((line["micro_batch"], line["grad_accum"], line["seq_len"], line["method"]), (4, 8, 2048, "lora"))


@unittest.skipIf(torch is None, "python3-torch is not installed")
class TorchCpuTest(unittest.TestCase):
    def test_a_real_torch_model_on_the_cpu(self):
        # A real nn.Module in bf16 carrying a transformers-style config: the callback reads torch's
        # dtype, predicts, the loop trains, and the CPU records no CUDA peaks.
        cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": 100}
        net = torch.nn.Linear(64, 64).to(torch.bfloat16)
        net.config = StandInConfig(cfg)
        net.dtype = next(net.parameters()).dtype
        callback = MemplanCallback(gpu_memory="16GB")
        opt = torch.optim.AdamW(net.parameters())
        control = SimpleNamespace(should_training_stop=False)
        state = SimpleNamespace(global_step=0)
        callback.on_train_begin(hf_args(bf16=False, gradient_checkpointing=False, max_length=32), state, control,
                                model=net)
        for step in range(2):
            loss = net(torch.randn(4, 64, dtype=torch.bfloat16)).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            state.global_step = step + 1
            callback.on_step_end(None, state, control)
        self.assertEqual(callback.monitor.arguments["torch_dtype"], "bfloat16")
        self.assertTrue(callback.monitor.prediction["fit"]["fits"])
        self.assertFalse(torch.cuda.is_available())
        self.assertEqual(callback.monitor.records, [])


class RealLibrariesTest(unittest.TestCase):
    """The callbacks against the real libraries, where they are installed."""

    def test_transformers_trainer_callback(self):
        try:
            import transformers
        except ImportError:
            self.skipTest("transformers is not installed (not in Debian; pip install transformers)")
        self.assertTrue(issubclass(MemplanCallback, transformers.TrainerCallback))

    def test_lightning_callback(self):
        try:
            from lightning.pytorch import Callback
        except ImportError:
            try:
                from pytorch_lightning import Callback
            except ImportError:
                self.skipTest("lightning is not installed (not in Debian; pip install lightning)")
        self.assertTrue(issubclass(MemplanLightningCallback, Callback))


if __name__ == "__main__":
    unittest.main(verbosity=2)

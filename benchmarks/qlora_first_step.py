"""Which layers QLoRA quantizes, which of them have a bias, and how a plan reads the input batch's first step.

    python benchmarks/qlora_first_step.py                 # every bundled catalog model
    python benchmarks/qlora_first_step.py gpt2 Qwen/Qwen2-0.5B-Instruct

bitsandbytes' ``Linear4bit`` casts its bias in place on its first forward, so
QLoRA's step 1 leaves the cast biases behind for step 2.  A plan's run of step 2
alone casts them in its own forward; it carries them back to step 1 for step 2's
figures and reads step 1 off the run as it ran (docs/accuracy.md, "The input
batch's first step, read off step 2").  This builds each model on the meta device
as a plan does (the default recipe), counts the layers QLoRA quantizes (every
linear layer and GPT-2's ``Conv1D`` but the head) and those of them with a bias,
and asks the planner's own test (``first_step_derivable``) what it will do.  No
simulation runs; about a second a model.
"""

from __future__ import annotations

import argparse
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", help="model ids, config.json files or model folders (default: every catalog model)")
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from neurarch.inputs.prepare import prepare
    from neurarch.options import Options, PlanOptions
    from neurarch.plan.simulation import first_step_derivable
    from neurarch.plan.train import TrainSetup, qlora_quantized
    from neurarch.sources.catalog import entries

    models = a.models or sorted(entries())
    options = Options(plan=PlanOptions())
    setup = TrainSetup.from_plan(options.plan, mode="qlora", precision=options.precision)
    two = []
    print(f"{'model':42} {'quantized':>9} {'biased':>6}  QLoRA's input batch")
    for model in models:
        model_obj = prepare(model, options).trained.model
        quantized = qlora_quantized(model_obj, setup)
        biased = sum(model_obj.get_submodule(n).bias is not None for n in quantized)
        if not quantized:
            how = "QLoRA does not apply (no linear layer to quantize)"
        elif not first_step_derivable(setup):
            how, two = "two steps simulated", [*two, model]
        elif biased:
            how = "step 1 read off step 2 as it ran; step 2's figures with the cast biases carried back"
        else:
            how = "step 1 read off step 2"
        print(f"{model:42} {len(quantized):>9} {biased:>6}  {how}", flush=True)
    print(f"{len(two)} of {len(models)} simulate two steps (built on meta, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")


if __name__ == "__main__":
    main()

"""Bundled demo training jobs (they import torch; aitop itself never does)."""

#: The demo scenarios, each with one well-known bottleneck (see workload.py).
#: The first four are the original set; ``*_fixed`` are mechanical fixes.
SCENARIOS: tuple[str, ...] = (
    "data", "compute", "checkpoint", "healthy",
    "cpu_saturated", "storage", "producer", "validation", "generator", "checkpoint_durable",
    "compile", "loading", "leak", "hang", "serving", "module_loop", "data_heavy",
    "compute_small", "checkpoint_deep", "inline_loading",
    "data_fixed", "checkpoint_fixed", "compute_fixed", "leak_fixed", "serving_batched",
    "cow", "cow_fixed", "sawtooth",
    "recompile", "recompile_padded", "epoch_workers", "epoch_workers_persistent",
    "serving_preprocess", "serving_preprocess_pool", "recompile_dynamic",
    "optimizer_loop", "optimizer_loop_fixed", "optimizer_loop_sgd", "optimizer_loop_sgd_fixed",
    "quota", "quota_raised", "quota_sized", "fit_loop", "fit_loop_fixed", "fit_loop_waits",
    "recompute", "recompute_fixed",
)

#: Each scenario whose fix is mechanical -> the scenario with that fix applied
#: (demo/config.py says which one setting it changes), so a benchmark can
#: compare a predicted speed-up with a measured one.
FIXED_VARIANTS: dict[str, str] = {
    "data": "data_fixed",
    "checkpoint": "checkpoint_fixed",
    "compute": "compute_fixed",
    "recompile": "recompile_dynamic",
    "epoch_workers": "epoch_workers_persistent",
    "serving_preprocess": "serving_preprocess_pool",
    "optimizer_loop": "optimizer_loop_fixed",
    "optimizer_loop_sgd": "optimizer_loop_sgd_fixed",
    "quota": "quota_raised",
    "fit_loop": "fit_loop_fixed",
    "recompute": "recompute_fixed",
}

#: Scenarios whose point is what comes before the first step (torch.compile
#: compiling, records built in Python): ``aitop demo`` attaches to them at once
#: instead of once they train.
BEFORE_FIRST_STEP: frozenset[str] = frozenset({"compile", "loading"})

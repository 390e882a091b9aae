"""Reading one py-spy window for any loop shape (probes/stack_window.py).

Stacks here are written in py-spy's raw format with full file names, shaped
like real ones (the frames of torch 2.x, transformers and Lightning); source
lines come from a real file this test writes and reads back through
``/proc/self/root``, the way aitop reads a job's own script.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.phases import PhaseClassifier, parse_raw, shorten_path
from aitop.probes.source_lines import SourceLines, is_fetch_line, is_host_sync_line
from aitop.probes.stack_window import summarize_window

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"

TRAIN_PY = """\
import torch
def batches(loader):
    for x, y in loader:
        yield x.float() / 255, y
def train(model, loader, opt):
    for x, y in batches(loader):
        loss = model(x).sum()
        loss.backward()
        opt.step()
        print(loss.item())
        if True:
            evaluate_model(model, loader)
"""


@pytest.fixture(scope="module")
def classifier() -> PhaseClassifier:
    return load_knowledge_base().phases.classifier()


@pytest.fixture()
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAIN_PY)
    return path


def reader(pid: int = os.getpid()):
    lines = SourceLines(pid)
    return lines.line


def raw(*lines: tuple[str, str, int]) -> str:
    """(thread, ';'-joined frames, count) -> py-spy raw text."""
    return "\n".join(f"thread ({tid}): {name};{frames} {n}" for tid, name, n, frames in
                     [(t.split(":")[0], t.split(":")[1], n, f) for t, f, n in lines])


def fwd(script: Path, line: int) -> str:
    return (f"train ({script}:{line});Module._call_impl ({SITE}/torch/nn/modules/module.py:1789);"
            f"Linear.forward ({SITE}/torch/nn/modules/linear.py:134)")


def bwd(script: Path) -> str:
    return (f"train ({script}:8);Tensor.backward ({SITE}/torch/_tensor.py:623);"
            f"_engine_run_backward ({SITE}/torch/autograd/graph.py:979)")


def opt(script: Path) -> str:
    return f"train ({script}:9);SGD.step ({SITE}/torch/optim/sgd.py:120)"


def test_paths_are_shortened_like_py_spy_but_user_code_stays_absolute() -> None:
    assert shorten_path(f"{SITE}/torch/_tensor.py") == "torch/_tensor.py"
    assert shorten_path(f"{STDLIB}/queue.py") == "queue.py"
    assert shorten_path("/home/me/proj/train.py") == "/home/me/proj/train.py"


def test_line_kinds() -> None:
    assert is_fetch_line("    for x, y in batches(loader):")
    assert is_fetch_line("        batch = next(it)")
    assert not is_fetch_line("        loss = model(x)")
    # A call named for producing a batch, assigned from (nanoGPT, pytorch/examples).
    assert is_fetch_line("        X, Y = get_batch('train')")
    assert is_fetch_line("    data, targets = get_batch(train_data, i)")
    assert is_fetch_line("    batch = self._load_batch(index)")
    assert is_fetch_line("    inputs = loader.next_batch()")
    # One that runs the step on a batch, or reads a size, or a comment, is none.
    assert not is_fetch_line("    loss = train_batch(model, batch)")
    assert not is_fetch_line("    n = get_batch_size()")
    # Nor one named for running a model to make one (a GAN's generator).
    assert not is_fetch_line("    fake = generate_batch(netG, noise)")
    assert not is_fetch_line("    # x, y = get_batch()")
    assert is_host_sync_line("        print(loss.item())")
    assert is_host_sync_line("    torch.cuda.synchronize()")
    assert is_host_sync_line("    preds = out.argmax(1).cpu()")
    assert not is_host_sync_line("    x = x.to(device)  # .item() later")


def test_generator_wrapped_loader_is_data_wait_and_producer_work_counts(
    classifier: PhaseClassifier, script: Path,
) -> None:
    # The generator does its own work (leaf in the job's code, no DataLoader
    # frame): the loop frame stands at its `for` header, so it is data wait.
    text = raw(
        ("1:MainThread", f"<module> ({script}:1);" + fwd(script, 7), 30),
        ("1:MainThread", f"<module> ({script}:1);" + bwd(script), 30),
        ("1:MainThread", f"<module> ({script}:1);" + opt(script), 10),
        ("1:MainThread", f"<module> ({script}:1);train ({script}:6);batches ({script}:4)", 30),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1,
                         source=reader())
    assert w.loop_frame == f"train ({script})"
    assert w.phase_counts["data_wait"] == 30
    assert w.phase_counts["other"] == 0
    assert w.data_source == "own code"


def test_producer_thread_and_queue(classifier: PhaseClassifier, script: Path) -> None:
    get = (f"train ({script}:6);batches ({script}:3);Queue.get ({STDLIB}/queue.py:171);"
           f"Condition.wait ({STDLIB}/threading.py:327)")
    producer = (f"Thread._bootstrap ({STDLIB}/threading.py:1002);Thread.run "
                f"({STDLIB}/threading.py:982);produce ({script}:3)")
    text = raw(
        ("1:MainThread", get, 80),
        ("1:MainThread", fwd(script, 7), 10),
        ("1:MainThread", bwd(script), 10),
        ("2:producer", producer, 95),
        ("2:producer", f"Thread.run ({STDLIB}/threading.py:982);Queue.put "
                       f"({STDLIB}/queue.py:140);Condition.wait ({STDLIB}/threading.py:327)", 5),
        ("3:logger", f"Thread.run ({STDLIB}/threading.py:982);Event.wait "
                     f"({STDLIB}/threading.py:629)", 100),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.thread_id == "1", "the thread running forward/backward is the training thread"
    assert w.phase_counts["data_wait"] == 80
    assert w.data_source == "thread queue"
    busiest = w.other_threads[0]
    assert (busiest.name, busiest.busy_samples) == ("producer", 95)
    assert busiest.top_frame is not None and busiest.top_frame.startswith("produce (")
    logger = next(t for t in w.other_threads if t.name == "logger")
    assert logger.busy_samples == 0, "a thread parked in Event.wait is not working"


def test_a_producer_calling_functional_layers_is_not_the_training_thread(
    classifier: PhaseClassifier, script: Path,
) -> None:
    # The producer's F.normalize reads as forward; only the loop runs backward.
    producer = (f"Thread.run ({STDLIB}/threading.py:982);produce ({script}:3);"
                f"normalize ({SITE}/torch/nn/functional.py:5000)")
    get = f"train ({script}:6);Queue.get ({STDLIB}/queue.py:171)"
    text = raw(
        ("2:producer", producer, 60),
        ("1:MainThread", get, 90),
        ("1:MainThread", bwd(script), 3),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.thread_id == "1"


def test_a_producer_building_samples_before_the_first_step_is_not_the_training_thread(
    classifier: PhaseClassifier, script: Path,
) -> None:
    # No step yet: the loop waits on its queue while the producer's dataset
    # blurs images with conv2d (forward frames beneath ``__getitem__``).
    producer = (f"Thread.run ({STDLIB}/threading.py:982);produce ({script}:3);"
                f"Images.__getitem__ ({script}:5);conv2d ({SITE}/torch/nn/functional.py:100)")
    get = (f"train ({script}:6);Queue.get ({STDLIB}/queue.py:171);"
           f"Condition.wait ({STDLIB}/threading.py:327)")
    text = raw(("2:producer", producer, 90), ("1:MainThread", get, 100))
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.thread_id == "1"
    assert w.phase_counts["forward"] == 0
    # The same frames without the dataset method are a forward pass: a serving
    # thread answering requests is the thread to watch.
    server = producer.replace(f"Images.__getitem__ ({script}:5);", "")
    w = summarize_window(parse_raw(raw(("2:server", server, 90), ("1:MainThread", get, 100))),
                         classifier, pid=1, t_start=0, t_end=1)
    assert w.thread_id == "2"


def test_prefetch_thread_in_dataloader_frames_does_not_become_the_training_thread(
    classifier: PhaseClassifier, script: Path,
) -> None:
    dl = f"{SITE}/torch/utils/data/dataloader.py"
    prefetch = (f"Thread.run ({STDLIB}/threading.py:982);fill ({script}:3);"
                f"_MultiProcessingDataLoaderIter.__next__ ({dl}:733)")
    text = raw(
        ("2:prefetch", prefetch, 100),
        ("1:MainThread", fwd(script, 7), 40),
        ("1:MainThread", bwd(script), 40),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.thread_id == "1"


def test_host_sync_line_is_sync_not_python_overhead(
    classifier: PhaseClassifier, script: Path,
) -> None:
    text = raw(
        ("1:MainThread", fwd(script, 7), 20),
        ("1:MainThread", bwd(script), 20),
        ("1:MainThread", f"train ({script}:10)", 50),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.phase_counts["sync"] == 50
    assert w.phase_counts["other"] == 0
    # Without the source the same samples stay "other": the reading is the line's.
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.phase_counts["other"] == 50


SAVE_PY = """\
import os, torch
def train(model, loader, opt, path):
    for step, (x, y) in enumerate(loader):
        model(x).sum().backward()
        opt.step()
        with open(path, "wb") as f:
            torch.save(model.state_dict(), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path, path + ".done")
        log.flush()
"""


def test_the_flush_fsync_and_rename_after_a_save_are_checkpoint_time(tmp_path: Path) -> None:
    script = tmp_path / "save.py"
    script.write_text(SAVE_PY)
    classifier = load_knowledge_base().phases.classifier()
    save = (f"train ({script}:7);save ({SITE}/torch/serialization.py:965);"
            f"_save ({SITE}/torch/serialization.py:1200)")
    text = raw(
        ("1:MainThread", f"train ({script}:4);Tensor.backward ({SITE}/torch/_tensor.py:623)", 20),
        ("1:MainThread", f"train ({script}:5);SGD.step ({SITE}/torch/optim/sgd.py:120)", 20),
        ("1:MainThread", save, 10),
        ("1:MainThread", f"train ({script}:8)", 3),   # f.flush()
        ("1:MainThread", f"train ({script}:9)", 30),  # os.fsync(f.fileno())
        ("1:MainThread", f"train ({script}:10)", 2),  # os.replace(...)
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.phase_counts["checkpoint"] == 45
    assert w.phase_counts["other"] == 0
    # A flush in a function that saves nothing (a log) stays what it was.
    elsewhere = raw(
        ("1:MainThread", f"train ({script}:4);Tensor.backward ({SITE}/torch/_tensor.py:623)", 20),
        ("1:MainThread", f"train ({script}:5);SGD.step ({SITE}/torch/optim/sgd.py:120)", 20),
        ("1:MainThread", f"train ({script}:11)", 5),
    )
    w = summarize_window(parse_raw(elsewhere), classifier, pid=1, t_start=0, t_end=1,
                         source=reader())
    assert w.phase_counts["other"] == 5 and w.phase_counts["checkpoint"] == 0


PERSIST_PY = """\
import os, torch
def persist(model, path):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with open(path, "wb") as f:
        torch.save(state, f)
        os.fsync(f.fileno())
def step(model, x, opt, path, n):
    model(x).sum().backward()
    opt.step()
    torch.save(model.state_dict(), path)
"""


def test_a_function_of_the_jobs_own_that_only_saves_is_checkpoint_throughout(
    tmp_path: Path, classifier: PhaseClassifier,
) -> None:
    script = tmp_path / "persist.py"
    script.write_text(PERSIST_PY)
    save = f"save ({SITE}/torch/serialization.py:965);_save ({SITE}/torch/serialization.py:1200)"
    step = (f"train ({script}:20);Tensor.backward ({SITE}/torch/_tensor.py:623)", 20)
    text = raw(
        ("1:MainThread", step[0], step[1]),
        ("1:MainThread", f"train ({script}:21);SGD.step ({SITE}/torch/optim/sgd.py:120)", 20),
        ("1:MainThread", f"train ({script}:22);persist ({script}:5);{save}", 30),
        # The state dict's copy, the file's open (it truncates), the fsync.
        ("1:MainThread", f"train ({script}:22);persist ({script}:3);<dictcomp> ({script}:3)", 8),
        ("1:MainThread", f"train ({script}:22);persist ({script}:4)", 6),
        ("1:MainThread", f"train ({script}:22);persist ({script}:6)", 10),
        ("1:MainThread", f"train ({script}:23)", 5),  # the loop's own other work
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.loop_frame == f"train ({script})"
    assert w.phase_counts["checkpoint"] == 54
    assert w.phase_counts["other"] == 5
    # A step function that saves now and then is no saver: its other time is the step's.
    text = raw(
        ("1:MainThread", f"train ({script}:20);step ({script}:9);Tensor.backward "
                         f"({SITE}/torch/_tensor.py:623)", 20),
        ("1:MainThread", f"train ({script}:20);step ({script}:10);SGD.step "
                         f"({SITE}/torch/optim/sgd.py:120)", 20),
        ("1:MainThread", f"train ({script}:20);step ({script}:11);{save}", 10),
        ("1:MainThread", f"train ({script}:20);step ({script}:8)", 7),
        ("1:MainThread", f"train ({script}:21)", 3),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.phase_counts["checkpoint"] == 10
    assert w.phase_counts["other"] == 10


def test_a_stray_queue_sample_on_the_forward_line_is_not_an_evaluation(
    classifier: PhaseClassifier, script: Path,
) -> None:
    # py-spy placed one sample of the queue's get on the loop's forward line: that
    # line leads into forward and "data" and never into backward, but it calls
    # torch, not a function of the job's own that evaluates.
    stray = f"train ({script}:7);Queue.get ({STDLIB}/queue.py:180)"
    text = raw(
        ("1:MainThread", fwd(script, 7), 30),
        ("1:MainThread", stray, 1),
        ("1:MainThread", bwd(script), 30),
        ("1:MainThread", opt(script), 10),
        ("1:MainThread", f"train ({script}:6);Queue.get ({STDLIB}/queue.py:171)", 20),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    assert w.phase_counts["eval"] == 0
    assert w.phase_counts["forward"] == 30


def test_evaluation_by_name_and_by_shape(classifier: PhaseClassifier, script: Path) -> None:
    dl = f"{SITE}/torch/utils/data/dataloader.py"
    ev = f"train ({script}:12);evaluate_model ({script}:20)"
    text = raw(
        ("1:MainThread", fwd(script, 7), 20),
        ("1:MainThread", bwd(script), 20),
        ("1:MainThread", f"{ev};Module._call_impl ({SITE}/torch/nn/modules/module.py:1789)", 40),
        ("1:MainThread", f"{ev};_SingleProcessDataLoaderIter._next_data ({dl}:789)", 10),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1, source=reader())
    # "evaluate_model" matches by name; the same shape under an unremarkable name
    # ("score") is read from the loop line: forward and data, never backward.
    assert w.phase_counts["eval"] == 50
    renamed = text.replace("evaluate_model", "score")
    w = summarize_window(parse_raw(renamed), classifier, pid=1, t_start=0, t_end=1,
                         source=reader())
    assert w.phase_counts["eval"] == 50
    assert w.phase_counts["forward"] == 20


def test_a_training_function_named_like_evaluation_still_trains(
    classifier: PhaseClassifier, script: Path,
) -> None:
    outer = f"train_and_evaluate ({script}:30)"
    text = raw(
        ("1:MainThread", f"{outer};" + fwd(script, 7), 30),
        ("1:MainThread", f"{outer};" + bwd(script), 30),
        ("1:MainThread", f"{outer};" + opt(script), 10),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.phase_counts["eval"] == 0
    assert w.phase_counts["backward"] == 30


def test_hf_trainer_loop_frame_is_the_inner_training_loop(classifier: PhaseClassifier) -> None:
    tr = f"{SITE}/transformers/trainer.py"
    root = (f"main (/job/run.py:50);Trainer.train ({tr}:2245);"
            f"Trainer._inner_training_loop ({tr}:2560)")
    text = raw(
        ("1:MainThread", f"{root};Trainer.training_step ({tr}:3740);Trainer.compute_loss "
                         f"({tr}:3800);Module._call_impl "
                         f"({SITE}/torch/nn/modules/module.py:1789)", 40),
        ("1:MainThread", f"{root};Trainer.training_step ({tr}:3760);Accelerator.backward "
                         f"({SITE}/accelerate/accelerator.py:2400)", 40),
        ("1:MainThread", f"{root};Trainer.get_batch_samples ({tr}:5100);DataLoaderShard.__iter__ "
                         f"({SITE}/accelerate/data_loader.py:560)", 20),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.loop_frame == "Trainer._inner_training_loop (transformers/trainer.py)"
    assert w.phase_counts["data_wait"] == 20
    assert "hf_trainer" in w.techniques_seen


def test_cuda_shaped_waits_read_as_sync(classifier: PhaseClassifier, script: Path) -> None:
    """Where a CUDA job's host waits for the GPU, as py-spy shows them.

    The wait happens in C++ under the last Python frame: ``torch.cuda.synchronize``
    (a library frame), ``loss.item()`` in the job's own line, and printing a CUDA
    tensor, whose last Python frame is torch's own ``.tolist()`` in _tensor_str.
    Read from the real torch sources installed here, through the path book that
    maps py-spy's full file names to the shortened ones.
    """
    import torch

    tensor_str = Path(torch.__file__).parent / "_tensor_str.py"
    line = next(i for i, text in enumerate(tensor_str.read_text().splitlines(), 1)
                if ".tolist()" in text)
    printing = (f"train ({script}:10);Tensor.__repr__ ({tensor_str.parent}/_tensor.py:568);"
                f"_str ({tensor_str}:720);_tensor_str ({tensor_str}:{line})")
    text = raw(
        ("1:MainThread", fwd(script, 7), 10),
        ("1:MainThread", bwd(script), 10),
        ("1:MainThread", f"train ({script}:11);synchronize "
                         f"({SITE}/torch/cuda/__init__.py:1040)", 20),
        ("1:MainThread", f"train ({script}:10)", 30),
        ("1:MainThread", printing, 30),
    )
    paths: dict[str, str] = {}
    stacks = parse_raw(text, paths)
    lines = SourceLines(os.getpid())
    w = summarize_window(stacks, classifier, pid=1, t_start=0, t_end=1,
                         source=lambda f, n: lines.line(paths.get(f, f), n))
    assert w.phase_counts["sync"] == 80
    assert w.phase_counts["other"] == 0


def test_lightning_loop_frame_is_the_epoch_loop_even_without_data_waits(
    classifier: PhaseClassifier,
) -> None:
    """Lightning runs forward and backward inside optimizer.step(closure)."""
    pl = f"{SITE}/lightning/pytorch"
    advance = (f"fit (/job/train.py:60);_TrainingEpochLoop.run ({pl}/loops/training_epoch_loop.py:"
               f"154);_TrainingEpochLoop.advance ({pl}/loops/training_epoch_loop.py:352);"
               f"_AutomaticOptimization.run ({pl}/loops/optimization/automatic.py:192);"
               f"Precision.optimizer_step ({pl}/plugins/precision/precision.py:122);"
               f"SGD.step ({SITE}/torch/optim/sgd.py:100)")
    closure = f"{advance};_wrapping_function ({SITE}/torch/optim/optimizer.py:80)"
    text = raw(
        ("1:MainThread", f"{closure};Module._call_impl ({SITE}/torch/nn/modules/module.py:1789)",
         40),
        ("1:MainThread", f"{closure};Tensor.backward ({SITE}/torch/_tensor.py:623)", 40),
        ("1:MainThread", advance, 20),
    )
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.loop_frame == (
        "_TrainingEpochLoop.advance (lightning/pytorch/loops/training_epoch_loop.py)"
    )


def compiled_job(script: Path, line: int, *inner: str) -> str:
    """The training loop calling a torch.compile'd model (frames as torch 2.13 names them)."""
    return ";".join((f"train ({script}:{line})",
                     f"OptimizedModule.__call__ ({SITE}/torch/_dynamo/eval_frame.py:511)",
                     f"Module._call_impl ({SITE}/torch/nn/modules/module.py:1789)", *inner))


def test_torch_compile_at_work_is_compile_and_a_compiled_step_is_forward(
    classifier: PhaseClassifier, script: Path,
) -> None:
    """Frames read from a real torch.compile run on this machine's torch."""
    compiling = compiled_job(
        script, 7,
        "_TorchDynamoContext.__call__.<locals>.compile_wrapper "
        f"({SITE}/torch/_dynamo/eval_frame.py:1166)",
        f"CatchErrorsWrapper.__call__ ({SITE}/torch/_dynamo/convert_frame.py:2628)",
        f"_compile ({SITE}/torch/_dynamo/convert_frame.py:2102)",
        f"GraphLowering.codegen ({SITE}/torch/_inductor/graph.py:2611)",
        f"_run_compile_cmd ({SITE}/torch/_inductor/cpp_builder.py:696)",
        f"Popen.communicate ({STDLIB}/subprocess.py:1196)")
    compiled = compiled_job(
        script, 7,
        f"_TorchDynamoContext.__call__.<locals>._fn ({SITE}/torch/_dynamo/eval_frame.py:1005)",
        f"runtime_wrapper ({SITE}/torch/_functorch/_aot_autograd/runtime_wrappers.py:343)",
        f"CompiledFxGraph.__call__ ({SITE}/torch/_inductor/output_code.py:650)")
    text = raw(("1:MainThread", compiling, 30), ("1:MainThread", compiled, 20),
               ("1:MainThread", bwd(script), 20), ("1:MainThread", opt(script), 10))
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.phase_counts["compile"] == 30
    assert w.phase_counts["forward"] == 20


def test_capturing_cuda_graphs_is_warm_up_and_their_replays_are_steps(
    classifier: PhaseClassifier, script: Path,
) -> None:
    """CUDA graph capture (make_graphed_callables; the recording of
    mode="reduce-overhead"'s graph trees) is a one-time warm-up, counted with
    compiling and seen as a capture; replaying the recorded graphs is a step.
    Functions and lines as torch 2.13's sources name them (no GPU here)."""
    trees = f"{SITE}/torch/_inductor/cudagraph_trees.py"
    graphed = ";".join((
        f"train ({script}:5)",
        f"make_graphed_callables ({SITE}/torch/cuda/graphs.py:680)",
        f"Module._call_impl ({SITE}/torch/nn/modules/module.py:1789)",
        f"linear ({SITE}/torch/nn/functional.py:2300)"))
    recording = compiled_job(
        script, 7,
        f"CUDAGraphTreeManager.run ({trees}:2186)",
        f"CUDAGraphTreeManager.record_function ({trees}:2431)",
        f"CUDAGraphNode.run_first_inputs ({trees}:1205)",
        f"CUDAGraphNode._record ({trees}:1380)")
    replaying = compiled_job(
        script, 7,
        f"CUDAGraphTreeManager.run ({trees}:2186)",
        f"CUDAGraphTreeManager.execute_node ({trees}:2440)",
        f"CUDAGraphNode.run ({trees}:1240)")
    text = raw(("1:MainThread", graphed, 12), ("1:MainThread", recording, 18),
               ("1:MainThread", replaying, 20), ("1:MainThread", bwd(script), 20))
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.phase_counts["compile"] == 30
    assert w.phase_counts["forward"] == 20
    assert "cuda_graph_capture" in w.techniques_seen
    steady = summarize_window(parse_raw(raw(("1:MainThread", replaying, 20),
                                            ("1:MainThread", bwd(script), 20))),
                              classifier, pid=1, t_start=0, t_end=1)
    assert steady.phase_counts["compile"] == 0
    assert "cuda_graph_capture" not in steady.techniques_seen


def test_torch_compile_importing_dynamo_is_compile_not_other(
    classifier: PhaseClassifier, script: Path,
) -> None:
    """The torch.compile() call imports dynamo and inductor for seconds (frames read from
    a real compile demo on this machine): that is compiling, not Python overhead. The
    same imports without it (an optimizer's first use makes them) are no compiling."""
    importing = ";".join((
        f"train ({script}:7)",
        f"compile ({SITE}/torch/__init__.py:2620)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        f"<module> ({SITE}/torch/_dynamo/variables/base.py:32)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        f"<module> ({SITE}/torch/_dynamo/source.py:538)",
        f"dataclass_with_cached_hash.<locals>.wrap ({SITE}/torch/_guards.py:1356)",
        f"_create_fn ({STDLIB}/dataclasses.py:433)"))
    lazily = ";".join((
        f"train ({script}:7)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        f"<module> ({SITE}/torch/_inductor/config.py:1)",
        f"_create_fn ({STDLIB}/dataclasses.py:433)"))
    # An optimizer built at module level imports dynamo through its _disable_dynamo
    # wrapper, down through convert_frame and symbolic_convert (a node agent's first
    # window of a plain job read 65 % "compile" from these, and warned of warming up).
    optimizer = ";".join((
        f"<module> ({script}:4)",
        f"SGD.__init__ ({SITE}/torch/optim/sgd.py:65)",
        f"Optimizer.__init__ ({SITE}/torch/optim/optimizer.py:405)",
        f"_disable_dynamo.<locals>.inner ({SITE}/torch/_compile.py:47)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        f"<module> ({SITE}/torch/_dynamo/__init__.py:13)",
        f"<module> ({SITE}/torch/_dynamo/convert_frame.py:62)",
        f"<module> ({SITE}/torch/_dynamo/symbolic_convert.py:56)",
        f"<module> ({SITE}/torch/_dynamo/exc.py:46)"))
    plain = ";".join((f"train ({script}:7)", f"_create_fn ({STDLIB}/dataclasses.py:433)"))
    text = raw(("1:MainThread", importing, 30), ("1:MainThread", lazily, 10),
               ("1:MainThread", optimizer, 8),
               ("1:MainThread", plain, 5), ("1:MainThread", bwd(script), 5))
    w = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)
    assert w.phase_counts["compile"] == 30
    assert w.phase_counts["optimizer"] == 8  # building the optimizer, not compiling
    assert w.phase_counts["other"] == 15


def test_a_loop_frame_learnt_without_data_waits_is_not_kept() -> None:
    """A node agent attached while a job built its model at module level: that window's
    loop frame, ``<module>``, passes every later sample too; kept, it hid the job's
    counter in ``train()`` for good (no steps/s, probe 'partial' for the whole run)."""
    from aitop.probes.samples import StackWindow
    from aitop.probes.stack_window import kept_loop_frame

    start_up = StackWindow(0.0, 2.0, "MainThread", "1", 20, phase_counts={"forward": 20},
                           loop_frame="<module> (<string>)")
    assert kept_loop_frame(start_up, None) is None
    assert kept_loop_frame(start_up, "train (train.py)") == "train (train.py)"
    fetching = StackWindow(2.0, 4.0, "MainThread", "1", 20,
                           phase_counts={"data_wait": 5, "forward": 15},
                           loop_frame="train (train.py)")
    assert kept_loop_frame(fetching, "<module> (<string>)") == "train (train.py)"
    lost = StackWindow(4.0, 6.0, "MainThread", "1", 0, phase_counts={"data_wait": 3})
    assert kept_loop_frame(lost, "train (train.py)") == "train (train.py)"

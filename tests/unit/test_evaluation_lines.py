"""The job's own evaluation passes, read from its loop's lines (probes/evaluation_lines.py,
probes/source_blocks.py).

Stacks are py-spy's raw format shaped like real ones; the scripts are real
files this test writes and reads back through ``/proc/self/root``, the way
aitop reads a job's own source.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.phases import Frame, PhaseClassifier, parse_frame, parse_raw
from aitop.probes.source_blocks import enclosing_blocks
from aitop.probes.source_lines import SourceLines
from aitop.probes.stack_window import summarize_window

SITE = "/venv/lib/python3.11/site-packages"
MODULE = f"{SITE}/torch/nn/modules/module.py"
DATALOADER = f"{SITE}/torch/utils/data/dataloader.py"

# Line numbers matter: the stacks below name them.
MODULE_LEVEL = """\
import torch
model, opt, loss_fn = make()
step = 0
while True:
    x, y = next(batches)
    loss = loss_fn(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if step % 20 == 0:
        with torch.no_grad():
            vl = sum(loss_fn(model(a), b).item() for a, b in val)
        print(step, vl)
"""

PER_EPOCH = """\
import torch
def train(model, opt, train_loader, val_loader):
    for epoch in range(10):
        model.train()
        for x, y in train_loader:
            loss = model(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        correct = 0
        with torch.no_grad():
            for x, y in val_loader:
                out = model(x)
                correct += (out.argmax(1) == y).sum().item()
        print(epoch, correct)
"""

HELPERS = """\
import torch
def train(model, opt, loader, val, vae, crops):
    for x, y in loader:
        latents = encode(vae, x)
        views = embed_views(model, crops)
        loss = model(latents).sum() + views
        loss.backward()
        opt.step()
        if opt.state:
            score(model, val)

@torch.no_grad()
def score(model, val):
    total = 0.0
    for a, b in val:
        total += model(a).sum().item()
    return total

def encode(vae, x):
    with torch.no_grad():
        return vae(x)

def embed_views(model, crops):
    outs = []
    for c in crops:
        outs.append(model(c))
    return sum(o.sum() for o in outs)
"""

ROLLOUT = """\
import torch
for iteration in range(1000):
    for step in range(128):
        with torch.no_grad():
            action, value = agent(obs)
        obs = env.step(action)
    for epoch in range(4):
        loss = agent.loss(obs)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if iteration % 10 == 0:
        sample = generate(agent, 64)

@torch.no_grad()
def generate(model, n):
    out = []
    for _ in range(n):
        out.append(model(out))
    return out
"""

# nanoGPT's shape: a module-level loop calls a helper decorated with
# @torch.no_grad(), whose wrapper (torch/utils/_contextlib.py) is a frame of
# its own between the loop's line and the helper.
DECORATED = """\
import torch
@torch.no_grad()
def estimate_loss():
    out = {}
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    return out
iter_num = 0
while True:
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
    logits, loss = model(X, Y)
    X, Y = get_batch('train')
    loss.backward()
    optimizer.step()
    iter_num += 1
"""

SERVER = """\
import torch
def serve(model, requests):
    while True:
        batch = requests.get()
        with torch.no_grad():
            for item in batch:
                out = model(item)
"""


@pytest.fixture(scope="module")
def classifier() -> PhaseClassifier:
    return load_knowledge_base().phases.classifier()


def frames_of(stack: str) -> list[Frame]:
    """``f (a.py:1);g (b.py:2)``, root first, as frames."""
    return [parse_frame(text) for text in stack.split(";")]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def read_line(file: str, line: int) -> str | None:
    return SourceLines(os.getpid()).line(file, line)


def raw(*lines: tuple[str, int]) -> str:
    """(';'-joined frames, count) of the main thread -> py-spy raw text."""
    return "\n".join(f"thread (1): MainThread;{frames} {n}" for frames, n in lines)


def forward(caller: str) -> str:
    return f"{caller};Module._call_impl ({MODULE}:1789)"


def backward(caller: str) -> str:
    return f"{caller};Tensor.backward ({SITE}/torch/_tensor.py:623)"


def optimizer(caller: str) -> str:
    return f"{caller};SGD.step ({SITE}/torch/optim/sgd.py:120)"


def read(classifier: PhaseClassifier, text: str, source: object = read_line) -> dict[str, int]:
    window = summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1,
                              source=source)  # type: ignore[arg-type]
    return window.phase_counts


def test_the_blocks_around_a_line_are_its_loops_and_gradient_mode(tmp_path: Path) -> None:
    module = str(write(tmp_path, "loop.py", MODULE_LEVEL))
    inline = enclosing_blocks(read_line, module, 13)
    assert inline is not None and inline.loops == (4,) and inline.gradients_off
    step = enclosing_blocks(read_line, module, 8)
    assert step is not None and step.loops == (4,) and not step.gradients_off
    per_epoch = str(write(tmp_path, "epochs.py", PER_EPOCH))
    val = enclosing_blocks(read_line, per_epoch, 14)
    assert val is not None and val.loops == (13, 3) and val.gradients_off
    assert val.data_loops == {13}  # the epoch loop counts
    header = enclosing_blocks(read_line, per_epoch, 13)  # the header is its own loop
    assert header is not None and header.loops == (13, 3)
    helpers = str(write(tmp_path, "helpers.py", HELPERS))
    scored = enclosing_blocks(read_line, helpers, 16)  # stops at its def; the decorator counts
    assert scored is not None and scored.loops == (15,) and scored.gradients_off
    crop = enclosing_blocks(read_line, helpers, 26)
    assert crop is not None and crop.loops == (25,) and not crop.gradients_off
    assert enclosing_blocks(read_line, str(tmp_path / "gone.py"), 3) is None


def test_an_inline_evaluation_at_module_level_is_evaluation(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    script = write(tmp_path, "loop.py", MODULE_LEVEL)
    loop = f"<module> ({script}:{{}})"
    genexpr = f"{loop.format(13)};<genexpr> ({script}:13)"
    text = raw(
        (forward(loop.format(6)), 20),
        (backward(loop.format(8)), 20),
        (optimizer(loop.format(9)), 6),
        (f"{loop.format(5)};_MultiProcessingDataLoaderIter._next_data ({DATALOADER}:1430)", 4),
        (forward(genexpr), 40),
        (f"{genexpr};Tensor.item ({SITE}/torch/_tensor.py:50)", 5),
    )
    counts = read(classifier, text)
    assert counts["eval"] == 45
    assert counts["forward"] == 20 and counts["backward"] == 20


def test_a_validation_loop_written_after_each_epoch_is_evaluation(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    script = write(tmp_path, "epochs.py", PER_EPOCH)
    loop = f"train ({script}:{{}})"
    text = raw(
        (f"{loop.format(5)};_MultiProcessingDataLoaderIter._next_data ({DATALOADER}:1430)", 10),
        (forward(loop.format(6)), 25),
        (backward(loop.format(8)), 25),
        (optimizer(loop.format(9)), 5),
        (f"{loop.format(13)};_MultiProcessingDataLoaderIter._next_data ({DATALOADER}:1430)", 6),
        (forward(loop.format(14)), 30),
        (f"{loop.format(15)};Tensor.item ({SITE}/torch/_tensor.py:50)", 4),
    )
    counts = read(classifier, text)
    # Its data waits, forward passes and host syncs are all the evaluation's.
    assert counts["eval"] == 40
    assert counts["forward"] == 25 and counts["data_wait"] == 10
    # Without its source nothing says the second loop is not the first.
    blind = read(classifier, text, source=None)
    assert blind["eval"] == 0


def test_a_helper_that_loops_with_gradients_off_evaluates_but_a_frozen_encoder_does_not(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    script = write(tmp_path, "helpers.py", HELPERS)
    loop = f"train ({script}:{{}})"
    text = raw(
        (forward(f"{loop.format(4)};encode ({script}:21)"), 15),
        (forward(f"{loop.format(5)};embed_views ({script}:26)"), 15),
        (forward(loop.format(6)), 15),
        (backward(loop.format(7)), 20),
        (optimizer(loop.format(8)), 5),
        (forward(f"{loop.format(10)};score ({script}:16)"), 30),
    )
    counts = read(classifier, text)
    # score() repeats forward passes over a list with gradients off: evaluation.
    # encode() turns gradients off but runs once a step; embed_views() loops
    # with gradients on (its outputs feed the backward): both are the step's.
    assert counts["eval"] == 30
    assert counts["forward"] == 45


def decorated_loop(tmp_path: Path, counts: tuple[int, int, int, int]) -> str:
    """DECORATED's samples, raw: estimate_loss() behind torch's decorator wrapper,
    then the step's forward, backward and optimizer, ``counts`` of each."""
    script = write(tmp_path, "train.py", DECORATED)
    loop = f"<module> ({script}:{{}})"
    wrapper = f"context_decorator.<locals>.decorate_context ({SITE}/torch/utils/_contextlib.py:124)"
    evaluating, step_forward, step_backward, step_optimizer = counts
    return raw(
        (forward(f"{loop.format(16)};{wrapper};estimate_loss ({script}:9)"), evaluating),
        (forward(loop.format(17)), step_forward),
        (backward(loop.format(19)), step_backward),
        (optimizer(loop.format(20)), step_optimizer),
    )


def test_a_helper_behind_torchs_no_grad_decorator_evaluates(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    counts = read(classifier, decorated_loop(tmp_path, (30, 40, 40, 6)))
    # The wrapper is torch's, not the job's: seen through, estimate_loss() repeats
    # forward passes over the splits with gradients off, as an inline loop would.
    assert counts["eval"] == 30
    assert counts["forward"] == 40


def test_a_rollout_or_generation_counting_steps_is_not_evaluation(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    script = write(tmp_path, "ppo.py", ROLLOUT)
    loop = f"<module> ({script}:{{}})"
    text = raw(
        (forward(loop.format(5)), 40),
        (f"{loop.format(6)};step (/job/env.py:30)", 20),
        (forward(loop.format(8)), 10),
        (backward(loop.format(10)), 15),
        (optimizer(loop.format(11)), 5),
        (forward(f"{loop.format(13)};generate ({script}:19)"), 20),
    )
    counts = read(classifier, text)
    # Both loop over a counter, not over data: fewer rollouts or samples would
    # change what the job learns, not how often it validates.
    assert counts["eval"] == 0
    assert counts["forward"] == 70


def test_a_policys_distribution_is_its_forward_pass(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    """A CleanRL-style rollout samples a Categorical over the policy's logits: torch
    ops outside any nn.Module frame, read as "other" before (15 % of an unseen PPO
    job against its own 8 %, which put its threads ceiling under what it measured)."""
    script = write(tmp_path, "ppo.py", ROLLOUT)
    loop = f"<module> ({script}:{{}})"
    dist = f"{SITE}/torch/distributions"
    text = raw(
        (forward(loop.format(5)), 20),
        (f"{loop.format(5)};Categorical.__init__ ({dist}/categorical.py:70)", 6),
        (f"{loop.format(5)};Categorical.sample ({dist}/categorical.py:130)", 5),
        (f"{loop.format(5)};Categorical.log_prob ({dist}/categorical.py:140)", 4),
        (backward(loop.format(10)), 15),
        (optimizer(loop.format(11)), 5),
    )
    counts = read(classifier, text)
    assert counts["forward"] == 35 and counts["other"] == 0 and counts["eval"] == 0



def test_a_forward_pass_recomputed_by_activation_checkpointing_is_backward(
    classifier: PhaseClassifier,
) -> None:
    """torch.utils.checkpoint runs each block's forward again inside backward: an
    unseen job read forward 35-46 % against its own 22.5 %, the recompute's 19 %
    among them. The checkpointed forward pass itself is still forward."""
    ckpt = f"{SITE}/torch/utils/checkpoint.py"
    module = f"Module._call_impl ({MODULE}:1789)"
    engine = (f"Tensor.backward ({SITE}/torch/_tensor.py:623);"
              f"_engine_run_backward ({SITE}/torch/autograd/graph.py:829)")
    loop = "train (/job/ckpt.py:60)"
    recomputed = [f"{loop};{engine};_checkpoint_hook.__init__.<locals>.unpack_hook "
                  f"({ckpt}:1180);_checkpoint_hook.__init__.<locals>.recompute_fn "
                  f"({ckpt}:1657);{module};Linear.forward ({SITE}/torch/nn/modules/"
                  "linear.py:134)",
                  f"{loop};{engine};CheckpointFunction.backward ({ckpt}:300);{module}"]
    checkpointed = f"{loop};{module};checkpoint ({ckpt}:495);{module}"
    for stack in recomputed:
        assert classifier.classify(frames_of(stack)).phase == "backward", stack
    assert classifier.classify(frames_of(checkpointed)).phase == "forward"

def test_which_loops_take_their_items_from_data() -> None:
    from aitop.probes.source_blocks import iterates_over_data

    assert iterates_over_data("for x, y in val_loader:")
    assert iterates_over_data("for i, (x, y) in enumerate(tqdm(loader)):")
    assert iterates_over_data("vl = sum(f(model(a), b).item() for a, b in val)")
    assert not iterates_over_data("for step in range(0, args.num_steps):")
    assert not iterates_over_data("for _ in trange(n):")
    assert not iterates_over_data("for i in itertools.count():")
    assert not iterates_over_data("while not done:")


def test_a_server_looping_over_its_requests_is_not_evaluation(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    script = write(tmp_path, "serve.py", SERVER)
    loop = f"serve ({script}:{{}})"
    text = raw(
        (f"{loop.format(4)};Queue.get (/usr/lib/python3.11/queue.py:171)", 20),
        (forward(loop.format(7)), 60),
    )
    counts = read(classifier, text)
    assert counts["eval"] == 0


def test_the_window_counts_evaluation_blocks_in_sample_order(
    classifier: PhaseClassifier, tmp_path: Path
) -> None:
    """Blocks are counted after the evaluation readings marked their samples, and
    the window keeps the phases it starts and ends in (a block across the edge
    between two windows is one)."""
    stacks = parse_raw(decorated_loop(tmp_path, (7, 4, 4, 2)))
    thread = stacks[0].thread_id
    assert thread is not None
    # eval x3, a step, eval x3, a step, eval: three passes, the last cut by the edge.
    step = [1, 1, 2, 2, 3]
    order = {thread: [0, 0, 0, *step, 0, 0, 0, *step, 0]}
    window = summarize_window(stacks, classifier, pid=1, t_start=0, t_end=1, source=read_line,
                              order=order)
    assert window.phase_counts["eval"] == 7
    assert window.phase_blocks == {"eval": 3, "checkpoint": 0}
    assert window.ends == ("eval", "eval")
    # Without the order nothing is counted.
    blind = summarize_window(stacks, classifier, pid=1, t_start=0, t_end=1, source=read_line)
    assert blind.phase_blocks == {} and blind.ends == ()

"""Every attention compiles in one graph, forward and backward (issue 42).

``torch.compile(kernel, fullgraph=True)`` raises at the first graph break, so a mechanism that
breaks (``random_feature`` broke 13 to 18 times: Dynamo refuses the non-contiguous halves of a
buffer as ``out=``) fails here. Each kernel is compiled with ``aot_eager`` (Dynamo's capture and
AOTAutograd's joint forward+backward graph, run by the eager kernels: the whole of what can
break, without C++ compilation) on q, k, v that require grad, and its output and gradients are
compared with the eager kernel's. ``random_feature``, whose compiled path differs from its eager
one (one expression instead of reused buffers), runs through Inductor as well, which generates
and compiles C++ on the CPU. A training kernel (redrawing its random features) is called for a
few steps and must not recompile at every step (Performer's, compiled alone, counts its forwards
before its graph: ``fullgraph=True`` refuses it while it redraws), and a compiled network trains
on one graph with every attention (with Dynamo's cheapest backend, its graphs counted).

About two minutes on the project's 2-core machine shared with other work, a third of it
Inductor's: ``slow``.
"""

from __future__ import annotations

import functools
import shutil
import types
from collections.abc import Iterator

import pytest
import torch
import torch._dynamo

from tests.support.compiling import counting_into
from tests.support.presets import tiny_vit
from vitattn.attention import ATTENTIONS
from vitattn.utils.recompiles import recompile_limit

pytestmark = pytest.mark.slow

BATCH, HEADS, TOKENS, HEAD_DIM = 1, 2, 32, 8

VARIANTS = [(name, {}) for name in sorted(ATTENTIONS)] + [
    ("softmax", {"impl": "naive"}),
    ("performer", {"impl": "autograd"}),
    ("random_feature", {"impl": "autograd"}),
]
"""Every registered attention at its defaults, and the other implementations a compiled CPU run
can take (``impl=flex`` of the sparse kernels builds its BlockMask outside the graph, and on a
CPU runs without gradients only: see ``docs/attention.md``)."""


def kernel(name: str, knobs: dict[str, str]) -> torch.nn.Module:
    torch.manual_seed(0)
    return ATTENTIONS[name](seq_len=TOKENS, heads=HEADS, head_dim=HEAD_DIM, **knobs)


def inputs() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [
        torch.randn(BATCH, HEADS, TOKENS, HEAD_DIM, generator=generator).requires_grad_()
        for _ in range(3)
    ]


def forward_backward(function: torch.nn.Module) -> list[torch.Tensor]:
    """The output and the gradients of q, k, v (zeros for a k the kernel ignores)."""
    q, k, v = inputs()
    out = function(q, k, v)
    (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
    return [out.detach()] + [torch.zeros_like(x) if x.grad is None else x.grad for x in (q, k, v)]


def assert_same(compiled: list[torch.Tensor], eager: list[torch.Tensor], tol: float) -> None:
    for what, a, b in zip(("out", "grad q", "grad k", "grad v"), compiled, eager, strict=True):
        scale = b.abs().max().item() + 1e-12
        assert (a - b).abs().max().item() <= tol * scale, what


@pytest.mark.parametrize(
    ("name", "knobs"), VARIANTS, ids=[f"{n}-{k.get('impl', 'default')}" for n, k in VARIANTS]
)
def test_every_attention_compiles_in_one_graph_forward_and_backward(
    name: str, knobs: dict[str, str]
) -> None:
    module = kernel(name, knobs).eval()
    eager = forward_backward(module)
    torch._dynamo.reset()
    compiled = forward_backward(torch.compile(module, fullgraph=True, backend="aot_eager"))
    assert_same(compiled, eager, tol=1e-5)


@pytest.mark.skipif(shutil.which("g++") is None, reason="Inductor on a CPU needs a C++ compiler")
def test_inductor_compiles_random_features_fused() -> None:
    module = kernel("random_feature", {}).eval()
    eager = forward_backward(module)
    torch._dynamo.reset()
    compiled = forward_backward(torch.compile(module, fullgraph=True, backend="inductor"))
    assert_same(compiled, eager, tol=1e-4)


@pytest.mark.parametrize("name", ["random_feature", "reformer"])
def test_a_training_kernel_that_draws_random_numbers_compiles_a_bounded_number_of_graphs(
    name: str,
) -> None:
    """Training redraws features (random_feature at every step) or buckets (reformer): six steps
    compiled with ``fullgraph=True`` compile at most three graphs, never one a step."""
    module = kernel(name, {}).train()
    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, backend=counting_into(graphs))
    for _ in range(6):
        out, *grads = forward_backward(compiled)
        assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)
    assert 1 <= len(graphs) <= 3


@pytest.mark.parametrize("redraw_interval", [1000, 3])
def test_a_performer_kernel_compiled_alone_trains_on_one_graph_redrawing_as_eager(
    redraw_interval: int,
) -> None:
    """``torch.compile(kernel)``, training: Performer's count of forwards since it last redrew,
    a Python int, was read in the graph, where Dynamo guards on it (an ``nn.Module``'s integers
    are static): at its default ``redraw_interval`` the kernel recompiled at every step, up to
    Dynamo's limit (8), then ran eager. Its count now runs untraced, before the graph: one graph
    for seven steps, each output the eager kernel's, the projection redrawn alike."""
    knobs = {"redraw_interval": redraw_interval}
    module, eager = kernel("performer", knobs).train(), kernel("performer", knobs).train()
    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    compiled = torch.compile(module, backend=counting_into(graphs))
    for _ in range(7):
        torch.manual_seed(3)
        mine = forward_backward(compiled)
        torch.manual_seed(3)
        assert_same(mine, forward_backward(eager), tol=1e-6)
    assert len(graphs) == 1
    torch.testing.assert_close(module.projection, eager.projection)
    # seven forwards: at redraw_interval=3 redrawn before the 4th and the 7th
    since_redraw = 7 if redraw_interval == 1000 else 1
    assert module.forwards_since_redraw == eager.forwards_since_redraw == since_redraw


def test_fullgraph_refuses_a_training_performer_kernel_at_once_unless_it_never_redraws() -> None:
    """Performer's count must run between graphs, so ``fullgraph=True`` refuses a training
    Performer at its first call (it used to fail at the ninth, after eight recompiles); with
    ``redraw_interval=0`` it counts nothing and trains on one graph, as in ``eval()`` at any
    interval (:func:`test_every_attention_compiles_in_one_graph_forward_and_backward`)."""
    torch._dynamo.reset()
    redrawing = torch.compile(kernel("performer", {}).train(), fullgraph=True, backend="eager")
    with pytest.raises(torch._dynamo.exc.Unsupported, match="disable"):
        forward_backward(redrawing)
    graphs: list[torch.fx.GraphModule] = []
    torch._dynamo.reset()
    never = kernel("performer", {"redraw_interval": 0}).train()
    compiled = torch.compile(never, fullgraph=True, backend=counting_into(graphs))
    for _ in range(4):
        forward_backward(compiled)
    assert len(graphs) == 1


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.GraphModule]]:
    """Every graph Dynamo compiles while the test runs, ``torch.compile``'s backend replaced by
    one that counts them and runs them as traced (no Inductor)."""
    made: list[torch.fx.GraphModule] = []
    counting = counting_into(made)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counting))
    torch._dynamo.reset()
    yield made
    torch._dynamo.reset()


def tiny_network(name: str, knobs: dict[str, object], compile: bool) -> torch.nn.Module:
    """:func:`tiny_vit` with attention ``name``, training."""
    return tiny_vit(name, knobs, compile=compile).train()


def train_steps(network: torch.nn.Module, steps: int) -> None:
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    for _ in range(steps):
        network(images).sum().backward()


@pytest.mark.parametrize(
    ("name", "knobs"),
    [(name, {}) for name in sorted(ATTENTIONS)] + [("performer", {"redraw_interval": 2})],
    ids=[*sorted(ATTENTIONS), "performer-redraw_interval=2"],
)
def test_a_compiled_network_trains_on_one_graph_with_every_attention(
    name: str, knobs: dict[str, object], graphs: list[torch.fx.GraphModule]
) -> None:
    """``model.compile``: the network's forward is one graph however many steps train, for every
    attention. Performer's redraw counter, a Python int, was read inside the graph, where Dynamo
    guards on it: the network recompiled at every step until Dynamo's limit (8), then ran eager
    for the rest of the run (on the H200, compiled trained no faster than eager). Its projection
    is redrawn when due all the same, as the eager network redraws it."""
    compiled, eager = tiny_network(name, knobs, True), tiny_network(name, knobs, False)
    torch.manual_seed(3)  # the same draws (random_feature's frequencies, say) in either network
    train_steps(compiled, 3)
    first = len(graphs)
    train_steps(compiled, 4)
    torch.manual_seed(3)
    train_steps(eager, 7)
    assert compiled._compiled_forward.ran_compiled()
    assert first == len(graphs) == 1
    for mine, theirs in zip(compiled.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(mine, theirs)  # Performer's projection redrawn alike
    counters = {
        m.forwards_since_redraw for m in compiled.modules() if getattr(m, "name", "") == "performer"
    }
    # seven training forwards: redrawn before the 3rd, 5th and 7th at redraw_interval=2
    assert counters == ({1} if knobs else {7} if name == "performer" else set())


@pytest.mark.parametrize(
    ("name", "knobs"),
    [(name, {}) for name in sorted(ATTENTIONS)] + [("performer", {"redraw_interval": 2})],
    ids=[*sorted(ATTENTIONS), "performer-redraw_interval=2"],
)
def test_a_network_its_user_compiles_whole_trains_on_one_graph(
    name: str, knobs: dict[str, object], graphs: list[torch.fx.GraphModule]
) -> None:
    """``torch.compile(network)`` written by a user (vitattn's own ``compile`` off): Dynamo
    traces the whole forward, the kernels' host work before it included. Traced, Performer's
    counter was a guard that failed at every step (at its default ``redraw_interval`` eight
    graphs in twelve steps, then eager); its count is now never traced (a graph break before
    the network's first operator), and the network trains on one graph, redrawing as the eager
    network does. Local attention built its layout inside the first graph, whose guard on the
    layout cache then failed once (two graphs); the layout is now buffers made with the kernel.
    ``fullgraph=True`` holds every attention but Performer, whose host work must run between
    graphs; each trains on one graph, its buffers (random draws) as the eager network's."""
    network, eager = tiny_network(name, knobs, False), tiny_network(name, knobs, False)
    compiled = torch.compile(network, fullgraph=name != "performer")
    torch.manual_seed(3)
    train_steps(compiled, 12)
    torch.manual_seed(3)
    train_steps(eager, 12)
    assert len(graphs) == 1
    for mine, theirs in zip(network.buffers(), eager.buffers(), strict=True):
        torch.testing.assert_close(mine, theirs)


def test_networks_compiled_one_after_another_in_a_process_each_compile(
    graphs: list[torch.fx.GraphModule],
) -> None:
    """The check's attentions, a multirun's jobs: one compiled network after another in one
    process, each of another structure. Dynamo keeps graphs per code object, up to its
    recompile limit (8): when every network compiled the class's one ``_forward``, the ninth
    and later trained eager without a word, and still said they had compiled."""
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    names = sorted(ATTENTIONS)
    assert len(names) > recompile_limit()
    for name in names:
        network = tiny_network(name, {}, True)
        before = len(graphs)
        network(images).sum().backward()
        assert len(graphs) == before + 1, name
        assert network._compiled_forward.ran_compiled(), name


def test_a_network_that_recompiles_at_every_step_says_it_ran_eager(
    graphs: list[torch.fx.GraphModule],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Performer's counter read inside the graph again (the network no longer counting for its
    kernels, the kernel counting traced): a recompile at every step until Dynamo's limit, eager
    after. The run says so, as it says so when Dynamo compiled nothing, and the check's and the
    bench's rows call it eager rather than compiled."""
    import vitattn.models.vit as vit
    from vitattn.attention.performer import PerformerAttention
    from vitattn.bench.train_speed import eager_status
    from vitattn.training.fitting import compiled

    monkeypatch.setattr(vit, "before_forward_of_kernels", lambda network, device: None)
    monkeypatch.setattr(PerformerAttention, "counts_every_forward", False)
    network = tiny_network("performer", {}, True)
    run = types.SimpleNamespace(net=network, device=torch.device("cpu"))
    train_steps(network, 2)
    assert compiled(run) and not network._compiled_forward.hit_recompile_limit()
    train_steps(network, recompile_limit() + 1)
    assert network._compiled_forward.graphs() == len(graphs) == recompile_limit()
    assert not compiled(run)
    assert "its recompile limit" in caplog.text
    assert eager_status(network).startswith("ran eager past Dynamo's recompile limit")

"""``impl=auto``: the chunked kernel on a CPU without timing; where timing is on, the faster
implementation per shape and gradient mode, chosen once and logged, and one out of memory
loses. The GPU's path is the same code with a CUDA synchronisation, run here on the CPU by
putting ``cpu`` among the timed devices."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
import torch

from vitattn.attention.common import autotune
from vitattn.attention.performer import PerformerAttention
from vitattn.attention.random_feature import RandomFeatureAttention

KERNELS = [PerformerAttention, RandomFeatureAttention]


@pytest.fixture(autouse=True)
def _fresh_choices() -> Iterator[None]:
    autotune.choices.cache_clear()
    yield
    autotune.choices.cache_clear()


@pytest.fixture
def timed_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(autotune, "TIMED_DEVICES", {"cpu"})


def choose(implementations: dict, *inputs: torch.Tensor, default: str, owner: str = "x") -> str:
    return autotune.Implementations(owner, implementations, default).choose(*inputs)


def qkv(n: int = 32, grad: bool = False) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(0)
    return tuple(
        torch.randn(2, 2, n, 16, generator=generator).requires_grad_(grad) for _ in range(3)
    )


class Counted:
    """An implementation that sleeps ``seconds`` a call and counts its calls and backwards."""

    def __init__(self, seconds: float = 0.0, error: Exception | None = None) -> None:
        self.seconds, self.error = seconds, error
        self.calls = 0
        self.backwards = 0

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.error is not None:
            raise self.error
        time.sleep(self.seconds)
        out = q * k + v
        if out.requires_grad:
            out.register_hook(self._count_backward)
        return out

    def _count_backward(self, grad: torch.Tensor) -> None:
        self.backwards += 1


def test_a_cpu_takes_the_default_without_timing() -> None:
    never = Counted(error=AssertionError("timed on a CPU"))
    chosen = choose({"autograd": never}, *qkv(), default="chunked", owner="performer")
    assert chosen == "chunked" and never.calls == 0


def test_the_faster_is_chosen_once_per_shape_and_logged_once(timed_cpu, caplog) -> None:
    slow, fast = Counted(0.01), Counted(0.0)
    implementations = {"chunked": slow, "autograd": fast}
    with caplog.at_level(logging.INFO, logger="vitattn.attention"):
        for _ in range(3):
            assert choose(implementations, *qkv(), default="chunked") == "autograd"
    assert (slow.calls, fast.calls) == (1 + autotune.REPEATS, 1 + autotune.REPEATS)
    assert slow.backwards == autotune.REPEATS + 1  # gradients are on: forward and backward
    lines = [r.getMessage() for r in caplog.records if "impl=auto" in r.getMessage()]
    assert len(lines) == 1 and "takes autograd (forward+backward: chunked" in lines[0]
    # Another shape, or no gradients, is measured anew; without gradients, no backward.
    choose(implementations, *qkv(n=48), default="chunked")
    with torch.no_grad():
        choose(implementations, *qkv(), default="chunked")
    assert slow.calls == 3 * (1 + autotune.REPEATS)
    assert slow.backwards == 2 * (1 + autotune.REPEATS)


def test_an_implementation_out_of_memory_loses(timed_cpu) -> None:
    out_of_memory = Counted(error=torch.OutOfMemoryError("CUDA out of memory"))
    implementations = {"autograd": out_of_memory, "chunked": Counted(0.005)}
    assert choose(implementations, *qkv(), default="autograd") == "chunked"


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_auto_is_the_chunked_kernel_on_a_cpu(kernel_class) -> None:
    torch.manual_seed(0)
    auto = kernel_class(seq_len=32, heads=2, head_dim=16).eval()
    assert auto.impl == "auto"
    chunked = kernel_class(seq_len=32, heads=2, head_dim=16, impl="chunked").eval()
    chunked.load_state_dict(auto.state_dict())
    q, k, v = qkv()
    assert torch.equal(auto(q, k, v), chunked(q, k, v))


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_timed_auto_runs_the_chosen_implementation_with_gradients(timed_cpu, kernel_class):
    torch.manual_seed(0)
    auto = kernel_class(seq_len=32, heads=2, head_dim=16).eval()
    q, k, v = qkv(grad=True)
    out = auto(q, k, v)
    out.sum().backward()
    [chosen] = set(autotune.choices().chosen.values())
    reference = kernel_class(seq_len=32, heads=2, head_dim=16, impl=chosen).eval()
    reference.load_state_dict(auto.state_dict())
    inputs = [x.detach().clone().requires_grad_() for x in (q, k, v)]
    expected = reference(*inputs)
    expected.sum().backward()
    assert torch.equal(out, expected)
    for got, want in zip((q, k, v), inputs, strict=True):
        assert torch.equal(got.grad, want.grad)


def test_untimed_keeps_a_measured_choice_and_times_nothing_new(timed_cpu) -> None:
    slow, fast = Counted(0.01), Counted(0.0)
    implementations = {"chunked": slow, "autograd": fast}
    choose(implementations, *qkv(), default="chunked")
    calls = slow.calls
    with autotune.untimed():
        assert choose(implementations, *qkv(), default="chunked") == "autograd"
        assert choose(implementations, *qkv(n=48), default="chunked") == "chunked"
    assert slow.calls == calls  # nothing timed inside
    assert choose(implementations, *qkv(n=48), default="chunked") == "autograd"


@pytest.mark.parametrize("kernel_class", KERNELS)
def test_flop_counts_see_one_call_not_the_timing(timed_cpu, kernel_class) -> None:
    from vitattn.models.flops import count_gflop

    torch.manual_seed(0)
    auto = kernel_class(seq_len=32, heads=2, head_dim=16)
    chunked = kernel_class(seq_len=32, heads=2, head_dim=16, impl="chunked")
    chunked.load_state_dict(auto.state_dict())
    counts = []
    for kernel in (auto, chunked):
        q, k, v = qkv(grad=True)
        counts.append(
            count_gflop(lambda kernel=kernel, q=q, k=k, v=v: kernel(q, k, v).sum().backward())
        )
    assert counts[0] == counts[1] > 0
    assert not autotune.choices().chosen  # nothing was timed, so nothing was chosen

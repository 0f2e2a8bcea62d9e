"""`compile: default` compiles each block and the final norm, head and loss together (Decoder.compile_parts, what the
H200 cells ran: docs/gpu-results.md). The compiled step must be the same arithmetic as the eager one: same loss, same
gradients, on the CPU with inductor's C++ backend; and the logits path (no targets) stays eager and unchanged."""
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # one inductor compile, ~30 s on 2 cores


def test_the_compiled_step_computes_what_the_eager_step_computes():
    from models.workloads.transformer import model as tfm
    from models.workloads.transformer.shapes import lookup

    shape = lookup("tiny")
    eager, compiled = tfm.build(shape, seed=0), tfm.build(shape, seed=0)
    compiled.compile_parts(None)
    assert compiled.head_loss is not tfm.head_loss and eager.head_loss is tfm.head_loss
    windows = torch.randint(0, shape.vocab, (2, 33), generator=torch.Generator().manual_seed(1))
    loss_eager, loss_compiled = tfm.window_loss(eager, windows), tfm.window_loss(compiled, windows)
    assert loss_compiled.detach().item() == pytest.approx(loss_eager.detach().item(), rel=1e-5)
    loss_eager.backward()
    loss_compiled.backward()
    worst = max((a.grad - b.grad).abs().max().item() for a, b in zip(eager.parameters(), compiled.parameters()))
    assert worst < 1e-5
    # The loss through forward(idx, targets) is the cross-entropy of the logits forward(idx) gives.
    with torch.no_grad():
        logits = eager(windows[:, :-1])
        direct = torch.nn.functional.cross_entropy(logits.reshape(-1, shape.vocab), windows[:, 1:].reshape(-1))
        assert float(eager(windows[:, :-1], windows[:, 1:])) == pytest.approx(float(direct), rel=1e-6)

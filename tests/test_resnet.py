"""The workload's model is ResNet-50 v1.5."""
import torch

from models.workloads.resnet50.model_torch import ResNet50


def test_parameter_count_is_resnet50_v1_5():
    model = ResNet50()
    assert sum(p.numel() for p in model.parameters()) == 25_557_032


def test_v1_5_strides_in_the_3x3_conv_and_trains_one_step():
    model = ResNet50(num_classes=10)
    first_down = model.layers[3]  # first block of stage 2
    assert first_down.conv1.stride == (1, 1) and first_down.conv2.stride == (2, 2)
    x, y = torch.randn(2, 3, 64, 64), torch.tensor([1, 2])
    out = model(x)
    assert out.shape == (2, 10)
    loss = torch.nn.functional.cross_entropy(out, y)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())


def test_channels_last_input_keeps_activations_nhwc_and_gradients_nchw_on_cpu():
    """The CPU workload converts only its input: every convolution still runs NHWC, and the gradients Horovod
    reduces stay in the default layout (no layout copies around the allreduce)."""
    model = ResNet50(num_classes=10)
    layouts = []
    for m in model.modules():
        if isinstance(m, torch.nn.Conv2d):
            m.register_forward_hook(lambda mod, inp, out: layouts.append(
                out.is_contiguous(memory_format=torch.channels_last)))
    x = torch.randn(2, 3, 64, 64).contiguous(memory_format=torch.channels_last)
    torch.nn.functional.cross_entropy(model(x), torch.tensor([1, 2])).backward()
    assert len(layouts) == 53 and all(layouts)
    assert all(p.grad.is_contiguous() for p in model.parameters())

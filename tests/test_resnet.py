"""The workload's model is ResNet-50 v1.5."""
import torch

from models.resnet import ResNet50


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

"""ResNet-50 v1.5 for TensorFlow/Keras, built to match models/workloads/resnet50/model_torch.py layer for layer.

keras.applications.ResNet50 is v1 (stride in the first 1x1 convolution, biased convolutions: 25,636,712 trainable
parameters), so it would not be the same model as the PyTorch workload's. This one has 25,557,032 trainable
parameters, like torchvision's and NVIDIA's ResNet-50 v1.5.
"""
from __future__ import annotations


def resnet50(keras, image_size: int, num_classes: int = 1000, data_format: str = "channels_last"):
    """`keras` is the tf.keras module in use (tf_keras under TF_USE_LEGACY_KERAS=1)."""
    layers = keras.layers
    axis = -1 if data_format == "channels_last" else 1
    shape = (image_size, image_size, 3) if data_format == "channels_last" else (3, image_size, image_size)

    def conv(x, filters, kernel, stride=1, name=None):
        return layers.Conv2D(filters, kernel, strides=stride, padding="same", use_bias=False,
                             data_format=data_format, kernel_initializer="he_normal", name=name)(x)

    def bn(x, zero=False):
        return layers.BatchNormalization(axis=axis, momentum=0.9, epsilon=1e-5,
                                         gamma_initializer="zeros" if zero else "ones")(x)

    def bottleneck(x, width, stride, project):
        shortcut = x
        if project:
            shortcut = bn(conv(x, width * 4, 1, stride))
        y = layers.ReLU()(bn(conv(x, width, 1)))
        y = layers.ReLU()(bn(conv(y, width, 3, stride)))  # v1.5: the stride is here
        y = bn(conv(y, width * 4, 1), zero=True)  # zero-init: each block starts as identity
        return layers.ReLU()(layers.Add()([shortcut, y]))

    inputs = keras.Input(shape=shape)
    x = layers.ReLU()(bn(conv(inputs, 64, 7, 2)))
    x = layers.MaxPooling2D(3, strides=2, padding="same", data_format=data_format)(x)
    in_ch = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            x = bottleneck(x, width, stride if i == 0 else 1, project=(i == 0 and (stride != 1 or in_ch != width * 4)))
            in_ch = width * 4
    x = layers.GlobalAveragePooling2D(data_format=data_format)(x)
    # Logits in float32 even under a mixed-precision policy: the softmax/loss stays stable.
    outputs = layers.Dense(num_classes, dtype="float32")(x)
    return keras.Model(inputs, outputs, name="resnet50_v1_5")

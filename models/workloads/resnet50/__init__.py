"""ResNet-50 v1.5: the model in PyTorch (model_torch.py) and TensorFlow/Keras (model_tf.py), one worker per
framework (pytorch_worker.py, tensorflow_worker.py, keras_worker.py), and its FLOPs per image (flops.py)."""

"""A small convolutional network (two convolutions with batch norm, max pooling, a linear head)
and its workload: images and labels, cross-entropy (python/tests/test_own_model.py)."""

import torch
import torch.nn as nn
import torch.nn.functional as F
import memscope


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))


def workload(batch=32):
    return memscope.Workload(
        model=Net(),
        inputs=lambda: (torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))),
        loss=lambda m, b: F.cross_entropy(m(b[0]), b[1]))

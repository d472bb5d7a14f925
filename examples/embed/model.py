"""The model examples/embed/serve.cpp serves: a small conv net.

Weights come from a fixed seed, so every process that loads this file holds
the same model. forward returns (logits, probabilities).
"""
import torch
from torch import nn


class SmallConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, kernel_size=3, padding=1)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, images):
        features = torch.relu(self.conv(images)).flatten(1)
        logits = self.head(features)
        return logits, logits.softmax(dim=-1)


torch.manual_seed(0)
model = SmallConvNet().eval()

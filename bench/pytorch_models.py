"""LeNet, CifarNet and AlexNet in PyTorch, as the C++ models define them (TF SAME
padding, TF LRN), for the benchmarks that compare against PyTorch eager
(pytorch_train_step.py on the CPU, pytorch_gpu_reference.py on a GPU).
`shape` is one example's (channels, height, width)."""
import torch.nn as nn
import torch.nn.functional as F


def _pool_same_3x3_s2(x):
    # TF SAME for a 3x3/2 window pads 0 before and 1 after (24 -> 12, 12 -> 6).
    return F.max_pool2d(F.pad(x, (0, 1, 0, 1), value=float("-inf")), 3, 2)


class LeNet(nn.Module):
    shape = (1, 28, 28)

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5, padding=2)
        self.conv2 = nn.Conv2d(20, 50, 5, padding=2)
        self.fc1 = nn.Linear(7 * 7 * 50, 500)
        self.fc2 = nn.Linear(500, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2, 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2, 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class CifarNet(nn.Module):
    shape = (3, 24, 24)

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 5, padding=2)
        self.conv2 = nn.Conv2d(64, 64, 5, padding=2)
        self.fc1 = nn.Linear(6 * 6 * 64, 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, 10)
        # TF LRN(depth_radius=4, bias=1, alpha=0.001/9, beta=0.75): torch's
        # LocalResponseNorm divides alpha by the window size (9), so scale it back.
        self.lrn = nn.LocalResponseNorm(9, alpha=0.001 / 9 * 9, beta=0.75, k=1.0)

    def forward(self, x):
        x = self.lrn(_pool_same_3x3_s2(F.relu(self.conv1(x))))
        x = _pool_same_3x3_s2(self.lrn(F.relu(self.conv2(x))))
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc3(F.relu(self.fc2(x)))


class AlexNet(nn.Module):
    """train/model/models.cpp's alexnet: the authors' one-tower form of the
    two-GPU net (groups=2 where the towers were split), TF SAME convolutions,
    VALID 3x3/2 pooling, TF LRN, dropout 0.5, `num_classes` logits (10, as the
    C++ model's ModelOptions default)."""
    shape = (3, 224, 224)

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 96, 11, stride=4)  # SAME on 224: pad 3 before, 4 after (forward)
        self.conv2 = nn.Conv2d(96, 256, 5, padding=2, groups=2)
        self.conv3 = nn.Conv2d(256, 384, 3, padding=1)
        self.conv4 = nn.Conv2d(384, 384, 3, padding=1, groups=2)
        self.conv5 = nn.Conv2d(384, 256, 3, padding=1, groups=2)
        self.fc6 = nn.Linear(6 * 6 * 256, 4096)
        self.fc7 = nn.Linear(4096, 4096)
        self.logits = nn.Linear(4096, num_classes)
        self.lrn = nn.LocalResponseNorm(9, alpha=0.001 / 9 * 9, beta=0.75, k=1.0)

    def forward(self, x):
        x = F.max_pool2d(self.lrn(F.relu(self.conv1(F.pad(x, (3, 4, 3, 4))))), 3, 2)
        x = F.max_pool2d(self.lrn(F.relu(self.conv2(x))), 3, 2)
        x = F.relu(self.conv5(F.relu(self.conv4(F.relu(self.conv3(x))))))
        x = F.max_pool2d(x, 3, 2).flatten(1)
        x = F.dropout(F.relu(self.fc6(x)), 0.5, self.training)
        x = F.dropout(F.relu(self.fc7(x)), 0.5, self.training)
        return self.logits(x)

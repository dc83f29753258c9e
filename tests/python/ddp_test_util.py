"""What the DDP hook tests share: a hook wrapper that records every bucket's
input and output, and a few SGD steps on random data."""
import torch


def recording_hook(hook, record):
    """hook, also appending [bucket index, iteration, input copy, output copy]
    for every bucket it reduces to record."""
    def recording(state, bucket):
        entry = [bucket.index(), state.iteration, bucket.buffer().clone()]
        record.append(entry)

        def keep(fut):
            entry.append(fut.value().clone())
            return fut.value()
        return hook(state, bucket).then(keep)
    return recording


def train_random(model, rank, steps, batch, lr=0.1):
    """steps of SGD on this rank's own random data (64 features, 10 classes)."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x, y = torch.randn(batch, 64, generator=gen), torch.randint(0, 10, (batch,), generator=gen)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

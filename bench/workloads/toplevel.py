# CUDA started at a script's top level (the collector calibrates there), then a loop whose launches
# wait on a pure-Python function: the CPU samples' lines, and the report's code to fix (`sample`).
#   python3 toplevel.py   (under gaptop record; docs/gpu-todo.md)
import torch
x = torch.ones(1024, device="cuda")  # CUDA starts at the script's top level: calibration there


def sample(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def train(steps):
    for _ in range(steps):
        sample(30000)
        for _ in range(20):
            x.add_(1)
        torch.cuda.synchronize()


train(150)
print("TOPLEVEL done", flush=True)
